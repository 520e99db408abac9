import ArgumentParser
@_spi(Benchmarks) import LogbookEngine
import Foundation

struct Bench: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run a benchmark workload.",
        discussion: "Workloads: engine (the storage engine alone: N small records in one transaction, then reopen).")

    @Argument(help: "The workload to run.") var workload: String
    @Option(help: "Store directory (default: a fresh directory under the temporary directory).") var store: String?
    @Option(help: "Number of records.") var count = 1_000_000
    @Option(help: "Durability: full, normal or none.") var durability = "full"

    func run() throws {
        guard let durability = Durability(rawValue: durability) else {
            throw ValidationError("durability must be full, normal or none")
        }
        switch workload {
        case "engine": try engine(durability)
        case "micro":
            for (name, seconds) in EngineMicrobenchmarks.run(count: count) {
                report("micro_\(name)", ["records": count, "seconds": seconds, "ns_per_record": seconds * 1e9 / Double(count)])
            }
        default: throw ValidationError("unknown workload '\(workload)'")
        }
    }

    func engine(_ durability: Durability) throws {
        let path = store ?? temporaryStorePath("logbook-bench")
        printError("store: \(path)")
        var options = StoreOptions()
        options.durability = durability
        options.checkpointInterval = 0
        let base = 1_700_000_000.0
        let start = now()
        let s = try Store.open(at: path, options: options)
        var t = Transaction()
        var value = [UInt8]()
        value.reserveCapacity(64)
        for i in 1...count {
            // A record shaped like the benchmark Item: name, createdAt, done.
            value.removeAll(keepingCapacity: true)
            value.append(contentsOf: "Item \(i)".utf8)
            withUnsafeBytes(of: (base + Double(i) / 1000).bitPattern.littleEndian) { value.append(contentsOf: $0) }
            value.append(i % 2 == 0 ? 1 : 0)
            t.put(UInt64(1) << 48 | UInt64(i), value: value,
                  indexKey: IndexKey(index: 1, orderedDouble: base + Double(i) / 1000))
        }
        let encoded = now()
        try s.commit(t)
        let committed = now()
        report("engine_append", ["records": count, "seconds": committed - start, "encode_seconds": encoded - start,
                                 "commit_seconds": committed - encoded, "records_per_s": Int(Double(count) / (committed - start)),
                                 "peak_rss_mb": peakRSSMegabytes()])
        let closeStart = now()
        try s.close()
        report("engine_close", ["seconds": now() - closeStart, "file_bytes": directoryBytes(path)])
        let openStart = now()
        let reopened = try Store.open(at: path, options: options)
        let n = reopened.snapshot().count(inKeyspace: 1)
        let opened = now()
        let stats = reopened.statistics()
        report("engine_open", ["records": n, "seconds": opened - openStart,
                               "index_bytes_per_record": Double(stats.indexMemoryBytes) / Double(max(1, n))])
        try reopened.close()
    }
}

struct Stats: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Print a store's segments, sizes and counts.")
    @Argument(help: "The store directory.") var directory: String

    func run() throws {
        var options = StoreOptions()
        options.readOnly = true
        let store = try Store.open(at: directory, options: options)
        let s = store.statistics()
        print("version: \(s.version)")
        print("segments: \(s.segments.count) (\(s.fileBytes) bytes)")
        for seg in s.segments { print("  \(seg.number): \(seg.bytes) bytes") }
        print("live bytes: \(s.liveBytes), dead bytes: \(s.deadBytes)")
        print("keys: \(s.keyCount)")
        for (ks, n) in s.keysPerKeyspace.sorted(by: { $0.key < $1.key }) { print("  keyspace \(ks): \(n)") }
        for (ix, n) in s.indexEntries.sorted(by: { $0.key < $1.key }) { print("  index \(ix): \(n) entries") }
        print("sets: \(s.setCount)")
        print("index memory: \(s.indexMemoryBytes) bytes")
        print("pinned snapshots: \(s.pinnedSnapshots)")
        print("checkpoint: \(s.checkpoint.map(String.init) ?? "none")")
    }
}
