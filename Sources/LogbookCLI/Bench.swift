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
        case "fetch":
            guard let path = store else { throw ValidationError("fetch needs --store DIR of a populated store") }
            try fetchSorted(store: path)
        case "populate":
            let path = store ?? temporaryStorePath("logbook-populate")
            printError("store: \(path)")
            try populate(store: path, count: count, durability: durability)
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
        let created = now()
        var t = Transaction()
        var value = [UInt8]()
        value.reserveCapacity(64)
        // The records are built first, so that the put phase times the engine alone.
        var values: [[UInt8]] = []
        values.reserveCapacity(count)
        for i in 1...count {
            // A record shaped like the benchmark Item: name, createdAt, done. The name's digits
            // are written by hand so that the figure is the engine's, not string formatting's.
            value.removeAll(keepingCapacity: true)
            value.append(73); value.append(116); value.append(101); value.append(109); value.append(32)  // "Item "
            appendDecimal(i, to: &value)
            let bits = (base + Double(i) / 1000).bitPattern
            for shift in stride(from: 0, to: 64, by: 8) { value.append(UInt8(truncatingIfNeeded: bits >> UInt64(shift))) }
            value.append(i % 2 == 0 ? 1 : 0)
            values.append(value)
        }
        let built = now()
        for i in 1...count {
            t.put(UInt64(1) << 48 | UInt64(i), value: values[i - 1],
                  indexKey: IndexKey(index: 1, tag: 1, orderedDouble: base + Double(i) / 1000))
        }
        let encoded = now()
        try s.commit(t)
        let committed = now()
        let engineSeconds = (created - start) + (committed - built)
        report("engine_append", ["records": count, "seconds": engineSeconds, "create_seconds": created - start,
                                 "put_seconds": encoded - built, "commit_seconds": committed - encoded,
                                 "records_per_s": Int(Double(count) / engineSeconds), "peak_rss_mb": peakRSSMegabytes()])
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

func appendDecimal(_ n: Int, to out: inout [UInt8]) {
    var digits: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8,
                 UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) =
        (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    var v = n
    var count = 0
    withUnsafeMutableBytes(of: &digits) { d in
        repeat {
            d[19 - count] = UInt8(48 + v % 10)
            v /= 10
            count += 1
        } while v > 0
        for j in (20 - count)..<20 { out.append(d[j]) }
    }
}
