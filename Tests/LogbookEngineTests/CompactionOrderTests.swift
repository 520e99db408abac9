import LogbookTestSupport
import Testing

@testable import LogbookEngine

/// Compaction reads the live records in storage order when they are far from it, and in key
/// order when only a few are out of place (then a frame whose records come in two runs is read
/// twice and rewritten operation by operation). Either way every live record is moved once.
@Suite struct CompactionOrderTests {
    /// 3,000 records written in key order over several frames, then a few rewritten later
    /// (their new versions are at the end of the journal, their keys in the middle): the key
    /// order has a handful of descents, so the compaction takes it as it is.
    @Test func recordsRewrittenLaterAreMovedOnceAndReadBackWhole() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let store = try Store.open(at: dir.store(), options: quietOptions())
        var t = Transaction()
        for i in UInt64(1)...3_000 {
            t.put(
                key(1, i), value: bytes("value \(i) " + String(repeating: "x", count: Int(i % 40))),
                indexKeys: [IndexKey(index: 1, orderedInt64: Int64(i % 97))])
        }
        try store.commit(t)
        for i in [UInt64(7), 1_500, 2_999] {
            var u = Transaction()
            u.put(key(1, i), value: bytes("rewritten \(i)"), indexKeys: [IndexKey(index: 1, orderedInt64: -1)])
            try store.commit(u)
        }
        var expected: [UInt64: String] = [:]
        for i in UInt64(1)...3_000 { expected[i] = "value \(i) " + String(repeating: "x", count: Int(i % 40)) }
        for i in [UInt64(7), 1_500, 2_999] { expected[i] = "rewritten \(i)" }
        let before = store.statistics()
        #expect(before.totalBytes > before.liveBytes)

        let report = try store.compact()
        #expect(report.liveBytesRewritten == before.liveBytes)
        let after = store.statistics()
        #expect(after.totalBytes == after.liveBytes)
        #expect(try contents(store.snapshot()) == expected)
        #expect(try store.snapshot().indexCount(index: 1) == 3_000)
        #expect(try store.snapshot().indexKeys(forKey: key(1, 1_500)) == [IndexKey(index: 1, orderedInt64: -1)])
        try store.close()

        // Replayed from the compacted segments alone.
        let reopened = try Store.open(at: dir.store(), options: quietOptions())
        #expect(try contents(reopened.snapshot()) == expected)
        #expect(try reopened.snapshot().indexCount(index: 1) == 3_000)
        #expect(reopened.statistics().liveBytes == after.liveBytes)
        try reopened.close()
    }

    /// Records written in reverse key order: every step of the key order is a descent, so the
    /// compaction sorts them by location first; the result is the same.
    @Test func recordsFarFromKeyOrderAreSortedFirst() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let store = try Store.open(at: dir.store(), options: quietOptions())
        for chunk in stride(from: 2_000, to: 0, by: -500) {
            var t = Transaction()
            for i in stride(from: UInt64(chunk), to: UInt64(chunk - 500), by: -1) {
                t.put(key(1, i), value: bytes("v\(i)"))
            }
            try store.commit(t)
        }
        var u = Transaction()
        u.delete(key(1, 10))
        try store.commit(u)
        try store.compact()
        var expected: [UInt64: String] = [:]
        for i in UInt64(1)...2_000 where i != 10 { expected[i] = "v\(i)" }
        #expect(try contents(store.snapshot()) == expected)
        try store.close()
        let reopened = try Store.open(at: dir.store(), options: quietOptions())
        #expect(try contents(reopened.snapshot()) == expected)
        try reopened.close()
    }
}
