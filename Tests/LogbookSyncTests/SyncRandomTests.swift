import Foundation
import LogbookEngine
import LogbookGraph
import LogbookTestSupport
import Testing

@testable import LogbookSync

#if canImport(Glibc)
    import Glibc
#endif

/// Random edits of three stores, online and offline — inserts, attribute changes, links and
/// unlinks, moves in an ordered relationship, deletions, saves, pushes and pulls in random
/// order — after which every store syncs until none has anything left: every store then holds
/// the same objects with the same values and links, and the server's tables hold as many.
/// `LOGBOOK_SYNC_SEEDS=N` runs N seeds (3 by default), `LOGBOOK_SYNC_STEPS=K` K steps each.
@Suite(.serialized) struct SyncRandomTests {
    struct Generator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    static func environment(_ name: String) -> Int? { ProcessInfo.processInfo.environment[name].flatMap { Int($0) } }

    @Test func randomEditsOfThreeStoresConverge() async throws {
        let seeds = Self.environment("LOGBOOK_SYNC_SEEDS") ?? 3
        let steps = Self.environment("LOGBOOK_SYNC_STEPS") ?? 150
        let first = UInt64(Self.environment("LOGBOOK_SYNC_SEED") ?? 1)
        for seed in first..<(first + UInt64(seeds)) {
            try await run(seed: seed, steps: steps)
        }
    }

    /// The same random edits with a resolver in every store, each store deciding differently
    /// (by its number and the property: keep its value, take the other's, the larger count,
    /// both notes joined, no folder): whatever the resolvers answer, every store and the
    /// server end the same.
    @Test func randomEditsWithResolversConverge() async throws {
        let seeds = Self.environment("LOGBOOK_SYNC_SEEDS") ?? 3
        let steps = Self.environment("LOGBOOK_SYNC_STEPS") ?? 150
        let first = UInt64(Self.environment("LOGBOOK_SYNC_SEED") ?? 1)
        var decided = 0
        for seed in first..<(first + UInt64(seeds)) {
            let log = try await run(seed: seed, steps: steps, resolvers: true)
            decided += log.filter { $0.hasPrefix("resolved") }.count
        }
        #expect(decided > 0, "no resolver was asked: the test would prove nothing")
        print("sync with resolvers: \(seeds) seeds of \(steps) steps, \(decided) conflicts decided")
    }

    /// A resolver for store `n`: stores answer differently, and by property.
    static func resolver(_ n: Int, _ log: Locked<[String]>) -> SyncResolver {
        { conflict in
            log.withLock { $0.append("resolved \(conflict)") }
            switch (conflict.property, n % 3) {
            case ("count", _):
                let values = [conflict.localValue, conflict.remoteValue].compactMap { $0 as? Int64 }
                return .value(values.max())
            case ("note", 0):
                let notes = [conflict.localValue, conflict.remoteValue].map { ($0 as? String) ?? "-" }
                return .value(notes.joined(separator: "+").suffix(12).description)
            case ("folder", 1): return .value(nil)
            case (_, 1): return .takeRemote
            default: return .keepLocal
            }
        }
    }

    /// Four stores under faults: besides the steps above, a store's process killed with
    /// SIGKILL at a random moment of a push or pull (the crash helper's `sync` mode: the store
    /// closed here and opened again after it, or left open and synced at the same time by its
    /// own engine, the two taking turns), and the server gone at once for a few steps (its
    /// pushes and pulls fail with `.unreachable`, local work goes on) and back. Afterwards every
    /// store and the server's tables hold the same, and no object a store saved is missing
    /// unless a step deleted it. `LOGBOOK_SYNC_FAULT_SEEDS=N` runs N seeds (3 by default);
    /// the outages only with `LOGBOOK_SYNC_FAULT_OUTAGES=1` (run this test alone then).
    @Test func fourStoresUnderFaultsConverge() async throws {
        guard ProcessInfo.processInfo.environment["LOGBOOK_POSTGRES_DIR"] != nil else {
            Issue.record(
                "LOGBOOK_POSTGRES_DIR is not set: run the tests with .ci/test, which starts a server it can stop")
            return
        }
        let seeds = Self.environment("LOGBOOK_SYNC_FAULT_SEEDS") ?? 3
        let steps = Self.environment("LOGBOOK_SYNC_STEPS") ?? 150
        let first = UInt64(Self.environment("LOGBOOK_SYNC_SEED") ?? 1)
        // Stopping the server fails every other sync test running at the same time (the suites
        // run in parallel on one server): outages are opt-in, for a run of this test alone.
        let outages = ProcessInfo.processInfo.environment["LOGBOOK_SYNC_FAULT_OUTAGES"] != nil
        var faults = (killed: 0, away: 0, unreachable: 0)
        for seed in first..<(first + UInt64(seeds)) {
            let log = try await run(seed: seed, steps: steps, stores: 4, faults: true, outages: outages)
            faults.killed += log.filter { $0.contains("killed") }.count
            faults.away += log.filter { $0 == "server gone" }.count
            faults.unreachable += log.filter { $0.hasSuffix("unreachable") }.count
        }
        // The faults happened (a test of faults that none reached would prove nothing).
        #expect(faults.killed > 0 && (!outages || (faults.away > 0 && faults.unreachable > 0)), "\(faults)")
        print("sync under faults: \(seeds) seeds of \(steps) steps, \(faults)")
    }

    /// Runs a shell command on a thread of its own (system(3): see SyncCrashTests), without
    /// holding one of the concurrency pool's threads while it runs.
    static func shell(_ command: String) async -> Int32 {
        await withCheckedContinuation { done in
            Thread.detachNewThread { done.resume(returning: system(command)) }
        }
    }

    /// Runs `.ci/postgres COMMAND` on the tests' server (system(3): see SyncCrashTests).
    static func server(_ command: String) -> Bool {
        let dir = ProcessInfo.processInfo.environment["LOGBOOK_POSTGRES_DIR"] ?? ""
        return system("'\(SyncCrashTests.postgresScript)' \(command) '\(dir)' >/dev/null 2>&1") == 0
    }

    /// The names (and tag codes) of every object a store holds.
    func names(_ container: PersistentContainer) throws -> Set<String> {
        let c = container.newContext(concurrencyType: .confinement)
        var out = Set<String>()
        for (entity, key) in [("Item", "name"), ("Folder", "name"), ("Tag", "code")] {
            for o in try c.fetch(FetchRequest<ManagedObject>(entityName: entity)) {
                if let name = try o.value(forKey: key) as? String { out.insert(name) }
            }
        }
        return out
    }

    @discardableResult
    func run(
        seed: UInt64, steps: Int, stores count: Int = 3, faults: Bool = false, outages: Bool = false,
        resolvers: Bool = false
    ) async throws -> [String] {
        let decisions = Locked<[String]>([])
        let f = try await SyncFixture()
        var serverDown = false
        do {
            var random = Generator(state: seed)
            var stores: [(container: PersistentContainer, sync: SyncEngine, context: ManagedObjectContext)] = []
            var saved = Set<String>()
            var deleted = Set<String>()
            var downUntil: Int?
            for n in 0..<count {
                let (c, s) = try f.store { if resolvers { $0.resolver = Self.resolver(n, decisions) } }
                stores.append((c, s, c.newContext(concurrencyType: .confinement)))
            }
            var next = 0
            var log: [String] = []
            func pick(_ c: ManagedObjectContext, _ entity: String) throws -> ManagedObject? {
                try c.fetch(FetchRequest<ManagedObject>(entityName: entity)).filter { !$0.isDeleted }
                    .randomElement(using: &random)
            }
            for step in 0..<steps {
                if let until = downUntil, step >= until {
                    #expect(Self.server("resume"), "seed \(seed): the server came back")
                    serverDown = false
                    downUntil = nil
                    log.append("server back")
                }
                let i = Int.random(in: 0..<count, using: &random)
                let c = stores[i].context
                var roll = Int.random(in: 0..<100, using: &random)
                if faults && roll >= 95 {
                    switch Int.random(in: 0..<4, using: &random) {
                    case 0, 1:
                        // The store's process pushes or pulls and is killed at a random moment
                        // (at its connection, in the middle, or after it finished): the store
                        // is closed here, synced by the crash helper (one engine a store at a
                        // time, docs/sync.md), and opened again with a new engine.
                        do { try c.save() } catch { c.rollback() }
                        let mode = Bool.random(using: &random) ? "push" : "pull"
                        let seconds = Double(Int.random(in: 20...400, using: &random)) / 1000
                        let command =
                            "timeout -s KILL \(seconds) '\(crashHelperPath)' sync \(mode) '\(f.stores[i].path)' '\(try f.url())' \(f.schema) 5 >/dev/null 2>&1"
                        if Bool.random(using: &random) {
                            // Beside this process's own engine, which syncs the open store at the
                            // same time: the two take turns (the store's sync lock).
                            async let helper = Self.shell(command)
                            do {
                                try await stores[i].sync.sync()
                            } catch let e as SyncError where serverDown && e.code == .unreachable {}
                            _ = await helper
                            log.append(
                                "S\(i) \(mode) by another process beside its own sync, killed after \(seconds) s")
                            continue
                        }
                        try stores[i].container.close()
                        _ = system(command)
                        let (container, engine) = try f.reopen(i)
                        stores[i] = (container, engine, container.newContext(concurrencyType: .confinement))
                        log.append("S\(i) \(mode) by a process killed after \(seconds) s")
                        continue
                    case 2 where outages && !serverDown:
                        #expect(Self.server("pause"), "seed \(seed): the server stopped")
                        serverDown = true
                        downUntil = step + Int.random(in: 3...12, using: &random)
                        log.append("server gone")
                        continue
                    default:
                        roll = 99
                    }
                }
                do {
                    switch roll {
                    case 0..<12:
                        next += 1
                        let entity = ["Item", "Item", "Folder", "Tag"].randomElement(using: &random)!
                        let key = entity == "Tag" ? "code" : "name"
                        try insert(c, entity, [key: "\(entity.prefix(1))\(next)"])
                        log.append("S\(i) insert \(entity) \(next)")
                    case 12..<30:
                        guard let o = try pick(c, "Item") else { continue }
                        switch Int.random(in: 0..<3, using: &random) {
                        case 0: try o.setValue(Bool.random(using: &random), forKey: "done")
                        case 1: try o.setValue(Int64.random(in: 0..<5, using: &random), forKey: "count")
                        default: try o.setValue(["x", "y", nil].randomElement(using: &random)!, forKey: "note")
                        }
                        log.append("S\(i) set on \(try o.value(forKey: "name") ?? "")")
                    case 30..<38:
                        guard let o = try pick(c, "Item") else { continue }
                        try o.setValue(Bool.random(using: &random) ? try pick(c, "Folder") : nil, forKey: "folder")
                        log.append("S\(i) folder of \(try o.value(forKey: "name") ?? "")")
                    case 38..<46:
                        guard let o = try pick(c, "Item"), let t = try pick(c, "Tag") else { continue }
                        if Bool.random(using: &random) {
                            try o.add(t, toRelationship: "tags")
                        } else {
                            try o.remove(t, fromRelationship: "tags")
                        }
                        log.append("S\(i) tag")
                    case 46..<52:
                        guard let folder = try pick(c, "Folder") else { continue }
                        let members = try folder.orderedObjects(forKey: "items")
                        guard members.count > 1 else { continue }
                        try folder.setValue(members.shuffled(using: &random), forKey: "items")
                        log.append("S\(i) reorder \(try folder.value(forKey: "name") ?? "")")
                    case 52..<57:
                        guard let o = try pick(c, ["Item", "Folder", "Tag"].randomElement(using: &random)!) else {
                            continue
                        }
                        if let name = try o.value(forKey: o.entity.name == "Tag" ? "code" : "name") as? String {
                            deleted.insert(name)
                        }
                        c.delete(o)
                        log.append("S\(i) delete")
                    case 57..<75:
                        try c.save()
                        if faults { saved.formUnion(try names(stores[i].container)) }
                        log.append("S\(i) save")
                    case 75..<85:
                        try c.save()
                        try await stores[i].sync.push()
                        log.append("S\(i) push")
                    case 85..<95:
                        try await stores[i].sync.pull()
                        log.append("S\(i) pull")
                    default:
                        c.rollback()
                        log.append("S\(i) rollback")
                    }
                } catch let e as LogbookError where e.code == .mergeConflict || e.code == .objectNotFound {
                    // A save beside a pull's transaction (the default policy is .error), or an
                    // object a pull deleted: the context starts again from the store.
                    c.rollback()
                    log.append("S\(i) \(e.code): rolled back")
                } catch let e as SyncError where serverDown && e.code == .unreachable {
                    // The server is away: local work goes on, the change waits.
                    log.append("S\(i) unreachable")
                }
            }
            if serverDown {
                #expect(Self.server("resume"), "seed \(seed): the server came back")
                serverDown = false
            }
            // Everyone saves, then syncs until the server has nothing new.
            for s in stores {
                do { try s.context.save() } catch { s.context.rollback() }
            }
            // A resolver's answer to a change pushed already is a new local change, which the
            // next round pushes: the rounds go on until one pushes nothing and decides nothing.
            var quiet = false
            for _ in 0..<12 where !quiet {
                quiet = true
                for s in stores {
                    let report = try await s.sync.sync()
                    if report.pushedTransactions > 0 || report.conflicts > 0 { quiet = false }
                }
            }
            #expect(quiet, "seed \(seed): the stores still pushed or resolved after 12 rounds")
            log += decisions.withLock { $0 }
            let expected = try dump(stores[0].container)
            for (n, s) in stores.enumerated().dropFirst() {
                let got = try dump(s.container)
                #expect(
                    got == expected,
                    "seed \(seed): store \(n) differs from store 0\nonly in 0: \(Set(expected).subtracting(got).sorted())\nonly in \(n): \(Set(got).subtracting(expected).sorted())\nsteps: \(log.joined(separator: "; "))"
                )
            }
            let items = expected.filter { $0.hasPrefix("Item ") }.count
            #expect(try await f.rows("SELECT count(*)::text FROM \(f.schema).\"Item\"") == ["\(items)"], "seed \(seed)")
            // Nothing a store saved is gone, unless a step deleted it.
            let lost = saved.subtracting(try names(stores[0].container)).subtracting(deleted)
            #expect(
                lost.isEmpty,
                "seed \(seed): saved and never deleted, but gone: \(lost.sorted())\nsteps: \(log.joined(separator: "; "))"
            )
            await f.tearDown()
            return log
        } catch {
            if serverDown { _ = Self.server("resume") }
            await f.tearDown()
            throw error
        }
    }
}
