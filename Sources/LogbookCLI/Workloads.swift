import Foundation
import LogbookEngine
import LogbookGraph
import Synchronization

/// The benchmark data of docs/benchmarks.md ("The data").
enum BenchmarkModel {
    /// Item i: name "Item i", createdAt = 1,700,000,000 s + i ms, done = (i % 2 == 0).
    static let base = Date(timeIntervalSince1970: 1_700_000_000)

    static func model() throws -> ManagedObjectModel {
        try ManagedObjectModel {
            EntityDescription("Item", class: Item.self) {
                AttributeDescription("name", .string)
                AttributeDescription("createdAt", .date, indexed: true)
                AttributeDescription("done", .bool, default: false)
            }
            EntityDescription("Manager") {
                AttributeDescription("firstName", .string)
                AttributeDescription("lastName", .string)
                AttributeDescription("age", .int32, optional: true)
                RelationshipDescription("employees", to: "Employee", inverse: "managers", toMany: true)
            }
            EntityDescription("Employee") {
                AttributeDescription("firstName", .string)
                AttributeDescription("lastName", .string)
                AttributeDescription("age", .int32, optional: true)
                RelationshipDescription("managers", to: "Manager", inverse: "employees", toMany: true)
            }
        }
    }
}

final class Item: ManagedObject {
    @Managed("name") var name: String
    @Managed("createdAt") var createdAt: Date
    @Managed("done") var done: Bool
}

func openItems(_ path: String, durability: Durability = .full) throws -> PersistentContainer {
    var options = ContainerOptions()
    options.durability = durability
    options.persistentHistoryTracking = tracksHistory
    options.encryptionKey = benchKey?.key
    if let itemsSegmentSize {
        // A benchmark's segments may be smaller than a store's usual minimum (64 KiB), down to
        // 1 KiB: to measure rollovers and compactions.
        options.segmentSize = itemsSegmentSize
        options.allowsTinySegments = true
    }
    return try PersistentContainer(name: "Items", model: BenchmarkModel.model(), directory: path, options: options)
}

func itemDate(_ i: Int) -> Date {
    Date(timeIntervalSince1970: BenchmarkModel.base.timeIntervalSince1970 + Double(i) / 1000)
}

/// W1: insert N Items as managed objects in a context, one save with full durability.
func populate(store path: String, count: Int, durability: Durability) throws {
    let start = now()
    let container = try openItems(path, durability: durability)
    let context = container.newContext(concurrencyType: .confinement)
    let base = BenchmarkModel.base.timeIntervalSince1970
    var progress = ProgressBar("populate", total: count)
    for i in 1...count {
        let item = try context.insert(Item.self)
        item.name = "Item \(i)"
        item.createdAt = Date(timeIntervalSince1970: base + Double(i) / 1000)
        item.done = i % 2 == 0
        if i & 0x3FFF == 0 { progress.update(i) }
    }
    progress.finish()
    let inserted = now()
    let insertPeak = peakRSSMegabytes()
    try context.save()
    let saved = now()
    context.reset()
    try container.close()
    report(
        "populate",
        [
            "records": count, "seconds": saved - start, "insert_seconds": inserted - start,
            "save_seconds": saved - inserted,
            "records_per_s": Int(Double(count) / (saved - start)), "peak_rss_mb": peakRSSMegabytes(),
            "insert_peak_rss_mb": insertPeak,
            "file_bytes": directoryBytes(path)
        ])
}

/// W1, batch variant: the same Items through a batch insert, without managed objects.
func populateBatch(store path: String, count: Int, durability: Durability) throws {
    let start = now()
    let container = try openItems(path, durability: durability)
    let context = container.newContext(concurrencyType: .confinement)
    let base = BenchmarkModel.base.timeIntervalSince1970
    var progress = ProgressBar("populate --batch", total: count)
    let request = BatchInsertRequest(entityName: "Item", count: count) { i, row in
        let n = i + 1
        row.set("Item \(n)", forKey: "name")
        row.set(Date(timeIntervalSince1970: base + Double(n) / 1000), forKey: "createdAt")
        row.set(n % 2 == 0, forKey: "done")
        if n & 0x3FFF == 0 { progress.update(n) }
    }
    let result = try context.execute(request)
    progress.finish()
    let saved = now()
    try container.close()
    report(
        "populate_batch",
        [
            "records": result.count, "seconds": saved - start, "records_per_s": Int(Double(count) / (saved - start)),
            "peak_rss_mb": peakRSSMegabytes(), "file_bytes": directoryBytes(path)
        ])
}

/// W3's range: Items 400,001…500,000 of a million (createdAt ≥ base + 0.4·N ms and < base +
/// 0.5·N ms: a tenth of the store for any N).
func rangeRequest(count: Int) throws -> FetchRequest<Item> {
    var range = FetchRequest<Item>()
    range.predicate = try FetchPredicate(
        format: "createdAt >= %@ AND createdAt < %@", itemDate(count * 2 / 5), itemDate(count / 2))
    range.sortDescriptors = [FetchSortDescriptor(key: "createdAt")]
    return range
}

/// W2–W4: open a W1 store, fetch every Item sorted by createdAt as objects reading every
/// name; the 100,000-Item range ten times; the count ten times.
func fetchWorkloads(store path: String, count: Int) throws {
    let start = now()
    let container = try openItems(path)
    let context = container.newContext(concurrencyType: .confinement)
    let opened = now()
    report("open", ["seconds": opened - start, "file_bytes": directoryBytes(path)])
    var request = FetchRequest<Item>()
    request.sortDescriptors = [FetchSortDescriptor(key: "createdAt")]
    var chars = 0
    var items = try context.fetch(request)
    let materialized = now()
    for item in items { chars &+= item.name.utf8.count }
    let fetched = now()
    report(
        "fetch_sorted",
        [
            "records": items.count, "seconds": fetched - opened, "fetch_seconds": materialized - opened,
            "read_seconds": fetched - materialized, "peak_rss_mb": peakRSSMegabytes()
        ])
    items = []
    context.reset()
    let range = try rangeRequest(count: count)
    var times: [Double] = []
    var found = 0
    for _ in 0..<10 {
        let t0 = now()
        let objects = try context.fetch(range)
        for item in objects { chars &+= item.name.utf8.count }
        times.append(now() - t0)
        found = objects.count
    }
    report("fetch_range", ["records": found, "seconds": median(times), "first_seconds": times[0]])
    context.reset()
    times = []
    var n = 0
    for _ in 0..<10 {
        let t0 = now()
        n = try context.count(for: FetchRequest<Item>())
        times.append(now() - t0)
    }
    report("count", ["records": n, "seconds": median(times), "first_seconds": times[0]])
    _ = chars
    try container.close()
}

/// W8: open the W1 store and answer the count of Items.
func openToCount(store path: String) throws {
    let start = now()
    let container = try openItems(path)
    let context = container.newContext(concurrencyType: .confinement)
    let n = try context.count(for: FetchRequest<Item>())
    let answered = now()
    report(
        "open",
        [
            "records": n, "seconds": answered - start,
            "index_bytes_per_record": Double(container.store.statistics().indexMemoryBytes) / Double(max(1, n))
        ])
    try container.close()
}

/// W5: (a) done = true on every Item in one batch update (half are done already: their records
/// are not written again); (b) through a context: fetch all, rename each, one save; then (a)
/// again with done = false, which changes every record.
func updateWorkloads(store path: String, durability: Durability) throws {
    let container = try openItems(path, durability: durability)
    let context = container.newContext(concurrencyType: .confinement)
    let t0 = now()
    var batch = BatchUpdateRequest(entityName: "Item")
    batch.propertiesToUpdate = ["done": true]
    let changed = try context.execute(batch).count
    let t1 = now()
    report(
        "update_batch",
        ["records": changed, "seconds": t1 - t0, "peak_rss_mb": peakRSSMegabytes(), "file_bytes": directoryBytes(path)])
    let t2 = now()
    let items = try context.fetch(FetchRequest<Item>())
    let fetched = now()
    var progress = ProgressBar("update", total: items.count)
    for (n, item) in items.enumerated() {
        // Item i is the i-th inserted: its serial is i.
        item.name = "Renamed \(item.objectID.serial)"
        if n & 0x3FFF == 0 { progress.update(n) }
    }
    progress.finish()
    let renamed = now()
    try context.save()
    let t3 = now()
    report(
        "update_context",
        [
            "records": items.count, "seconds": t3 - t2, "fetch_seconds": fetched - t2,
            "change_seconds": renamed - fetched,
            "save_seconds": t3 - renamed, "peak_rss_mb": peakRSSMegabytes(), "file_bytes": directoryBytes(path)
        ])
    // After W5b, so that W5b's figures compare with runs before this line was added; on a
    // context that holds no objects, as (a)'s did.
    context.reset()
    batch.propertiesToUpdate = ["done": false]
    let t4 = now()
    let cleared = try context.execute(batch).count
    let t5 = now()
    report(
        "update_batch_every_record",
        [
            "records": cleared, "seconds": t5 - t4, "peak_rss_mb": peakRSSMegabytes(),
            "file_bytes": directoryBytes(path)
        ])
    try container.close()
}

/// W9: compact the store (after W5, which rewrote every Item twice).
func compactWorkload(store path: String) throws {
    var options = StoreOptions()
    options.compaction = .manual
    options.encryptionKey = benchKey?.key
    let store = try Store.open(at: path, options: options)
    let before = store.statistics()
    let r = try store.compact()
    let after = store.statistics()
    try store.close()
    // Live and dead bytes are the journal's record bytes (before compression).
    // The rate is of the rewrite (the checkpoint written at the end is timed apart).
    report(
        "compact",
        [
            "seconds": r.seconds, "rewrite_seconds": r.seconds - r.checkpointSeconds,
            "checkpoint_seconds": r.checkpointSeconds, "switch_ms": r.switchSeconds * 1000,
            "bytes_before": r.bytesBefore, "bytes_after": r.bytesAfter,
            "live_bytes": before.liveBytes, "dead_bytes_before": before.deadBytes, "dead_bytes_after": after.deadBytes,
            "live_mb_per_s": Double(r.liveBytesRewritten) / 1e6 / max(r.seconds - r.checkpointSeconds, 1e-9),
            "dead_reclaimed_pct": 100 * (1 - Double(after.deadBytes) / Double(max(1, before.deadBytes)))
        ])
}

/// W6: 1,000 managers, 100,000 employees, employee i linked to managers i%1000, (i·7)%1000,
/// (i·13)%1000; one save; then each manager's count of employees.
func relationsWorkload(store path: String, count: Int, durability: Durability) throws {
    let employees = max(1, count / 10)
    let managersCount = max(1, employees / 100)
    let start = now()
    let container = try openItems(path, durability: durability)
    let context = container.newContext(concurrencyType: .confinement)
    var managers: [ManagedObject] = []
    for m in 0..<managersCount {
        let o = try context.insertNewObject(forEntityName: "Manager")
        try o.setValue("M\(m)", forKey: "firstName")
        try o.setValue("Manager", forKey: "lastName")
        managers.append(o)
    }
    var links = 0
    var progress = ProgressBar("relations", total: employees)
    for i in 0..<employees {
        let e = try context.insertNewObject(forEntityName: "Employee")
        try e.setValue("E\(i)", forKey: "firstName")
        try e.setValue("Employee", forKey: "lastName")
        try e.setValue(Int32(i % 100), forKey: "age")
        let targets = Set([i % managersCount, (i * 7) % managersCount, (i * 13) % managersCount])
        links += targets.count
        try e.add(targets.map { managers[$0] }, toRelationship: "managers")
        if i & 0xFFF == 0 { progress.update(i) }
    }
    progress.finish()
    try context.save()
    let saved = now()
    report(
        "relations_populate",
        [
            "records": employees + managersCount, "links": links, "seconds": saved - start,
            "peak_rss_mb": peakRSSMegabytes(), "file_bytes": directoryBytes(path)
        ])
    context.reset()
    // The save hands the objects it inserted to another thread to free; traverses run while
    // it did took about 1.6 ms against 0.50–0.65 ms after it, the two threads contending for
    // the allocator. The traverse is timed on a quiet store (as PeerRunner times both
    // libraries').
    usleep(200_000)
    let t0 = now()
    let fresh = container.newContext(concurrencyType: .confinement)
    var total = 0
    for m in try fresh.fetch(FetchRequest<ManagedObject>(entityName: "Manager")) {
        total += try m.count(forKey: "employees")
    }
    let t1 = now()
    report("relations_traverse", ["records": managersCount, "links": total, "seconds": t1 - t0])
    try container.close()
}

/// W7: C saves of K inserted Items each.
/// `stamp`: each Item's createdAt is the time of its save (what `follow` measures from).
func commitsWorkload(
    store path: String, commits: Int, per: Int, durability: Durability, compactEvery: Int? = nil, stamp: Bool = false
) throws {
    let container = try openItems(path, durability: durability)
    let context = container.newContext(concurrencyType: .confinement)
    var progress = ProgressBar("commits", total: commits)
    let t0 = now()
    var i = 0
    for c in 0..<commits {
        for _ in 0..<per {
            i += 1
            let item = try context.insert(Item.self)
            item.name = "Item \(i)"
            item.createdAt = stamp ? Date() : itemDate(i)
            item.done = i % 2 == 0
        }
        try context.save()
        if stamp { usleep(2_000) }  // commits apart, as an app's are
        if let compactEvery, compactEvery > 0, (c + 1) % compactEvery == 0 { try container.store.compact() }
        if c & 0xFF == 0 { progress.update(c) }
    }
    progress.finish()
    let seconds = now() - t0
    try container.close()
    report(
        "commits",
        [
            "records": i, "commits": commits, "seconds": seconds,
            "mean_us_per_commit": seconds * 1e6 / Double(max(1, commits)),
            "durability": durability.rawValue, "file_bytes": directoryBytes(path)
        ])
}

/// W15: a writer in another process (`logbook bench commits --stamp --history`) makes
/// `commits` saves; this process follows it with a read-only container that observes remote
/// changes (`writing`: a writing container, one of several writers). Each Item's latency is the
/// time from its save (its createdAt, stamped by the writer) to the moment the remote-change
/// handler here read it; p50, p99 and the maximum.
func followWorkload(store path: String, commits: Int, writing: Bool = false, writer: ([String]) throws -> Void) throws {
    try writer(["commits", "--store", path, "--commits", "1", "--per", "1", "--history"])
    var options = ContainerOptions()
    options.readOnly = !writing
    options.persistentHistoryTracking = writing
    options.observesRemoteChanges = true
    options.encryptionKey = benchKey?.key
    let follower = try PersistentContainer(
        name: "Items", model: BenchmarkModel.model(), directory: path, options: options)
    let reader = follower.newContext(concurrencyType: .privateQueue)
    let latencies = Locked<[Double]>([])
    let notifications = Locked(0)
    let observation = follower.observeRemoteChanges { change in
        let heard = Date()
        notifications.withLock { $0 += 1 }
        let ids = change.transactions.flatMap { $0.changes.filter { $0.changeType == .insert }.map(\.changedObjectID) }
        let found: [Double] = reader.performAndWait {
            ids.compactMap { id in
                guard let item = try? reader.existingObject(with: id),
                    let stamped = try? item.value(forKey: "createdAt") as? Date
                else { return nil }
                return heard.timeIntervalSince(stamped)
            }
        }
        latencies.withLock { $0 += found }
    }
    let t0 = now()
    try writer([
        "commits", "--store", path, "--commits", "\(commits)", "--per", "1", "--history", "--stamp", "--durability",
        "normal"
    ])
    // The last commits' notifications.
    let deadline = now() + 10
    while latencies.withLock({ $0.count }) < commits && now() < deadline { usleep(10_000) }
    observation.cancel()
    let seconds = now() - t0
    let sorted = latencies.withLock { $0 }.sorted()
    func percentile(_ p: Double) -> Double {
        sorted.isEmpty ? .nan : sorted[min(sorted.count - 1, Int((Double(sorted.count) * p).rounded(.up)) - 1)] * 1000
    }
    report(
        writing ? "follow_writing" : "follow",
        [
            "commits": commits, "received": sorted.count, "notifications": notifications.withLock { $0 },
            "p50_ms": (percentile(0.5) * 1000).rounded() / 1000, "p99_ms": (percentile(0.99) * 1000).rounded() / 1000,
            "max_ms": ((sorted.last ?? .nan) * 1e6).rounded() / 1000, "seconds": seconds
        ])
    try follower.close()
}

/// W10: a background context fetches the W3 range repeatedly while the main context makes 100
/// small saves; the fetch latency while writing against idle, and how long each save took.
func snapshotWorkload(store path: String, count: Int, durability: Durability) throws {
    let container = try openItems(path, durability: durability)
    let reader = container.newBackgroundContext()
    let writer = container.newContext(concurrencyType: .confinement)
    let request = try rangeRequest(count: count)
    let fetched = Mutex(0)
    @Sendable func fetchOnce() -> Double {
        reader.performAndWait {
            let t0 = now()
            let items = (try? reader.fetch(request)) ?? []
            var chars = 0
            for item in items { chars &+= item.name.utf8.count }
            let t = now() - t0
            fetched.withLock { $0 = items.count + chars * 0 }
            reader.reset()
            return t
        }
    }
    var idle: [Double] = []
    for _ in 0..<5 { idle.append(fetchOnce()) }
    // The reader runs on its own thread for as long as the writer writes.
    let done = Mutex(false)
    let busy = Mutex<[Double]>([])
    let readerThread = Thread {
        while !done.withLock({ $0 }) {
            let t = fetchOnce()
            busy.withLock { $0.append(t) }
        }
    }
    readerThread.start()
    var saves: [Double] = []
    for i in 0..<100 {
        let item = try writer.insert(Item.self)
        item.name = "Snapshot \(i)"
        item.createdAt = itemDate(2_000_000 + i)
        item.done = false
        let t0 = now()
        try writer.save()
        saves.append(now() - t0)
        usleep(2000)
    }
    // Let the fetch in flight finish, so each timing is of a fetch that overlapped the saves.
    done.withLock { $0 = true }
    while busy.withLock({ $0.count }) == 0 { usleep(1000) }
    let writing = busy.withLock { $0 }
    let idleMedian = median(idle)
    let busyMedian = median(writing)
    report(
        "snapshot_fetch",
        [
            "records": fetched.withLock { $0 }, "seconds": busyMedian, "idle_seconds": idleMedian,
            "ratio": busyMedian / idleMedian,
            "fetches_while_writing": writing.count, "saves": saves.count,
            "save_median_ms": median(saves) * 1000, "save_max_ms": (saves.max() ?? 0) * 1000
        ])
    while readerThread.isExecuting { usleep(1000) }
    try container.close()
}

/// W13: on the W1 store, in a background context: fetch all Items sorted by createdAt and time
/// dropping the result on the context's queue, once as a direct fetch (every name read first)
/// and once batched (`fetchBatchSize` 1,000, faults not touched); then an asynchronous fetch of all Items while a probe
/// queues a block on the context every 2 ms and records how long each waited (the longest wait
/// is the longest the queue was held).
func contextsWorkload(store path: String) throws {
    let container = try openItems(path)
    let context = container.newBackgroundContext()
    var request = FetchRequest<Item>()
    request.sortDescriptors = [FetchSortDescriptor(key: "createdAt")]
    for batchSize in [0, 1000] {
        request.fetchBatchSize = batchSize
        let sorted = request
        let (n, fetchSeconds, release) = try context.performAndWait { () throws -> (Int, Double, Double) in
            let t0 = now()
            var items = try context.fetch(sorted)
            var chars = 0
            // The batched result is released as it came: faults whose batches were not loaded.
            if batchSize == 0 { for item in items { chars &+= item.name.utf8.count } }
            let t1 = now()
            let n = items.count + chars * 0
            items = []
            let t2 = now()
            context.reset()
            return (n, t1 - t0, t2 - t1)
        }
        report(
            batchSize == 0 ? "release_direct" : "release_batched",
            ["records": n, "seconds": release, "fetch_seconds": fetchSeconds, "peak_rss_mb": peakRSSMegabytes()])
    }
    // The asynchronous fetch, with the probe running until its completion has run.
    let done = Mutex(false)
    let waits = Mutex<[Double]>([])
    let probe = Thread {
        while !done.withLock({ $0 }) {
            let queued = now()
            context.perform { waits.withLock { $0.append(now() - queued) } }
            usleep(2000)
        }
    }
    let finished = DispatchSemaphore(value: 0)
    let outcome = Mutex<(count: Int, seconds: Double)>((0, 0))
    // The result is kept past the probe (released with the context's objects at the end), so
    // that the measured waits are the fetch's, not the release of what it returned.
    let kept = Mutex<[Item]>([])
    var all = FetchRequest<Item>()
    all.sortDescriptors = [FetchSortDescriptor(key: "createdAt")]
    let start = now()
    let async = AsynchronousFetchRequest(fetchRequest: all) { result in
        outcome.withLock { $0 = (result.finalResult?.count ?? -1, now() - start) }
        kept.withLock { $0 = result.finalResult ?? [] }
        finished.signal()
    }
    probe.start()
    context.perform { _ = try? context.execute(async) }
    finished.wait()
    // A few more probes after the completion, then stop.
    usleep(20_000)
    done.withLock { $0 = true }
    while probe.isExecuting { usleep(1000) }
    context.performAndWait {
        kept.withLock { $0 = [] }
        context.reset()
    }
    let measured = waits.withLock { $0 }
    let result = outcome.withLock { $0 }
    report(
        "async_handover",
        [
            "records": result.count, "seconds": result.seconds, "probes": measured.count,
            "queue_wait_max_ms": (measured.max() ?? 0) * 1000, "queue_wait_median_ms": median(measured) * 1000,
            "peak_rss_mb": peakRSSMegabytes()
        ])
    try container.close()
}

/// W14: an ordered to-many relationship of 100,000 members (one save, durability full), then
/// 100 moves of a member from the middle to elsewhere in the middle, each saved on its own;
/// seconds and journal bytes written per move (the store's size growth over the moves).
func orderedWorkload(store path: String, members: Int, durability: Durability) throws {
    let model = try ManagedObjectModel {
        EntityDescription("Playlist") {
            AttributeDescription("name", .string)
            RelationshipDescription("tracks", to: "Track", inverse: "playlist", toMany: true, ordered: true)
        }
        EntityDescription("Track") {
            AttributeDescription("title", .string)
            RelationshipDescription("playlist", to: "Playlist", inverse: "tracks")
        }
    }
    var options = ContainerOptions()
    options.durability = durability
    options.compaction = .manual
    options.encryptionKey = benchKey?.key
    let container = try PersistentContainer(name: "Ordered", model: model, directory: path, options: options)
    let context = container.newContext(concurrencyType: .confinement)
    let start = now()
    let playlist = try context.insertNewObject(forEntityName: "Playlist")
    try playlist.setValue("long", forKey: "name")
    var tracks: [ManagedObject] = []
    tracks.reserveCapacity(members)
    for i in 0..<members {
        let t = try context.insertNewObject(forEntityName: "Track")
        try t.setValue("Track \(i)", forKey: "title")
        tracks.append(t)
    }
    try playlist.setValue(tracks, forKey: "tracks")
    try context.save()
    let populated = now()
    report("ordered_populate", ["members": members, "seconds": populated - start, "file_bytes": directoryBytes(path)])
    let moves = 100
    let before = directoryBytes(path)
    var times: [Double] = []
    for m in 0..<moves {
        let from = members / 3 + m * 7
        let to = members * 2 / 3 - m * 5
        let t0 = now()
        try playlist.moveObject(at: from, to: to, inRelationship: "tracks")
        try context.save()
        times.append(now() - t0)
    }
    let grown = directoryBytes(path) - before
    report(
        "ordered_move",
        [
            "members": members, "moves": moves, "seconds_per_move": median(times), "max_seconds": times.max() ?? 0,
            "bytes_per_move": grown / moves
        ])
    try container.close()
}
