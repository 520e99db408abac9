import Dispatch
import Foundation
import LogbookTestSupport
import Testing

@testable import LogbookEngine

/// The crash-state explorer (after ALICE and CrashMonkey): each workload runs over the
/// in-memory `FaultFileSystem`, which records every mutating file-system operation (creations,
/// writes, syncs, truncations, renames, removals, directory syncs) as a numbered step. For
/// every step the workload is run again and stopped there, and the states a power loss can
/// leave are enumerated under a page-granular model: of the writes no sync made durable, any
/// subset of their pages (4 KiB, or 512-byte sectors for torn pages), the file's new or old
/// length, and the directory's new or last-synced entries. Every state must open, must equal
/// the state after some acknowledged commit at or after the last one known durable (or the
/// commit in flight, whole), must pass `verify`, and must take a new commit.
///
/// CI explores a bounded number of states per workload (`LOGBOOK_CRASH_EXPLORE_STATES`, 400 by
/// default); `LOGBOOK_CRASH_EXPLORE=exhaustive` explores every step with every subset of up to
/// 14 choices (a seeded sample of 256 beyond that).
@Suite struct CrashStateExplorerTests {
    static let directory = "/store"

    /// What a workload's commits did: the state after each acknowledged commit (the first is
    /// the empty store), the index of the last state a sync made durable, the state the commit
    /// in flight would give.
    struct History {
        var states: [[String]] = [[]]
        var durable = 0
        var inFlight: [String]?
        var model: [UInt64: String] = [:]
        var sets: [UInt64: Set<UInt64>] = [:]
        /// The workload's commits ran while a compaction was stopped in the middle of its work.
        var raced = false

        /// The state as text: every record of keyspace 1, every member of the sets of
        /// keyspace 3.
        var dump: [String] {
            model.keys.sorted().map { "\($0)=\(model[$0]!)" }
                + sets.keys.sorted().map { "set \($0) \(sets[$0]!.sorted())" }
        }
    }

    /// The same text from a snapshot.
    static func dump(_ s: Snapshot) throws -> [String] {
        var lines = try contents(s).sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
        var sets: [(UInt64, [UInt64])] = []
        s.forEachSet(inKeyspace: 3) {
            if !$1.isEmpty { sets.append((EngineKey(rawValue: $0).id, $1)) }
            return true
        }
        lines += sets.sorted { $0.0 < $1.0 }.map { "set \($0.0) \($0.1.map { EngineKey(rawValue: $0).id }.sorted())" }
        return lines
    }

    /// What a workload does with a store: commits (each recorded in the history when it is
    /// acknowledged) and maintenance. After an injected failure the run goes on when
    /// `continuing` (a failed commit is one the caller was told did not happen: it must never
    /// appear); otherwise the first error ends it.
    final class Runner {
        let store: Store
        let fs: FaultFileSystem
        let continuing: Bool
        let fullySynced: Bool
        var history = History()
        init(store: Store, fs: FaultFileSystem, continuing: Bool, fullySynced: Bool) {
            self.store = store
            self.fs = fs
            self.continuing = continuing
            self.fullySynced = fullySynced
        }

        func commit(_ change: (inout Transaction, inout History) -> Void) throws {
            var t = Transaction()
            var next = history
            change(&t, &next)
            history.inFlight = next.dump
            do {
                try store.commit(t)
            } catch  where continuing {
                history.inFlight = nil
                return
            }
            history.model = next.model
            history.sets = next.sets
            history.states.append(history.dump)
            if fullySynced { history.durable = history.states.count - 1 }
            history.inFlight = nil
        }

        /// A checkpoint or compaction: its failure is the store's to report, not the workload's.
        func maintain(_ body: () throws -> Void) throws {
            do { try body() } catch  where continuing {}
        }

        /// The states so far are durable (a checkpoint or close synced them).
        func synced() { history.durable = history.states.count - 1 }
    }

    /// A workload: store options, and the steps it takes with a store.
    struct Workload: CustomStringConvertible, Sendable {
        var name: String
        var durability: Durability
        var segmentSize = 32 << 10
        /// Whether the store is encrypted (every workload runs both ways).
        var encrypted = false
        var body: @Sendable (Runner) throws -> Void
        var description: String { encrypted ? name + ", encrypted" : name }

        init(
            name: String, durability: Durability, segmentSize: Int = 32 << 10,
            body: @escaping @Sendable (Runner) throws -> Void
        ) {
            self.name = name
            self.durability = durability
            self.segmentSize = segmentSize
            self.body = body
        }

        var options: StoreOptions {
            var o = quietOptions(durability)
            o.segmentSize = segmentSize
            o.allowsTinySegments = true
            if encrypted { o.encryptionKey = try! EncryptionKey(bytes: (0..<32).map { UInt8($0 * 7 + 1) }) }
            return o
        }

        /// The same workload on an encrypted store.
        var onEncryptedStore: Workload {
            var w = self
            w.encrypted = true
            return w
        }

        /// Runs the workload over `fs` until it ends or the file system stops it.
        func run(_ fs: FaultFileSystem, continuing: Bool = false) -> History {
            let store: Store
            do {
                store = try Store.open(at: CrashStateExplorerTests.directory, options: options, fileSystem: fs)
            } catch {
                return History()
            }
            let runner = Runner(store: store, fs: fs, continuing: continuing, fullySynced: durability != .none)
            do {
                try body(runner)
                try store.close()
                runner.synced()
            } catch {}
            return runner.history
        }
    }

    /// Bytes LZ4 cannot shrink much: transactions span pages.
    static func value(_ k: UInt64, _ round: Int, _ length: Int = 300) -> String {
        var random = SeededGenerator(seed: k &* 7919 &+ UInt64(round))
        return "\(round):"
            + String((0..<length).map { _ in Character(UnicodeScalar(UInt8.random(in: 97...122, using: &random))) })
    }

    /// `count` records of round `round` from key `first`, and the set of the round.
    static func puts(
        _ t: inout Transaction, _ h: inout History, first: UInt64, count: Int, round: Int, length: Int = 300
    ) {
        for k in first..<(first + UInt64(count)) {
            let v = value(k, round, length)
            t.put(key(1, k), value: bytes(v))
            h.model[k] = v
        }
        let set = UInt64(round % 3)
        t.addMembers([key(1, first)], toSet: key(3, set))
        h.sets[set, default: []].insert(first)
    }

    /// A compaction that stops at its first write while commits run, then goes on.
    static func racingCompaction(durability: Durability) -> Workload {
        Workload(
            name: "a compaction racing commits" + (durability == .full ? "" : ", no sync"), durability: durability,
            segmentSize: 8 << 10
        ) { r in
            for round in 0..<4 { try r.commit { t, m in puts(&t, &m, first: 0, count: 8, round: round) } }
            // The compaction stops at its first write to a segment of its own, the commits run,
            // then it goes on: the same interleaving every run, so its steps are numbered alike.
            // (Its first write of frames, not of a new segment's header: that one is written
            // under the writer's lock, and commits would wait for it. The thread is known by
            // its pthread: `Thread.current.name` there is not the name given.)
            let compactionThread = Locked<pthread_t?>(nil)
            let finishedFirst = Locked(false)
            r.fs.pauseNextWrite { path, count in
                guard let thread = compactionThread.withLock({ $0 }) else { return false }
                return path.hasSuffix(JournalFormat.segmentSuffix) && count > JournalFormat.fileHeaderSize
                    && pthread_equal(pthread_self(), thread) != 0
            }
            let done = DispatchSemaphore(value: 0)
            let store = UncheckedSendable(r.store)
            let fs = UncheckedSendable(r.fs)
            let compaction = Thread {
                compactionThread.withLock { $0 = pthread_self() }
                _ = try? store.value.compact()
                finishedFirst.withLock { $0 = true }
                fs.value.cancelPause()
                done.signal()
            }
            compaction.start()
            let paused = r.fs.waitUntilPaused() && !finishedFirst.withLock { $0 }
            r.history.raced = paused
            // Resumed whether or not the pause was seen in time: on a loaded machine the wait
            // may end before the compaction reaches its write, which then pauses (or its pause
            // is cancelled here first); either way nothing is left waiting for the other. Also
            // when a commit below fails (an injected failed sync): the compaction thread must
            // not stay paused for the rest of the process.
            func resumeCompaction() {
                if !paused { r.fs.cancelPause() }
                r.fs.resume()
            }
            do {
                // Larger than a page: a page a failed sync dropped is not written again by the
                // commits after it (which would put it back on disk).
                try r.commit { t, m in puts(&t, &m, first: 20, count: 10, round: 8, length: 600) }
                try r.commit { t, m in puts(&t, &m, first: 0, count: 2, round: 9) }
            } catch {
                resumeCompaction()
                throw error
            }
            resumeCompaction()
            done.wait()
            try r.commit { t, m in puts(&t, &m, first: 30, count: 4, round: 10) }
        }
    }

    static let workloads: [Workload] = [
        Workload(name: "single commits, full durability", durability: .full) { r in
            for round in 0..<4 {
                try r.commit { t, m in puts(&t, &m, first: UInt64(round * 6), count: 6, round: round) }
            }
        },
        Workload(name: "single commits, normal durability", durability: .normal) { r in
            for round in 0..<4 {
                try r.commit { t, m in puts(&t, &m, first: UInt64(round * 6), count: 6, round: round) }
            }
        },
        Workload(name: "single commits, no sync, then a checkpoint", durability: .none) { r in
            for round in 0..<3 {
                try r.commit { t, m in puts(&t, &m, first: UInt64(round * 6), count: 6, round: round) }
            }
            try r.maintain {
                try r.store.checkpoint()
                r.synced()
            }
            try r.commit { t, m in puts(&t, &m, first: 100, count: 4, round: 9) }
        },
        Workload(name: "a rollover", durability: .full, segmentSize: 8 << 10) { r in
            for round in 0..<5 {
                try r.commit { t, m in puts(&t, &m, first: UInt64(round * 8), count: 8, round: round) }
            }
        },
        Workload(name: "a checkpoint between commits", durability: .full) { r in
            for round in 0..<3 {
                try r.commit { t, m in puts(&t, &m, first: UInt64(round * 6), count: 6, round: round) }
            }
            try r.maintain { try r.store.checkpoint() }
            try r.commit { t, m in
                puts(&t, &m, first: 0, count: 3, round: 7)
                t.delete(key(1, 10))
                m.model[10] = nil
            }
            try r.maintain { try r.store.checkpoint() }
        },
        Workload(name: "a compaction between commits", durability: .full, segmentSize: 8 << 10) { r in
            for round in 0..<4 { try r.commit { t, m in puts(&t, &m, first: 0, count: 8, round: round) } }
            try r.maintain { _ = try r.store.compact() }
            try r.commit { t, m in puts(&t, &m, first: 20, count: 4, round: 8) }
            try r.commit { t, m in puts(&t, &m, first: 30, count: 4, round: 9) }
        },
        Workload(name: "a compaction between commits, no sync", durability: .none, segmentSize: 8 << 10) { r in
            for round in 0..<4 { try r.commit { t, m in puts(&t, &m, first: 0, count: 8, round: round) } }
            try r.maintain { _ = try r.store.compact() }
            try r.commit { t, m in puts(&t, &m, first: 20, count: 4, round: 8) }
        },
        racingCompaction(durability: .full),
        // Commits during the compaction that no sync made durable: the switch syncs them, and a
        // failed sync there must cut them as a failed commit sync does.
        racingCompaction(durability: .none),
        Workload(name: "history purging", durability: .full, segmentSize: 8 << 10) { r in
            // Each commit records a history entry (a put of its own); a purge deletes the oldest
            // in one transaction, and a compaction drops them from the segments.
            for round in 0..<4 {
                try r.commit { t, m in
                    puts(&t, &m, first: UInt64(round * 4), count: 4, round: round)
                    let entry = UInt64(1_000 + round)
                    let v = value(entry, round, 200)
                    t.put(key(1, entry), value: bytes(v))
                    m.model[entry] = v
                }
            }
            try r.commit { t, m in
                for entry in UInt64(1_000)..<1_003 {
                    t.delete(key(1, entry))
                    m.model[entry] = nil
                }
            }
            try r.maintain { _ = try r.store.compact() }
            try r.commit { t, m in puts(&t, &m, first: 40, count: 2, round: 7) }
        },
        Workload(name: "a transaction larger than a segment", durability: .full, segmentSize: 8 << 10) { r in
            try r.commit { t, m in puts(&t, &m, first: 0, count: 4, round: 0) }
            try r.commit { t, m in puts(&t, &m, first: 100, count: 60, round: 1, length: 400) }
            try r.commit { t, m in puts(&t, &m, first: 200, count: 2, round: 2) }
        }
    ]

    static func environment(_ name: String) -> String? { ProcessInfo.processInfo.environment[name] }

    /// Every workload, on a plain store and on an encrypted one.
    static let workloadsBothWays = workloads + workloads.map(\.onEncryptedStore)

    @Test(arguments: workloadsBothWays)
    func everyCrashStateOpensAtAnAcknowledgedCommit(_ workload: Workload) throws {
        let exhaustive = Self.environment("LOGBOOK_CRASH_EXPLORE") == "exhaustive"
        let budget = exhaustive ? Int.max : Int(Self.environment("LOGBOOK_CRASH_EXPLORE_STATES") ?? "") ?? 400
        let exhaustiveChoices = exhaustive ? 14 : 6
        let clean = FaultFileSystem()
        let full = workload.run(clean)
        #expect(full.states.count > 2, "the workload commits")
        #expect(full.raced == workload.name.contains("racing"), "the compaction raced the commits")
        let steps = clean.steps
        var random = SeededGenerator(seed: UInt64(workload.description.utf8.count) &* 31)
        // Steps spread over the whole run when the budget does not reach every state.
        let perStep = max(1, budget / max(1, steps))
        var explored = 0
        var failures = 0
        for step in 1...steps {
            let fs = FaultFileSystem()
            fs.inject(.crash, atStep: step)
            let history = workload.run(fs)
            let place = "crash at step \(step) of \(steps) (\(fs.stepNames.last ?? ""))"
            Self.explore(
                fs, history, workload, place: place, perStep: perStep, exhaustive: exhaustive,
                exhaustiveChoices: exhaustiveChoices, budgetLeft: budget - explored, random: &random,
                explored: &explored, failures: &failures)
        }
        print(
            "crash-state explorer: \(workload.description): \(steps) steps, \(explored) crash states, \(failures) failing"
        )
        #expect(failures == 0)
    }

    /// Enumerates the states a power loss can leave `fs` in and checks each.
    static func explore(
        _ fs: FaultFileSystem, _ history: History, _ workload: Workload, place: String, perStep: Int,
        exhaustive: Bool, exhaustiveChoices: Int, budgetLeft: Int, random: inout SeededGenerator,
        explored: inout Int, failures: inout Int
    ) {
        // The process died and the machine did not: a reopen in the same boot reads the page
        // cache (with what a failed sync dropped, which the store was told was lost).
        let sameBoot = fs.copy()
        sameBoot.processCrash()
        explored += 1
        if let problem = check(sameBoot, history, options: workload.options) {
            failures += 1
            if failures <= 5 { Issue.record(Comment(rawValue: "\(workload): \(place), same boot: \(problem)")) }
        }
        var spent = 1
        for (pageSize, (pages, lengths, entries)) in [4096, 512].map({ ($0, fs.unsynced(pageSize: $0)) }) {
            let choices = pages.count + lengths.count + (entries ? 1 : 0)
            // 4 KiB pages: every subset when few, else a sample; 512-byte sectors (torn
            // pages): a sample.
            let all = pageSize == 4096 && choices <= exhaustiveChoices
            let count = all ? 1 << choices : min(exhaustive ? 256 : max(2, perStep / 2), 1 << min(choices, 20))
            for n in 0..<count {
                if spent >= budgetLeft && !exhaustive && n > 0 { break }
                var bits: [Bool]
                if all {
                    bits = (0..<choices).map { n & (1 << $0) != 0 }
                } else if n == 0 {
                    bits = Array(repeating: true, count: choices)  // everything written reached the disk
                } else if n == 1 {
                    bits = Array(repeating: false, count: choices)  // nothing unsynced did
                } else {
                    bits = (0..<choices).map { _ in Bool.random(using: &random) }
                }
                let state = fs.copy()
                var i = 0
                func next() -> Bool {
                    defer { i += 1 }
                    return bits[i]
                }
                let keepsEntries = entries ? next() : false
                var keptLength: [String: Bool] = [:]
                for path in lengths { keptLength[path] = next() }
                var keptPage: [String: Bool] = [:]
                for (path, page) in pages { keptPage["\(path)#\(page)"] = next() }
                state.powerLoss(
                    pageSize: pageSize, keepsNewEntries: keepsEntries,
                    keepsNewLength: { keptLength[$0] ?? true },
                    keepsNewPage: { keptPage["\($0)#\($1)"] ?? true })
                explored += 1
                spent += 1
                let what =
                    "\(workload): \(place), \(pageSize)-byte pages, choices \(bits.map { $0 ? "1" : "0" }.joined())"
                if let problem = check(state, history, options: workload.options) {
                    failures += 1
                    if failures <= 5 { Issue.record(Comment(rawValue: "\(what): \(problem)")) }
                }
            }
        }
    }

    /// A sync fails (`EIO`, its pages dropped as Linux drops them) at each sync step of the
    /// workload, which goes on; the end of the run is the crash. No state may show a commit
    /// the store said failed, lose one it acknowledged, or fail to open.
    @Test(arguments: workloadsBothWays)
    func aFailedSyncNeverLosesAnAcknowledgedCommitNorShowsAFailedOne(_ workload: Workload) throws {
        let exhaustive = Self.environment("LOGBOOK_CRASH_EXPLORE") == "exhaustive"
        let budget = exhaustive ? Int.max : Int(Self.environment("LOGBOOK_CRASH_EXPLORE_STATES") ?? "") ?? 400
        let clean = FaultFileSystem()
        _ = workload.run(clean)
        let syncs = clean.stepNames.enumerated().filter { $0.element.hasPrefix("sync ") }.map { $0.offset + 1 }
        var random = SeededGenerator(seed: UInt64(workload.description.utf8.count) &* 37)
        var explored = 0
        var failures = 0
        for step in syncs {
            let fs = FaultFileSystem()
            fs.inject(.failedSync, atStep: step)
            let history = workload.run(fs, continuing: true)
            Self.explore(
                fs, history, workload, place: "failed sync at step \(step) (\(clean.stepNames[step - 1]))",
                perStep: max(1, budget / max(1, syncs.count)), exhaustive: exhaustive,
                exhaustiveChoices: exhaustive ? 14 : 6, budgetLeft: budget - explored, random: &random,
                explored: &explored, failures: &failures)
        }
        print(
            "crash-state explorer, failed syncs: \(workload): \(syncs.count) syncs, \(explored) crash states, \(failures) failing"
        )
        #expect(failures == 0)
    }

    /// Opens one crash state and checks it; nil when it holds. Then a commit with full
    /// durability, a close, and a power loss: the store must open again with that commit and
    /// everything the first open found (what the first open replayed it made durable first; a
    /// page a failed sync dropped must not be built on).
    static func check(_ fs: FaultFileSystem, _ history: History, options: StoreOptions) -> String? {
        var options = options
        options.durability = .full
        let store: Store
        do {
            store = try Store.open(at: directory, options: options, fileSystem: fs)
        } catch EngineError.Code.notAStore where history.states.count == 1 {
            return nil  // stopped before the store was made, and nothing was acknowledged
        } catch {
            return "the store does not open: \(error)"
        }
        let found: [String]
        do {
            found = try dump(store.snapshot())
            let allowed = history.states[history.durable...]
            if !allowed.contains(found) && found != history.inFlight {
                let known =
                    history.states.firstIndex(of: found).map { "the state after commit \($0)" } ?? "no known state"
                return
                    "found \(known); the last acknowledged durable state is after commit \(history.durable) of \(history.states.count - 1)"
            }
            var t = Transaction()
            t.put(key(2, 1), value: bytes("after recovery"))
            try store.commit(t)
            try store.close()
        } catch {
            return "after the open: \(error)"
        }
        do {
            let report = try Store.verify(at: directory, fileSystem: fs, encryptionKey: options.encryptionKey)
            if !report.isSound { return "verify: \(report.problems.prefix(3))" }
        } catch {
            return "verify throws: \(error)"
        }
        fs.powerLoss()
        do {
            let again = try Store.open(at: directory, options: options, fileSystem: fs)
            defer { try? again.close() }
            if try dump(again.snapshot()) != found {
                return "after a power loss that followed the recovery, the state the recovery found is not there"
            }
            if string(try again.snapshot().value(forKey: key(2, 1))) != "after recovery" {
                return "after a power loss, the commit made after the recovery is lost"
            }
        } catch {
            return "after a power loss that followed the recovery, the store does not open: \(error)"
        }
        return nil
    }
}
