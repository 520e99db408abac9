import Dispatch
import LogbookTestSupport
import Testing

@testable import LogbookEngine

#if canImport(Glibc)
    import Glibc
#endif

/// The writer refuses what the reader would refuse: every limit of the format checked when a
/// transaction is built, each with the test that failed before its fix.
@Suite struct FormatLimitTests {
    // MARK: Limits: the writer refuses what the reader would refuse

    /// A put with 17,000 index keys of 1 KiB used to commit and sync, and the next open failed
    /// on it. Now every limit is checked before anything is written, with an error naming it.
    @Test func everyLimitIsCheckedAtWriteTimeAndTheStoreStillOpens() throws {
        let fs = FaultFileSystem()
        let store = try Store.open(at: FaultStorePaths.directory, options: quietOptions(), fileSystem: fs)
        try commitOne(store, 1, "before")
        let kibKey = [UInt8](repeating: 7, count: 1024)
        var cases: [(String, Transaction)] = []
        var manyLargeKeys = Transaction()
        manyLargeKeys.put(
            key(1, 2), value: bytes("x"),
            indexKeys: (0..<17_000).map { IndexKey(index: IndexID(rawValue: UInt32($0 % 3)), bytes: kibKey) })
        cases.append(("maxOperationSize", manyLargeKeys))
        var tooManyKeys = Transaction()
        tooManyKeys.put(
            key(1, 3), value: bytes("x"),
            indexKeys: (0...JournalFormat.maxIndexKeysPerPut).map { IndexKey(index: 1, orderedUInt64: UInt64($0)) })
        cases.append(("maxIndexKeysPerPut", tooManyKeys))
        var longKey = Transaction()
        longKey.put(key(1, 4), value: bytes("x"), indexKeys: [IndexKey(index: 1, bytes: kibKey + [1])])
        cases.append(("maxIndexKeyLength", longKey))
        var bigValue = Transaction()
        bigValue.put(key(1, 5), value: [UInt8](repeating: 1, count: JournalFormat.maxValueLength + 1))
        cases.append(("maxValueLength", bigValue))
        for (limit, transaction) in cases {
            let size = fs.contents(FaultStorePaths.segment)!.count
            #expect {
                try store.commit(transaction)
            } throws: { error in
                let error = error as? EngineError
                return error?.code == .transactionTooLarge && error?.message.contains(limit) == true
            }
            #expect(
                fs.contents(FaultStorePaths.segment)!.count == size, "nothing of the transaction was written (\(limit))"
            )
        }
        // Not poisoned: the store takes writes, and opens again with everything committed.
        try commitOne(store, 6, "after")
        try store.close()
        let reopened = try Store.open(at: FaultStorePaths.directory, options: quietOptions(), fileSystem: fs)
        #expect(try contents(reopened.snapshot()) == [1: "before", 6: "after"])
        try reopened.close()
    }

    /// A value of exactly the limit, and a put with exactly the most index keys, are fine.
    @Test func valuesAndKeysAtTheLimitsCommitAndReadBack() throws {
        let fs = FaultFileSystem()
        let store = try Store.open(at: FaultStorePaths.directory, options: quietOptions(), fileSystem: fs)
        var t = Transaction()
        let big = (0..<JournalFormat.maxValueLength).map { UInt8(truncatingIfNeeded: $0 &* 2_654_435_761 >> 13) }
        t.put(key(1, 1), value: big)
        t.put(
            key(1, 2), value: bytes("keys"),
            indexKeys: (0..<JournalFormat.maxIndexKeysPerPut).map { IndexKey(index: 1, orderedUInt64: UInt64($0)) })
        try store.commit(t)
        try store.close()
        let reopened = try Store.open(at: FaultStorePaths.directory, options: quietOptions(), fileSystem: fs)
        #expect(try reopened.snapshot().value(forKey: key(1, 1)) == big)
        #expect(try reopened.snapshot().indexCount(index: 1) == JournalFormat.maxIndexKeysPerPut)
        try reopened.close()
    }
}
