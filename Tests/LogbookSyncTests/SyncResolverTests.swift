import Foundation
import LogbookEngine
import LogbookGraph
import LogbookTestSupport
import Testing

@testable import LogbookSync

/// A store's own resolver for conflicts (a property it changed and has not pushed, which
/// another store's pulled change set too), and engines taking turns on one store.
@Suite(.serialized) struct SyncResolverTests {
    /// Store B changes `note` and `count` of an object offline while A changes both and pushes
    /// first; B's resolver decides. Whatever it answers, every store and the server end with
    /// that answer, and it was asked once per conflicting property, never for the others.
    @Test(arguments: ["keepLocal", "takeRemote", "value"])
    func eachStoreEndsWithTheResolversAnswer(_ answer: String) async throws {
        try await SyncFixture.with { f in
            let asked = Locked<[String]>([])
            let (a, syncA) = try f.store()
            let (b, syncB) = try f.store { configuration in
                configuration.resolver = { conflict in
                    asked.withLock { $0.append(conflict.property) }
                    switch answer {
                    case "keepLocal": return .keepLocal
                    case "takeRemote": return .takeRemote
                    default:
                        if let mine = conflict.localValue as? String, let theirs = conflict.remoteValue as? String {
                            return .value("\(mine)+\(theirs)")
                        }
                        if let mine = conflict.localValue as? Int64, let theirs = conflict.remoteValue as? Int64 {
                            return .value(mine + theirs)
                        }
                        return .keepLocal
                    }
                }
            }
            let c = a.newContext(confinement: ())
            try insert(c, "Item", ["name": "shared", "note": "first", "count": Int64(1)])
            try c.save()
            try await syncA.sync()
            try await syncB.sync()

            let ca = a.newContext(confinement: ())
            let cb = b.newContext(confinement: ())
            try find(ca, "Item", "name", "shared").setValue("from a", forKey: "note")
            try find(ca, "Item", "name", "shared").setValue(Int64(10), forKey: "count")
            try find(ca, "Item", "name", "shared").setValue(true, forKey: "done")
            try find(cb, "Item", "name", "shared").setValue("from b", forKey: "note")
            try find(cb, "Item", "name", "shared").setValue(Int64(5), forKey: "count")
            try ca.save()
            try cb.save()
            try await syncA.sync()
            // B pushes first (after A's change in the server's order), then pulls A's change: a
            // conflict, which B's resolver decides; B's next push carries its answer.
            let report = try await syncB.sync()
            try await syncB.push()
            try await syncA.sync()

            #expect(asked.withLock { $0.sorted() } == ["count", "note"], "done was no conflict: B did not change it")
            #expect(report.conflicts == (answer == "keepLocal" ? 0 : 2))
            let (note, count): (String, String) =
                switch answer {
                case "keepLocal": ("from b", "5")
                case "takeRemote": ("from a", "10")
                default: ("from b+from a", "15")
                }
            let shared = try #require(try dump(a).first { $0.hasPrefix("Item name=shared") })
            #expect(
                shared.contains("note=\(note)") && shared.contains("count=\(count)") && shared.contains("done=true"))
            #expect(try dump(b) == dump(a))
            #expect(try await f.rows("SELECT note || ' ' || count FROM \(f.schema).\"Item\"") == ["\(note) \(count)"])
        }
    }

    /// A value a resolver took from the other store is this store's change like any other: a
    /// later change of the property by the other store still wins (it comes later in the
    /// server's order), and B's push of its older change does not undo it.
    @Test func aLaterChangeStillWinsOverATakenValue() async throws {
        try await SyncFixture.with { f in
            let (a, syncA) = try f.store()
            let (b, syncB) = try f.store { $0.resolver = { _ in .takeRemote } }
            let c = a.newContext(confinement: ())
            try insert(c, "Item", ["name": "shared", "note": "first"])
            try c.save()
            try await syncA.sync()
            try await syncB.sync()
            let ca = a.newContext(confinement: ())
            let cb = b.newContext(confinement: ())
            try find(ca, "Item", "name", "shared").setValue("a1", forKey: "note")
            try find(cb, "Item", "name", "shared").setValue("b1", forKey: "note")
            try ca.save()
            try cb.save()
            try await syncA.push()
            try await syncB.pull()  // takes a1; B's change of note is still to push
            try find(ca, "Item", "name", "shared").setValue("a2", forKey: "note")
            try ca.save()
            try await syncA.push()
            try await syncB.sync()  // pushes its change (the value it now has), then pulls a2
            try await syncA.sync()
            let reader = b.newContext(confinement: ())
            #expect(try find(reader, "Item", "name", "shared").value(forKey: "note") as? String == "a2")
            #expect(try dump(a) == dump(b))
            #expect(try await f.rows("SELECT note FROM \(f.schema).\"Item\"") == ["a2"])
        }
    }

    /// A to-one relationship in conflict: the resolver sees both sides' objects and may choose
    /// a third; a value of the wrong type fails the pull with `.store`, changing nothing, and
    /// the next pull (with a resolver that answers well) goes on.
    @Test func aToOneConflictIsDecidedWithObjectIDs() async throws {
        try await SyncFixture.with { f in
            let wrong = Locked(true)
            let (a, syncA) = try f.store()
            let (b, syncB) = try f.store { configuration in
                configuration.resolver = { conflict in
                    if wrong.withLock({ $0 }) { return .value("not an object") }
                    // Neither side's folder: a third.
                    #expect(conflict.localValue is ObjectID && conflict.remoteValue is ObjectID)
                    return .value(ObjectIDBox.third.withLock { $0 })
                }
            }
            let c = a.newContext(confinement: ())
            let item = try insert(c, "Item", ["name": "shared"])
            for name in ["one", "two", "three"] { try insert(c, "Folder", ["name": name]) }
            try c.save()
            _ = item
            try await syncA.sync()
            try await syncB.sync()
            let cb = b.newContext(confinement: ())
            ObjectIDBox.third.withLock { $0 = try? find(cb, "Folder", "name", "three").objectID }
            let ca = a.newContext(confinement: ())
            try find(ca, "Item", "name", "shared").setValue(try find(ca, "Folder", "name", "one"), forKey: "folder")
            try find(cb, "Item", "name", "shared").setValue(try find(cb, "Folder", "name", "two"), forKey: "folder")
            try ca.save()
            try cb.save()
            try await syncA.sync()
            let before = try dump(b)
            await #expect(throws: SyncError.self) { try await syncB.pull() }
            #expect(try dump(b) == before, "a failed pull changes nothing")
            wrong.withLock { $0 = false }
            let report = try await syncB.sync()
            #expect(report.conflicts == 1)
            try await syncB.push()
            try await syncA.sync()
            let shared = try #require(try dump(a).first { $0.hasPrefix("Item name=shared") })
            #expect(shared.contains("folder=three"), "\(shared)")
            #expect(try dump(b) == dump(a))
        }
    }
}

/// The test's chosen folder, set once the store has it.
enum ObjectIDBox {
    static let third = Locked<ObjectID?>(nil)
}

/// Two engines on one store — in one process, or another process's beside this one's — take
/// turns, one push or pull at a time.
@Suite(.serialized) struct SyncTurnTests {
    /// While one holds the store's sync lock, another engine's push waits for it, and fails with
    /// `.busy` after its `lockTimeout`; once it is free the push goes through.
    @Test func anEngineWaitsForTheOthersTurnAndThenFailsBusy() async throws {
        try await SyncFixture.with { f in
            let (a, _) = try f.store()
            let c = a.newContext(confinement: ())
            try insert(c, "Item", ["name": "waiting"])
            try c.save()
            let held = try #require(try a.store.tryLockFile(JournalFormat.syncLockFileName))
            let second = try f.engine(for: a) { $0.lockTimeout = .milliseconds(300) }
            let start = ContinuousClock.now
            do {
                try await second.push()
                Issue.record("the push went on while another engine held the lock")
            } catch let e as SyncError {
                #expect(e.code == .busy, "\(e)")
                #expect(ContinuousClock.now - start >= .milliseconds(300))
            }
            held.unlock()
            let report = try await second.push()
            #expect(report.pushedTransactions == 1)
            #expect(try await f.rows("SELECT name FROM \(f.schema).\"Item\"") == ["waiting"])
        }
    }

    /// Two engines on one store, and a second store, sync at once through random saves: the
    /// engines' rounds interleave (each waits for the other's turn), and afterwards both stores
    /// and the server hold the same, every object each pulled mapped once (nothing made twice).
    @Test func twoEnginesOnOneStoreConverge() async throws {
        try await SyncFixture.with { f in
            let (a, syncA) = try f.store()
            let (b, syncB) = try f.store()
            let secondA = try f.engine(for: a)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (n, (container, engine)) in [(a, syncA), (a, secondA), (b, syncB)].enumerated() {
                    group.addTask {
                        for round in 0..<12 {
                            let c = container.newContext(concurrencyType: .confinement)
                            c.mergePolicy = .mergeByPropertyObjectTrump
                            try insert(c, "Item", ["name": "e\(n)-\(round)", "count": Int64(round)])
                            if let other = try c.fetch(FetchRequest<ManagedObject>(entityName: "Item")).randomElement()
                            {
                                try other.setValue("by e\(n)", forKey: "note")
                            }
                            try c.save()
                            try await engine.sync()
                        }
                    }
                }
                try await group.waitForAll()
            }
            for _ in 0..<2 {
                try await syncA.sync()
                try await syncB.sync()
            }
            let expected = try dump(a)
            #expect(expected.filter { $0.hasPrefix("Item") }.count == 36)
            #expect(try dump(b) == expected)
            #expect(try await f.rows("SELECT count(*)::text FROM \(f.schema).\"Item\"") == ["36"])
        }
    }
}
