import ArgumentParser
import Foundation
import LogbookEngine
import LogbookGraph

struct BenchCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench",
        abstract: "Run a benchmark workload of docs/benchmarks.md.",
        discussion: """
            Workloads: populate (W1; --batch for the batch insert), fetch (W2-W4, in a new process on a W1 store), \
            update (W5), relations (W6), commits (W7; --commits C --per K), open (W8, in a new process), \
            compact (W9, after W5), snapshot (W10), contexts (W13: releasing large results, an asynchronous fetch's hand-over), ordered (W14: moves in a 100,000-member ordered relationship), \
            scan (W11: queries no index answers, on a W1 store), joins (W12: a to-one relationship's index and a compound index), \
            follow (W15: from a commit in another process to this one's remote-change handler; --commits C), \
            sync (W18: upload, download and COPY of a W1 store through PostgreSQL, then the latency of C saves; --postgres URL), \
            all (each of them, N = --count), and engine \
            (the storage engine alone). Each measured phase prints one line: PHASE key=value ... \
            (JSON with --json). Without --store, a fresh directory under the temporary directory is used and named on standard error.
            """)

    @Argument(help: "The workload to run.") var workload: String
    @Option(help: "Store directory (default: a fresh directory under the temporary directory).") var store: String?
    @Option(help: "Number of Items (W1); W6 uses count/10 employees and count/1000 managers.") var count = 1_000_000
    @Option(help: "Durability: full, normal or none.") var durability = "full"
    @Flag(help: "populate: the batch-insert variant.") var batch = false
    @Option(help: "commits: number of saves.") var commits = 10_000
    @Option(help: "commits: Items per save.") var per = 1
    @Option(help: "commits: compact the store after every this many saves (default: only as the policy says).")
    var compactEvery: Int?
    @Flag(help: "Print each phase as a JSON object on its own line.") var json = false
    @Flag(help: "Open the workloads' stores with persistent history tracking on.") var history = false
    @Flag(help: "commits: stamp each Item's createdAt with the time of its save (what `follow` measures from).")
    var stamp = false
    @Flag(help: "follow: the follower is a writing container (beside the writer) rather than a read-only one.")
    var writing = false
    @Option(help: "sync: the PostgreSQL server (its superuser's URL, or a schema owner's).") var postgres: String?
    @Option(
        help:
            "Journal segment size in bytes for the Items workloads (default 64 MiB; down to 1 KiB here, below a store's 64 KiB minimum, so that small ones roll over often)."
    )
    var segmentSize: Int?
    @OptionGroup var key: KeyOption

    func run() throws {
        guard let durability = Durability(rawValue: durability) else {
            throw ValidationError("durability must be full, normal or none")
        }
        reportsJSON = json
        tracksHistory = history
        itemsSegmentSize = segmentSize
        do {
            if let file = key.keyFile { benchKey = (try EncryptionKey(contentsOfFile: file), file) }
            try run(workload, durability)
        } catch let e as ValidationError {
            throw e
        } catch let e as ExitCode {
            throw e
        } catch {
            fail(error)
        }
    }

    func freshStore(_ name: String) -> String {
        let path = temporaryStorePath("logbook-\(name)")
        printError("store: \(path)")
        return path
    }

    /// A W1 store: the one given, else one populated by a child process.
    func populatedStore() throws -> String {
        if let store { return store }
        let path = freshStore("w1")
        try child(["populate", "--store", path], output: .standardError)
        return path
    }

    func run(_ workload: String, _ durability: Durability) throws {
        switch workload {
        case "engine": try engine(durability)
        case "populate":
            let path = store ?? freshStore(batch ? "populate-batch" : "populate")
            if batch {
                try populateBatch(store: path, count: count, durability: durability)
            } else {
                try populate(store: path, count: count, durability: durability)
            }
        case "sync":
            guard let postgres else {
                throw ValidationError("sync needs --postgres URL (a superuser's or a schema owner's)")
            }
            let path = store ?? freshStore("sync")
            if store == nil { try populate(store: path, count: count, durability: .normal) }
            try syncWorkload(store: path, count: count, url: postgres, saves: commits == 10_000 ? 200 : commits)
        case "fetch":
            try fetchWorkloads(store: try populatedStore(), count: count)
        case "open":
            try openToCount(store: try populatedStore())
        case "update":
            let path = store ?? freshStore("update")
            if store == nil { try populate(store: path, count: count, durability: durability) }
            try updateWorkloads(store: path, durability: durability)
        case "compact":
            let path = store ?? freshStore("compact")
            if store == nil {
                try child(["update", "--store", path], output: .standardError, populateFirst: path)
            }
            try compactWorkload(store: path)
        case "relations":
            try relationsWorkload(store: store ?? freshStore("relations"), count: count, durability: durability)
        case "commits":
            try commitsWorkload(
                store: store ?? freshStore("commits"), commits: commits, per: per, durability: durability,
                compactEvery: compactEvery, stamp: stamp)
        case "follow":
            let path = store ?? freshStore("follow")
            try followWorkload(store: path, commits: commits, writing: writing) { arguments in
                let p = Process()
                p.executableURL = URL(
                    fileURLWithPath: (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
                        ?? CommandLine.arguments[0])
                p.arguments = ["bench"] + arguments + (benchKey.map { ["--key-file", $0.file] } ?? [])
                p.standardOutput = FileHandle.nullDevice
                try p.run()
                p.waitUntilExit()
                guard p.terminationStatus == 0 else {
                    throw LogbookError(.store, "logbook bench \(arguments.joined(separator: " ")) failed")
                }
            }
        case "snapshot":
            try snapshotWorkload(store: try populatedStore(), count: count, durability: durability)
        case "contexts":
            try contextsWorkload(store: try populatedStore())
        case "scan":
            try scanWorkload(store: try populatedStore())
        case "joins":
            try relationshipQueryWorkload(
                store: store ?? freshStore("joins"), count: count, durability: durability)
        case "ordered":
            try orderedWorkload(store: store ?? freshStore("ordered"), members: 100_000, durability: durability)
        case "all":
            try all()
        default:
            throw ValidationError(
                "unknown workload '\(workload)'; use populate, fetch, update, relations, commits, open, compact, snapshot, contexts, ordered, scan, joins, all or engine"
            )
        }
    }

    /// Every workload, each in a process of its own (so that each starts cold and its peak
    /// memory is its own), on stores under one fresh directory.
    func all() throws {
        let w1 = freshStore("all-w1")
        try child(["populate", "--store", w1])
        try child(["populate", "--batch", "--store", freshStore("all-w1-batch")])
        try child(["fetch", "--store", w1])
        try child(["open", "--store", w1])
        try child(["snapshot", "--store", w1])
        try child(["contexts", "--store", w1])
        try child(["ordered", "--store", freshStore("all-w14")])
        try child(["scan", "--store", w1])
        try child(["joins", "--store", freshStore("all-w12")])
        try child(["update", "--store", w1])
        try child(["compact", "--store", w1])
        try child(["relations", "--store", freshStore("all-w6")])
        try child(["commits", "--store", freshStore("all-w7")])
    }

    enum ChildOutput { case standardOutput, standardError }

    /// Runs `logbook bench ARGS` (with this run's count, durability and format) and waits.
    func child(_ arguments: [String], output: ChildOutput = .standardOutput, populateFirst: String? = nil) throws {
        if let path = populateFirst { try child(["populate", "--store", path], output: output) }
        let p = Process()
        p.executableURL = URL(
            fileURLWithPath: (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
                ?? CommandLine.arguments[0])
        var args = ["bench"] + arguments + ["--count", "\(count)", "--durability", durability]
        if arguments.first == "commits" { args += ["--commits", "\(commits)", "--per", "\(per)"] }
        if json { args.append("--json") }
        if history { args.append("--history") }
        if let benchKey { args += ["--key-file", benchKey.file] }
        p.arguments = args
        if output == .standardError { p.standardOutput = FileHandle.standardError }
        try p.run()
        p.waitUntilExit()
        guard p.terminationStatus == 0 else {
            throw LogbookError(
                .store, "logbook \(args.joined(separator: " ")) failed with status \(p.terminationStatus)")
        }
    }

    func engine(_ durability: Durability) throws {
        let path = store ?? temporaryStorePath("logbook-bench")
        printError("store: \(path)")
        var options = StoreOptions()
        options.durability = durability
        options.checkpointInterval = 0
        options.encryptionKey = benchKey?.key
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
            value.append(73)
            value.append(116)
            value.append(101)
            value.append(109)
            value.append(32)  // "Item "
            appendDecimal(i, to: &value)
            let bits = (base + Double(i) / 1000).bitPattern
            for shift in stride(from: 0, to: 64, by: 8) {
                value.append(UInt8(truncatingIfNeeded: bits >> UInt64(shift)))
            }
            value.append(i % 2 == 0 ? 1 : 0)
            values.append(value)
        }
        let built = now()
        for i in 1...count {
            t.put(
                EngineKey(keyspace: 1, id: UInt64(i)), value: values[i - 1],
                indexKey: IndexKey(index: 1, tag: 1, orderedDouble: base + Double(i) / 1000))
        }
        let encoded = now()
        try s.commit(t)
        let committed = now()
        let engineSeconds = (created - start) + (committed - built)
        report(
            "engine_append",
            [
                "records": count, "seconds": engineSeconds, "create_seconds": created - start,
                "put_seconds": encoded - built, "commit_seconds": committed - encoded,
                "records_per_s": Int(Double(count) / engineSeconds), "peak_rss_mb": peakRSSMegabytes()
            ])
        let closeStart = now()
        try s.close()
        report("engine_close", ["seconds": now() - closeStart, "file_bytes": directoryBytes(path)])
        let openStart = now()
        let reopened = try Store.open(at: path, options: options)
        let n = reopened.snapshot().count(inKeyspace: 1)
        let opened = now()
        let stats = reopened.statistics()
        report(
            "engine_open",
            [
                "records": n, "seconds": opened - openStart,
                "index_bytes_per_record": Double(stats.indexMemoryBytes) / Double(max(1, n))
            ])
        try reopened.close()
    }
}

func appendDecimal(_ n: Int, to out: inout [UInt8]) {
    var digits:
        (
            UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8,
            UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8
        ) =
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
