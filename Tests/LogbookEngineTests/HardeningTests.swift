import Testing

@testable import LogbookEngine

#if canImport(Glibc)
    import Glibc
#endif

/// Each defect of the engine-hardening round, with the test that failed before its fix.
@Suite struct HardeningTests {
    static let directory = "/store"
    static let segment = "/store/" + JournalFormat.segmentPrefix + "000000000001" + JournalFormat.segmentSuffix

    func commitOne(_ store: Store, _ id: UInt64, _ text: String) throws {
        var t = Transaction()
        t.put(key(1, id), value: bytes(text))
        try store.commit(t)
    }

    // MARK: Limits: the writer refuses what the reader would refuse

    /// A put with 17,000 index keys of 1 KiB used to commit and sync, and the next open failed
    /// on it. Now every limit is checked before anything is written, with an error naming it.
    @Test func everyLimitIsCheckedAtWriteTimeAndTheStoreStillOpens() throws {
        let fs = FaultFileSystem()
        let store = try Store.open(at: Self.directory, options: quietOptions(), fileSystem: fs)
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
            let size = fs.contents(Self.segment)!.count
            #expect {
                try store.commit(transaction)
            } throws: { error in
                let error = error as? EngineError
                return error?.code == .transactionTooLarge && error?.message.contains(limit) == true
            }
            #expect(fs.contents(Self.segment)!.count == size, "nothing of the transaction was written (\(limit))")
        }
        // Not poisoned: the store takes writes, and opens again with everything committed.
        try commitOne(store, 6, "after")
        try store.close()
        let reopened = try Store.open(at: Self.directory, options: quietOptions(), fileSystem: fs)
        #expect(try contents(reopened.snapshot()) == [1: "before", 6: "after"])
        try reopened.close()
    }

    /// A value of exactly the limit, and a put with exactly the most index keys, are fine.
    @Test func valuesAndKeysAtTheLimitsCommitAndReadBack() throws {
        let fs = FaultFileSystem()
        let store = try Store.open(at: Self.directory, options: quietOptions(), fileSystem: fs)
        var t = Transaction()
        let big = (0..<JournalFormat.maxValueLength).map { UInt8(truncatingIfNeeded: $0 &* 2_654_435_761 >> 13) }
        t.put(key(1, 1), value: big)
        t.put(
            key(1, 2), value: bytes("keys"),
            indexKeys: (0..<JournalFormat.maxIndexKeysPerPut).map { IndexKey(index: 1, orderedUInt64: UInt64($0)) })
        try store.commit(t)
        try store.close()
        let reopened = try Store.open(at: Self.directory, options: quietOptions(), fileSystem: fs)
        #expect(try reopened.snapshot().value(forKey: key(1, 1)) == big)
        #expect(reopened.snapshot().indexCount(index: 1) == JournalFormat.maxIndexKeysPerPut)
        try reopened.close()
    }

    // MARK: Failed syncs and writes

    /// After a failed sync the page cache may hold the commit's pages as clean although they
    /// never reached the disk. Reopening in the same boot used to replay that commit and build
    /// on it; now the segment is cut back to the last sync, so it is never read back.
    @Test func aFailedSyncIsCutBackSoAReopenNeverReplaysIt() throws {
        let fs = FaultFileSystem()
        let store = try Store.open(at: Self.directory, options: quietOptions(.full), fileSystem: fs)
        try commitOne(store, 1, "one")
        try commitOne(store, 2, "two")
        let synced = fs.contents(Self.segment)!.count
        // The commit's write goes through; its sync fails.
        fs.inject(.error(EIO), atStep: fs.steps + 2)
        #expect(throws: EngineError.self) { try commitOne(store, 3, "three") }
        #expect(fs.contents(Self.segment)!.count == synced, "the unsynced commit was cut")
        #expect { try commitOne(store, 4, "four") } throws: { ($0 as? EngineError)?.code == .failed }
        try? store.close()
        // No power loss: the "page cache" (the file's current bytes) is what a reopen reads.
        let reopened = try Store.open(at: Self.directory, options: quietOptions(.full), fileSystem: fs)
        #expect(try contents(reopened.snapshot()) == [1: "one", 2: "two"])
        try commitOne(reopened, 5, "five")
        try reopened.close()
    }

    /// A transaction of more than 8 MiB goes out in several writes; a failure of any of them
    /// poisons the store like any other failed write (it used to leave it writable).
    @Test func aFailedPartialWriteOfALargeTransactionPoisonsTheStore() throws {
        let fs = FaultFileSystem()
        let store = try Store.open(at: Self.directory, options: quietOptions(.full), fileSystem: fs)
        try commitOne(store, 1, "one")
        let committed = fs.contents(Self.segment)!.count
        var large = Transaction()
        var random = SeededGenerator(seed: 7)
        for i in 0..<12 {
            large.put(key(2, UInt64(i)), value: (0..<(1 << 20)).map { _ in UInt8.random(in: 0...255, using: &random) })
        }
        // The first 8 MiB write goes through, the second fails.
        fs.inject(.error(ENOSPC), atStep: fs.steps + 2)
        #expect { try store.commit(large) } throws: { ($0 as? EngineError)?.code == .diskFull }
        #expect { try commitOne(store, 2, "two") } throws: { ($0 as? EngineError)?.code == .failed }
        #expect(fs.contents(Self.segment)!.count == committed, "the partial transaction was cut")
        try? store.close()
        let reopened = try Store.open(at: Self.directory, options: quietOptions(.full), fileSystem: fs)
        #expect(try contents(reopened.snapshot()) == [1: "one"])
        try reopened.close()
    }

    /// `close()` used to swallow its final sync error; now it reports it, and releases the lock
    /// all the same so that the store can be opened again.
    @Test func closeReportsItsFinalSyncErrorAndStillReleasesTheLock() throws {
        let fs = FaultFileSystem()
        let store = try Store.open(at: Self.directory, options: quietOptions(.normal), fileSystem: fs)
        var t = Transaction()
        t.put(key(1, 1), value: bytes("one"))
        try store.commit(t)
        var unsynced = quietOptions(.none)
        unsynced.checkpointOnClose = false
        try store.close()
        let second = try Store.open(at: Self.directory, options: unsynced, fileSystem: fs)
        try commitOne(second, 2, "two")
        fs.inject(.error(EIO), atStep: fs.steps + 1)
        #expect { try second.close() } throws: { ($0 as? EngineError)?.code == .io }
        let third = try Store.open(at: Self.directory, options: unsynced, fileSystem: fs)
        #expect(try contents(third.snapshot())[1] == "one")
        try third.close()
    }
}
