// The hot paths of Logbook under ordo-one/benchmark. Each benchmark works on a small store
// (10,000 Items) so that a run takes seconds (names are shell-safe: the tool names threshold
// files after them); the thresholds checked in under Thresholds/
// catch a regression in time, allocations or memory:
//
//   swift package benchmark                                   # run them
//   swift package benchmark thresholds check                  # compare with Thresholds/
//   swift package --allow-writing-to-package-directory benchmark thresholds update
import Benchmark
import Foundation
import LogbookEngine
import LogbookGraph

final class Item: ManagedObject {
    @LogbookGraph.Managed("name") var name: String
    @LogbookGraph.Managed("createdAt") var createdAt: Date
    @LogbookGraph.Managed("done") var done: Bool
}

let itemCount = 10_000
let base = 1_700_000_000.0

func model() throws -> ManagedObjectModel {
    try ManagedObjectModel {
        EntityDescription("Item", class: Item.self) {
            AttributeDescription("name", .string)
            AttributeDescription("createdAt", .date, indexed: true)
            AttributeDescription("done", .bool, default: false)
        }
    }
}

func freshDirectory() -> String {
    FileManager.default.temporaryDirectory.appendingPathComponent("logbook-benchmark-\(UUID().uuidString)").path
}

/// `itemCount` Items through a batch insert.
func batchInsertItems(_ context: ManagedObjectContext) throws {
    _ = try context.execute(
        BatchInsertRequest(entityName: "Item", count: itemCount) { i, row in
            row.set("Item \(i + 1)", forKey: "name")
            row.set(Date(timeIntervalSince1970: base + Double(i + 1) / 1000), forKey: "createdAt")
            row.set(i % 2 == 1, forKey: "done")
        })
}

/// A container on a fresh directory, without syncs (the write benchmarks time the code, not the disk).
func scratchContainer(_ dir: String) throws -> (PersistentContainer, ManagedObjectContext) {
    var options = ContainerOptions()
    options.durability = .none
    let container = try PersistentContainer(name: "Items", model: model(), directory: dir, options: options)
    return (container, container.newContext(concurrencyType: .confinement))
}

/// A store of `itemCount` Items, written once for the read benchmarks.
func populatedStore() throws -> String {
    let dir = freshDirectory()
    let container = try PersistentContainer(name: "Items", model: model(), directory: dir)
    try batchInsertItems(container.newContext(concurrencyType: .confinement))
    try container.close()
    return dir
}

/// An engine store (no syncs) holding `itemCount` values, with an index entry each if asked.
func engineStore(_ dir: String, indexed: Bool) throws -> Store {
    var options = StoreOptions()
    options.durability = .none
    let store = try Store.open(at: dir, options: options)
    var t = Transaction()
    for i in 1...itemCount {
        let key = EngineKey(keyspace: 1, id: UInt64(i))
        if indexed {
            t.put(key, value: Array("Item \(i)".utf8), indexKey: IndexKey(index: 1, orderedUInt64: UInt64(i)))
        } else {
            t.put(key, value: Array("Item \(i)".utf8))
        }
    }
    try store.commit(t)
    return store
}

/// `mallocTolerance`: the percentage by which the allocation count may exceed its threshold.
func configuration(mallocTolerance: Double = 10) -> Benchmark.Configuration {
    Benchmark.Configuration(
        metrics: [.wallClock, .mallocCountTotal, .peakMemoryResident],
        warmupIterations: 1,
        scalingFactor: .one,
        maxDuration: .seconds(3),
        maxIterations: 50,
        // Tolerances applied when checking against the static thresholds: the machines this runs
        // on are shared and noisy, so time gets a wide margin; allocation counts are nearly exact
        // (see the engine's walk and snapshot read below for the exception).
        thresholds: [
            .wallClock: .init(relative: [.p50: 50.0], absolute: [.p50: 5_000_000]),
            .mallocCountTotal: .init(relative: [.p90: mallocTolerance]),
            .peakMemoryResident: .init(relative: [.p90: 25.0])
        ]
    )
}

/// The store the read benchmarks share (benchmarks run one at a time).
nonisolated(unsafe) var shared: PersistentContainer?
/// Its directory, removed when the process exits: the tool runs each benchmark in a process of
/// its own, and every read benchmark's process makes the store anew (four stores left in the
/// temporary directory by every run, before).
nonisolated(unsafe) var sharedDirectory: String?

func container() throws -> PersistentContainer {
    if let shared { return shared }
    let directory = try populatedStore()
    sharedDirectory = directory
    atexit {
        if let directory = sharedDirectory { try? FileManager.default.removeItem(atPath: directory) }
    }
    let c = try PersistentContainer(name: "Items", model: model(), directory: directory)
    shared = c
    return c
}

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = configuration()

    Benchmark("engine-commit-10k-puts") { benchmark in
        let dir = freshDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var options = StoreOptions()
        options.durability = .none
        let store = try Store.open(at: dir, options: options)
        benchmark.startMeasurement()
        var t = Transaction()
        for i in 1...itemCount {
            t.put(
                EngineKey(keyspace: 1, id: UInt64(i)), value: Array("Item \(i)".utf8),
                indexKey: IndexKey(index: 1, tag: 1, orderedDouble: base + Double(i)))
        }
        try store.commit(t)
        benchmark.stopMeasurement()
        try store.close()
    }

    // The engine's inner steps, through its public API (these replace `logbook bench micro`).
    Benchmark("engine-encode-10k-puts") { benchmark in
        benchmark.startMeasurement()
        var t = Transaction()
        for i in 1...itemCount {
            t.put(
                EngineKey(keyspace: 1, id: UInt64(i)), value: Array("Item \(i)".utf8),
                indexKey: IndexKey(index: 1, orderedUInt64: UInt64(i)))
        }
        benchmark.stopMeasurement()
        blackHole(t.encodedSize)
    }

    // These two make about 17 allocations, and the count varied by 2 from run to run (on the
    // last stop's code too: the runtime's and Dispatch's own allocations landing in the measured
    // span), which is 12 %: they get 20 %.
    Benchmark("engine-snapshot-read-10k-values", configuration: configuration(mallocTolerance: 20)) { benchmark in
        let dir = freshDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let store = try engineStore(dir, indexed: false)
        let snapshot = store.snapshot()
        let keys = (1...itemCount).map { EngineKey(keyspace: 1, id: UInt64($0)).rawValue }
        benchmark.startMeasurement()
        var bytes = 0
        try snapshot.forEachValue(forKeys: keys) { _, _, raw in bytes &+= raw.count }
        benchmark.stopMeasurement()
        blackHole(bytes)
        try store.close()
    }

    Benchmark("engine-index-walk-10k", configuration: configuration(mallocTolerance: 20)) { benchmark in
        let dir = freshDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let store = try engineStore(dir, indexed: true)
        let snapshot = store.snapshot()
        benchmark.startMeasurement()
        let keys = try snapshot.primaryKeys(index: 1)
        benchmark.stopMeasurement()
        precondition(keys.count == itemCount)
        try store.close()
    }

    Benchmark("context-insert-save-10k-items") { benchmark in
        let dir = freshDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let (container, context) = try scratchContainer(dir)
        benchmark.startMeasurement()
        for i in 1...itemCount {
            let item = try context.insert(Item.self)
            item.name = "Item \(i)"
            item.createdAt = Date(timeIntervalSince1970: base + Double(i) / 1000)
            item.done = i % 2 == 0
        }
        try context.save()
        benchmark.stopMeasurement()
        try container.close()
    }

    Benchmark("batch-insert-10k-items") { benchmark in
        let dir = freshDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let (container, context) = try scratchContainer(dir)
        benchmark.startMeasurement()
        try batchInsertItems(context)
        benchmark.stopMeasurement()
        try container.close()
    }

    Benchmark("fetch-10k-items-sorted-read-names") { benchmark in
        let context = try container().newContext(concurrencyType: .confinement)
        var request = FetchRequest<Item>()
        request.sortDescriptors = [FetchSortDescriptor(key: "createdAt")]
        benchmark.startMeasurement()
        var chars = 0
        for item in try context.fetch(request) { chars &+= item.name.utf8.count }
        benchmark.stopMeasurement()
        blackHole(chars)
    }

    Benchmark("fetch-1k-item-range") { benchmark in
        let context = try container().newContext(concurrencyType: .confinement)
        var request = FetchRequest<Item>()
        request.predicate = try FetchPredicate(
            format: "createdAt >= %@ AND createdAt < %@",
            Date(timeIntervalSince1970: base + 4), Date(timeIntervalSince1970: base + 5))
        request.sortDescriptors = [FetchSortDescriptor(key: "createdAt")]
        benchmark.startMeasurement()
        let items = try context.fetch(request)
        benchmark.stopMeasurement()
        precondition(items.count == 1000)
    }

    Benchmark("count-from-index", configuration: .init(scalingFactor: .kilo)) { benchmark in
        let context = try container().newContext(concurrencyType: .confinement)
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations { blackHole(try context.count(for: FetchRequest<Item>())) }
        benchmark.stopMeasurement()
    }

    Benchmark("predicate-parse-evaluate", configuration: .init(scalingFactor: .kilo)) { benchmark in
        let context = try container().newContext(concurrencyType: .confinement)
        var request = FetchRequest<Item>()
        request.fetchLimit = 1
        let item = try context.fetch(request)[0]
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations {
            let p = try FetchPredicate(
                format: "name BEGINSWITH[c] %@ AND (done == NO OR createdAt > %@)", "item",
                Date(timeIntervalSince1970: base))
            blackHole(try p.evaluate(with: item))
        }
        benchmark.stopMeasurement()
    }
}
