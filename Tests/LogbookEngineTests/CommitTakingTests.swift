import LogbookTestSupport
import Testing

@testable import LogbookEngine

/// `commit(taking:)` takes a large transaction's compressed blocks (freed as they are applied);
/// the public `commit(_:)` leaves the caller's transaction as it was.
@Suite struct CommitTakingTests {
    /// A transaction of a few hundred blocks: past the fourth, its blocks are kept compressed.
    func largeTransaction() -> Transaction {
        var t = Transaction()
        for i in UInt64(1)...150_000 {
            t.put(key(1, i), value: bytes("record \(i) " + String(repeating: "x", count: Int(i % 64))))
        }
        return t
    }

    @Test func aTakenTransactionIsCommittedWholeAndSpent() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let store = try Store.open(at: dir.store(), options: quietOptions(.none))
        var t = largeTransaction()
        #expect(!t.isSpent)
        try store.commit(taking: &t)
        #expect(t.isSpent, "its compressed blocks went with the commit")
        let snapshot = store.snapshot()
        #expect(snapshot.count(inKeyspace: 1) == 150_000)
        for i in [UInt64(1), 77_777, 150_000] {
            #expect(
                try string(snapshot.value(forKey: key(1, i))) == "record \(i) "
                    + String(repeating: "x", count: Int(i % 64)))
        }
        try store.close()
        let reopened = try Store.open(at: dir.store(), options: quietOptions(.none))
        #expect(reopened.snapshot().count(inKeyspace: 1) == 150_000)
        try reopened.close()
    }

    @Test func thePublicCommitLeavesTheTransactionToCommitAgain() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let store = try Store.open(at: dir.store(), options: quietOptions(.none))
        let t = largeTransaction()
        let first = try store.commit(t)
        #expect(!t.isSpent)
        let second = try store.commit(t)
        #expect(second == first + 1)
        #expect(
            try string(store.snapshot().value(forKey: key(1, 150_000))) == "record 150000 "
                + String(repeating: "x", count: 150_000 % 64))
        #expect(store.snapshot().count(inKeyspace: 1) == 150_000)
        try store.close()
    }
}
