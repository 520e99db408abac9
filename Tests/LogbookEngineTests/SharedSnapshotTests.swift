import Foundation
import LogbookTestSupport
import Testing

@testable import LogbookEngine

/// Callers of `snapshot()` between two commits share one snapshot; a commit or a compaction
/// starts the next, and the store's own reference is not reported as a pinned snapshot.
@Suite struct SharedSnapshotTests {
    /// Commits `values` (keyspace 1, by id) in one transaction.
    func commit(_ values: [UInt64: String], to store: Store) throws {
        var t = Transaction()
        for (id, value) in values { t.put(key(1, id), value: bytes(value)) }
        try store.commit(t)
    }

    @Test func callersShareOneSnapshotUntilTheNextCommit() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let store = try Store.open(at: dir.store(), options: quietOptions())
        try commit([1: "one"], to: store)
        let first = store.snapshot()
        #expect(store.snapshot() === first)

        try commit([1: "two", 2: "new"], to: store)
        let second = store.snapshot()
        #expect(second !== first)
        #expect(second.version == first.version + 1)
        #expect(store.snapshot() === second)
        // The first still reads the state it was made from.
        #expect(try contents(first) == [1: "one"])
        #expect(try contents(second) == [1: "two", 2: "new"])
        try store.close()
    }

    @Test func theStoresOwnReferenceIsNotAPinnedSnapshot() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let store = try Store.open(at: dir.store(), options: quietOptions())
        try commit([1: "one"], to: store)
        #expect(try string(store.snapshot().value(forKey: key(1, 1))) == "one")
        // Nobody holds it now but the store.
        var stats = store.statistics()
        #expect(stats.pinnedSnapshots == 0)
        #expect(stats.oldestSnapshotAge == nil)
        var held: Snapshot? = store.snapshot()
        stats = store.statistics()
        #expect(stats.pinnedSnapshots == 1)
        #expect(stats.oldestSnapshotAge != nil)
        held = nil
        #expect(store.statistics().pinnedSnapshots == 0)
        _ = held
        try store.close()
    }

    @Test func aCompactionStartsTheNextSnapshot() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let store = try Store.open(at: dir.store(), options: quietOptions())
        for round in 0..<3 {
            var t = Transaction()
            for i in UInt64(0)..<500 { t.put(key(1, i), value: bytes("round \(round) item \(i)")) }
            try store.commit(t)
        }
        let before = store.snapshot()
        let expected = try contents(before)
        try store.compact()
        // Same version, new segments: a new snapshot reads the compacted files.
        let after = store.snapshot()
        #expect(after !== before)
        #expect(after.version == before.version)
        #expect(try contents(after) == expected)
        #expect(try contents(before) == expected)
        let stats = store.statistics()
        #expect(stats.totalBytes == stats.liveBytes)
        try store.close()
    }
}
