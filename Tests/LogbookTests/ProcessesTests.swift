import Foundation
import LogbookContextCheck
import LogbookEngine
import LogbookTestSupport
import Testing

@testable import LogbookGraph

/// Containers in several processes writing one store: another process's save is read by this
/// one's fetches, detected by its saves' conflict checks exactly as another context's save is,
/// and (with `observesRemoteChanges`) merged into its contexts. The other process is the crash
/// helper's `set` mode.
@Suite struct ProcessesTests {
    /// Runs the helper: in another process, sets `attribute` of the Item named `name`, saves.
    func otherProcessSets(_ path: String, _ name: String, _ attribute: String, _ value: String) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: crashHelperPath)
        process.arguments = ["set", path, name, attribute, value]
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        process.waitUntilExit()
        let said = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let complaint = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(process.terminationStatus == 0 && said == "saved\n", "the other process: \(complaint)")
    }

    func item(_ c: ManagedObjectContext, named name: String) throws -> ManagedObject? {
        var request = FetchRequest<ManagedObject>(entityName: "Item")
        request.predicate = try FetchPredicate(format: "name == %@", name)
        return try c.fetch(request).first
    }

    /// This process reads an item; another renames it and saves; this one changes another
    /// property and saves under each policy: the other's rename is kept (or the save is a
    /// conflict), as when another context of this process saved it.
    @Test(arguments: [MergePolicy.error, .mergeByPropertyObjectTrump, .mergeByPropertyStoreTrump, .overwrite, .rollback]
    )
    func aSaveOfAnotherProcessIsSeenByTheConflictCheck(policy: MergePolicy) throws {
        let store = TemporaryStore()
        try FileManager.default.createDirectory(atPath: store.directory, withIntermediateDirectories: true)
        let container = try PersistentContainer(name: "Check", model: CheckedModel.make(), directory: store.path)
        defer { try? container.close() }
        let c = container.newContext(concurrencyType: .confinement)
        c.mergePolicy = policy
        let item = try c.insertNewObject(forEntityName: "Item")
        try item.setValue("a", forKey: "name")
        try c.save()
        #expect(try item.value(forKey: "name") as? String == "a")

        try otherProcessSets(store.path, "a", "name", "b")
        // A fetch in this process reads the other's save.
        let reader = container.newContext(concurrencyType: .confinement)
        #expect(try self.item(reader, named: "b") != nil)
        #expect(try self.item(reader, named: "a") == nil)

        try item.setValue(true, forKey: "done")
        if policy == .error {
            #expect { try c.save() } throws: { ($0 as? LogbookError)?.code == .mergeConflict }
            return
        }
        try c.save()
        let check = container.newContext(concurrencyType: .confinement)
        let stored = try check.existingObject(with: item.objectID)
        let (name, done) = (try stored.value(forKey: "name") as? String, try stored.value(forKey: "done") as? Bool)
        switch policy {
        case .overwrite:
            #expect(name == "a" && done == true, "this context's object, whole")
        case .rollback:
            #expect(name == "b" && done == false, "the store's object, whole")
        default:
            #expect(name == "b" && done == true, "property by property: nothing lost")
        }
        try ContextModelRun.checkStore(container)
    }

    /// A writing container that observes remote changes hears of another process's save and
    /// merges it into its contexts that merge automatically.
    @Test func aWriterObservingRemoteChangesMergesAnotherProcesssSave() throws {
        let store = TemporaryStore()
        try FileManager.default.createDirectory(atPath: store.directory, withIntermediateDirectories: true)
        var options = ContainerOptions()
        options.observesRemoteChanges = true
        let container = try PersistentContainer(
            name: "Check", model: CheckedModel.make(), directory: store.path, options: options)
        defer { try? container.close() }
        let c = container.newContext(concurrencyType: .privateQueue)
        let held = try c.performAndWait {
            let item = try c.insertNewObject(forEntityName: "Item")
            try item.setValue("a", forKey: "name")
            try c.save()
            return UncheckedSendable(item)
        }
        let heard = DispatchSemaphore(value: 0)
        let tokens = Locked<[UInt64]>([])
        let observation = container.observeRemoteChanges { change in
            tokens.withLock { $0.append(change.historyToken.version) }
            heard.signal()
        }
        defer { observation.cancel() }
        try otherProcessSets(store.path, "a", "done", "true")
        #expect(heard.wait(timeout: .now() + 10) == .success, "the remote change was posted")
        // Version 1 recorded the schema, 2 is this process's save, 3 the other's.
        #expect(tokens.withLock { $0 } == [3])
        c.performAndWait {}
        let done = try c.performAndWait { try held.value.value(forKey: "done") as? Bool }
        #expect(done == true, "merged into the context")
        // Its own next save is not a remote change.
        try c.performAndWait {
            try held.value.setValue("c", forKey: "name")
            try c.save()
        }
        #expect(heard.wait(timeout: .now() + 1) == .timedOut)
    }

    /// Runs the helper's `insert` mode: another process inserts `count` Items named
    /// `prefix-i`, five a save.
    static func otherProcessInserts(_ path: String, prefix: String, count: Int, per: Int = 5) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: crashHelperPath)
        process.arguments = ["insert", path, prefix, "\(count)", "\(per)"]
        process.standardOutput = Pipe()
        process.standardError = Pipe()
        try process.run()
        return process
    }

    /// Objects get their keys when inserted, long before their save: two processes (and this
    /// one) inserting at once must never hand out the same key (before the serials were claimed
    /// in `TAIL`, the second process's Items overwrote the first's; found by the context
    /// checker across processes, seed 18). Every Item of every process is then in the store,
    /// under its own ID, and so after a reopen.
    @Test func insertsOfSeveralProcessesNeverShareAKey() throws {
        let store = TemporaryStore()
        try FileManager.default.createDirectory(atPath: store.directory, withIntermediateDirectories: true)
        var container = try PersistentContainer(name: "Check", model: CheckedModel.make(), directory: store.path)
        let others = try (0..<2).map { try Self.otherProcessInserts(store.path, prefix: "p\($0)", count: 60) }
        let c = container.newContext(concurrencyType: .confinement)
        for i in 0..<60 {
            try c.insertNewObject(forEntityName: "Item").setValue("here-\(i)", forKey: "name")
            if i % 5 == 4 { try c.save() }
        }
        for p in others {
            p.waitUntilExit()
            let complaint = String(
                decoding: (p.standardError as! Pipe).fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            #expect(p.terminationStatus == 0, "the other process: \(complaint)")
        }
        func check(_ container: PersistentContainer) throws {
            let reader = container.newContext(concurrencyType: .confinement)
            let items = try reader.fetch(FetchRequest<ManagedObject>(entityName: "Item"))
            let names = Set(try items.map { try $0.value(forKey: "name") as? String ?? "" })
            #expect(items.count == 180)
            #expect(Set(items.map(\.objectID)).count == 180)
            let expected = Set(["here", "p0", "p1"].flatMap { p in (0..<60).map { "\(p)-\($0)" } })
            #expect(names == expected)
            try ContextModelRun.checkStore(container)
        }
        try check(container)
        // After a reopen the counters start above every process's keys: a new Item is new.
        try container.close()
        container = try PersistentContainer(name: "Check", model: CheckedModel.make(), directory: store.path)
        defer { try? container.close() }
        let after = container.newContext(concurrencyType: .confinement)
        try after.insertNewObject(forEntityName: "Item").setValue("last", forKey: "name")
        try after.save()
        #expect(try after.count(for: FetchRequest<ManagedObject>(entityName: "Item")) == 181)
    }

    /// A read-only container follows 10,000 saves of a writer in another process (one Item a
    /// save): its remote changes come in order, its context that merges automatically only
    /// ever grows, and at the end it reads exactly what the writer wrote.
    @Test func aReadOnlyContainerFollowsTenThousandSavesOfAnotherProcess() throws {
        let store = TemporaryStore()
        try FileManager.default.createDirectory(atPath: store.directory, withIntermediateDirectories: true)
        // The store exists before the follower opens it.
        try PersistentContainer(name: "Check", model: CheckedModel.make(), directory: store.path).close()
        var options = ContainerOptions()
        options.readOnly = true
        options.observesRemoteChanges = true
        let follower = try PersistentContainer(
            name: "Check", model: CheckedModel.make(), directory: store.path, options: options)
        defer { try? follower.close() }
        let heard = Locked<[UInt64]>([])
        let observation = follower.observeRemoteChanges { change in
            heard.withLock { $0.append(change.historyToken.version) }
        }
        defer { observation.cancel() }
        let writer = try Self.otherProcessInserts(store.path, prefix: "w", count: 10_000, per: 1)
        let reader = follower.newContext(concurrencyType: .privateQueue)
        let request = FetchRequest<ManagedObject>(entityName: "Item")
        var counts: [Int] = []
        while writer.isRunning {
            counts.append(try reader.performAndWait { try reader.count(for: request) })
            usleep(20_000)
        }
        writer.waitUntilExit()
        #expect(writer.terminationStatus == 0)
        var last = 0
        for _ in 0..<500 {
            last = try reader.performAndWait { try reader.count(for: request) }
            if last == 10_000 { break }
            usleep(10_000)
        }
        #expect(last == 10_000)
        #expect(counts == counts.sorted(), "a count went back")
        #expect(counts.count > 3, "the follower read while the writer wrote")
        let versions = heard.withLock { $0 }
        #expect(!versions.isEmpty && versions == versions.sorted() && Set(versions).count == versions.count)
        // The same Items as a writer reads.
        let names: (PersistentContainer) throws -> Set<String> = { container in
            let c = container.newContext(concurrencyType: .confinement)
            return Set(try c.fetch(request).map { try $0.value(forKey: "name") as? String ?? "" })
        }
        let written = try PersistentContainer(name: "Check", model: CheckedModel.make(), directory: store.path)
        defer { try? written.close() }
        let followed = try names(follower)
        #expect(followed.count == 10_000)
        #expect(followed == (try names(written)))
    }

    /// Two to four real processes contend for one store at once, each under a merge policy of
    /// its own, through random steps (`ProcessContention`): no lost update, nothing
    /// acknowledged lost, the store's invariants, every process converging on the same store.
    /// Three seeds for each count in CI; `LOGBOOK_CONTENTION_SEEDS=N` runs N,
    /// `LOGBOOK_CONTENTION_SEED=S` starts at S, `LOGBOOK_CONTENTION_STEPS=K` sets the steps.
    @Test(arguments: [2, 3, 4]) func processesContendingForOneStoreLoseNothingAndConverge(processes: Int) throws {
        try contend(processes: processes, killing: false)
    }

    /// The same with one of three processes killed with SIGKILL at a random moment: the others
    /// carry on, and what the killed one acknowledged is all there (its last save in whole or
    /// not at all).
    @Test func aContenderKilledWithSigkillCostsNothingAcknowledged() throws {
        try contend(processes: 3, killing: true)
    }

    func contend(processes: Int, killing: Bool) throws {
        let environment = ProcessInfo.processInfo.environment
        let first = UInt64(environment["LOGBOOK_CONTENTION_SEED"] ?? "") ?? 1
        let seeds = Int(environment["LOGBOOK_CONTENTION_SEEDS"] ?? "") ?? 3
        let steps = Int(environment["LOGBOOK_CONTENTION_STEPS"] ?? "") ?? 200
        for seed in first..<(first + UInt64(seeds)) {
            let directory = TemporaryDirectory()
            defer { directory.cleanUp() }
            let failures = try ProcessContention.run(
                seed: seed, processes: processes, steps: steps, killing: killing, helper: crashHelperPath,
                directory: directory.path)
            #expect(
                failures.isEmpty,
                "seed \(seed), \(processes) processes (\(ProcessContention.plan(seed: seed, processes: processes))): \(failures.joined(separator: "; "))"
            )
            if !failures.isEmpty && environment["LOGBOOK_CONTENTION_KEEP"] != nil {
                let kept = "/tmp/contention-\(seed)-\(processes)"
                try? FileManager.default.removeItem(atPath: kept)
                try? FileManager.default.copyItem(atPath: directory.path, toPath: kept)
            }
        }
    }
}
