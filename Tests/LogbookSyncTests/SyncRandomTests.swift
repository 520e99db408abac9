import Foundation
import LogbookGraph
import LogbookTestSupport
import Testing

@testable import LogbookSync

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

    func run(seed: UInt64, steps: Int) async throws {
        let f = try await SyncFixture()
        do {
            var random = Generator(state: seed)
            var stores: [(container: PersistentContainer, sync: SyncEngine, context: ManagedObjectContext)] = []
            for _ in 0..<3 {
                let (c, s) = try f.store()
                stores.append((c, s, c.newContext(concurrencyType: .confinement)))
            }
            var next = 0
            var log: [String] = []
            func pick(_ c: ManagedObjectContext, _ entity: String) throws -> ManagedObject? {
                try c.fetch(FetchRequest<ManagedObject>(entityName: entity)).filter { !$0.isDeleted }
                    .randomElement(using: &random)
            }
            for _ in 0..<steps {
                let i = Int.random(in: 0..<3, using: &random)
                let c = stores[i].context
                let roll = Int.random(in: 0..<100, using: &random)
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
                        c.delete(o)
                        log.append("S\(i) delete")
                    case 57..<75:
                        try c.save()
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
                }
            }
            // Everyone saves, then syncs until the server has nothing new.
            for s in stores {
                do { try s.context.save() } catch { s.context.rollback() }
            }
            for _ in 0..<2 {
                for s in stores { try await s.sync.sync() }
            }
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
        } catch {
            await f.tearDown()
            throw error
        }
        await f.tearDown()
    }
}
