import Foundation
import LogbookEngine
import LogbookGraph
import LogbookSync
import Logging
import PostgresNIO

/// W18: sync through PostgreSQL (issue 47). On a W1 store: the initial upload (a first push of
/// every Item), the initial download into an empty store (a pull), both in objects per second,
/// beside `COPY` of the same rows (id, name, createdAt, done) into a table of the same server —
/// the limit of what any client can load; then the latency from a save in one store to the
/// merged change in another, both syncing in the background (p50, p99 over `saves` saves).
/// `url` is the server's superuser (or a schema owner's) URL; the workload makes a schema of
/// its own and drops it.
func syncWorkload(store path: String, count: Int, url: String, saves: Int) throws {
    try waitFor {
        let schema = "bench_\(UUID().uuidString.prefix(8).lowercased())"
        let configuration = try SyncConfiguration(url: url, schema: schema, batchSize: 5000)
        let model = try BenchmarkModel.model()
        try await SyncServer.prepare(model: model, configuration: configuration)
        defer {
            let done = DispatchSemaphore(value: 0)
            Task {
                try? await SyncServer.withRawConnection(configuration) { c, logger in
                    try await c.query(
                        PostgresQuery(unsafeSQL: "DROP SCHEMA IF EXISTS \(schema) CASCADE"), logger: logger)
                    try await c.query(
                        PostgresQuery(unsafeSQL: "DROP SCHEMA IF EXISTS \(schema)_latency CASCADE"), logger: logger)
                }
                done.signal()
            }
            done.wait()
        }
        // The latency's stores sync in a schema of their own (not beside the million Items).
        let latencyConfiguration = try SyncConfiguration(url: url, schema: schema + "_latency", batchSize: 5000)
        func open(_ directory: String, _ configuration: SyncConfiguration = configuration) throws -> (
            PersistentContainer, SyncEngine
        ) {
            var options = ContainerOptions()
            options.persistentHistoryTracking = true
            options.historyRecordsMemberChanges = true
            options.durability = .normal
            let container = try PersistentContainer(name: "Items", model: model, directory: directory, options: options)
            return (container, try SyncEngine(container: container, configuration: configuration))
        }

        // The upload.
        let (source, up) = try open(path)
        let items = try source.newContext(concurrencyType: .confinement).count(
            for: FetchRequest<ManagedObject>(entityName: "Item"))
        var t0 = now()
        let pushed = try await up.push()
        var seconds = now() - t0
        report(
            "sync_upload",
            [
                "records": items, "changes": pushed.pushedChanges, "seconds": seconds,
                "records_per_s": Int(Double(items) / seconds)
            ])

        // The download into an empty store.
        let emptyPath = temporaryStorePath("logbook-sync-download")
        defer { try? FileManager.default.removeItem(atPath: emptyPath) }
        let (target, down) = try open(emptyPath)
        t0 = now()
        let pulled = try await down.pull()
        seconds = now() - t0
        let arrived = try target.newContext(concurrencyType: .confinement).count(
            for: FetchRequest<ManagedObject>(entityName: "Item"))
        report(
            "sync_download",
            [
                "records": arrived, "applied": pulled.appliedChanges, "seconds": seconds,
                "records_per_s": Int(Double(arrived) / seconds)
            ])
        guard arrived == items else {
            throw SyncError(.store, "the download has \(arrived) Items, the store \(items)")
        }

        // COPY of the same rows, text format, streamed in 1 MiB buffers (the text is made first).
        let reader = source.newContext(concurrencyType: .confinement)
        var lines: [String] = []
        lines.reserveCapacity(items)
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        for o in try reader.fetch(FetchRequest<Item>(entityName: "Item")) {
            lines.append(
                "\(UUID().uuidString)\t\(o.name)\t\(formatter.string(from: o.createdAt))\t\(o.done ? "t" : "f")\n")
        }
        let copied: Double = try await SyncServer.withRawConnection(configuration) { c, logger in
            try await c.query(
                PostgresQuery(
                    unsafeSQL:
                        "CREATE TABLE \(schema).copy_items (id uuid PRIMARY KEY, name text, \"createdAt\" timestamptz, done boolean)"
                ), logger: logger)
            // postgres-nio quotes the table's name as one identifier: the schema goes in the path.
            try await c.query(PostgresQuery(unsafeSQL: "SET search_path TO \(schema)"), logger: logger)
            let start = now()
            try await c.copyFrom(
                table: "copy_items", columns: ["id", "name", "createdAt", "done"], logger: logger
            ) {
                writer in
                var buffer = ByteBuffer()
                for line in lines {
                    buffer.writeString(line)
                    if buffer.readableBytes > 1 << 20 {
                        try await writer.write(buffer)
                        buffer.clear()
                    }
                }
                if buffer.readableBytes > 0 { try await writer.write(buffer) }
            }
            return now() - start
        }
        report("copy", ["records": items, "seconds": copied, "records_per_s": Int(Double(items) / copied)])
        try source.close()
        try target.close()

        // Latency: two small stores syncing in the background.
        guard saves > 0 else { return }
        let aPath = temporaryStorePath("logbook-sync-a")
        let bPath = temporaryStorePath("logbook-sync-b")
        defer {
            try? FileManager.default.removeItem(atPath: aPath)
            try? FileManager.default.removeItem(atPath: bPath)
        }
        try await SyncServer.prepare(model: model, configuration: latencyConfiguration)
        let (a, syncA) = try open(aPath, latencyConfiguration)
        let (b, syncB) = try open(bPath, latencyConfiguration)
        try await syncA.sync()
        try await syncB.sync()
        await syncA.start(interval: .seconds(2))
        await syncB.start(interval: .seconds(2))
        let writer = a.newContext(concurrencyType: .confinement)
        let watcher = b.newContext(concurrencyType: .confinement)
        var latencies: [Double] = []
        for i in 0..<saves {
            let item = try writer.insert(Item.self)
            item.name = "Latency \(i)"
            item.createdAt = Date()
            item.done = false
            let start = now()
            try writer.save()
            while try watcher.count(for: FetchRequest<ManagedObject>(entityName: "Item")) < i + 1 {
                if now() - start > 10 { throw SyncError(.store, "save \(i) did not reach the other store in 10 s") }
                try await Task.sleep(for: .microseconds(500))
            }
            latencies.append(now() - start)
            try await Task.sleep(for: .milliseconds(10))
        }
        await syncA.stop()
        await syncB.stop()
        try a.close()
        try b.close()
        let sorted = latencies.sorted()
        func percentile(_ p: Double) -> Double {
            sorted[min(sorted.count - 1, Int((Double(sorted.count) * p).rounded(.up)) - 1)] * 1000
        }
        report(
            "sync_latency",
            [
                "saves": saves, "p50_ms": (percentile(0.5) * 100).rounded() / 100,
                "p99_ms": (percentile(0.99) * 100).rounded() / 100,
                "max_ms": ((sorted.last ?? 0) * 100_000).rounded() / 100
            ])
    }
}
