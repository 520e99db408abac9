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
    /// Random bytes LZ4 cannot shrink.
    static func noise(_ count: Int, seed: UInt64) -> [UInt8] {
        var random = SeededGenerator(seed: seed)
        return (0..<count).map { _ in UInt8.random(in: 0...255, using: &random) }
    }

    /// The size limit of a segment (lowered here from a gigabyte) is checked before anything
    /// is written: a transaction that does not fit what is left of the active segment goes
    /// into a fresh one (it used to be written up to the limit and refused, though it fits a
    /// fresh store), and one no segment can hold is refused with nothing written.
    @Test func theSegmentLimitIsCheckedBeforeWriting() throws {
        let fs = FaultFileSystem()
        var options = quietOptions(.full)
        options.segmentSize = 32 << 10
        options.allowsTinySegments = true
        options.segmentLimit = 64 << 10
        let store = try Store.open(at: FaultStorePaths.directory, options: options, fileSystem: fs)
        var first = Transaction()
        first.put(key(1, 1), value: Self.noise(30 << 10, seed: 1))
        try store.commit(first)
        var fitsAFreshSegment = Transaction()
        fitsAFreshSegment.put(key(1, 2), value: Self.noise(50 << 10, seed: 2))
        try store.commit(fitsAFreshSegment)
        var tooLarge = Transaction()
        tooLarge.put(key(1, 3), value: Self.noise(40 << 10, seed: 3))
        tooLarge.put(key(1, 4), value: Self.noise(40 << 10, seed: 4))
        try commitOne(store, 9, "into a fresh segment")  // the full segment is sealed first
        let steps = fs.steps
        #expect { try store.commit(tooLarge) } throws: { ($0 as? EngineError)?.code == .transactionTooLarge }
        #expect(fs.steps == steps, "nothing was written")
        try commitOne(store, 5, "the store takes commits")
        try store.close()
        let reopened = try Store.open(at: FaultStorePaths.directory, options: options, fileSystem: fs)
        let s = reopened.snapshot()
        #expect(try s.value(forKey: key(1, 2))?.count == 50 << 10)
        #expect(try s.value(forKey: key(1, 3)) == nil)
        #expect(string(try s.value(forKey: key(1, 5))) == "the store takes commits")
        try reopened.close()
    }

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

    /// A last segment whose length says a terabyte (a sparse file: a bad length, or a crafted
    /// one) opens, reading no more than a segment can hold: the open used to read the rest of
    /// the file into one array, and the process died allocating it.
    @Test func aSegmentLongerThanASegmentCanBeIsNotReadWhole() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        var options = quietOptions()
        options.segmentSize = 256 << 10
        options.segmentLimit = 1 << 20
        let store = try Store.open(at: dir.store(), options: options)
        for i in 0..<10 { try commitOne(store, UInt64(i), "value \(i)") }
        try store.close()
        let segment = try #require(listDirectory(dir.store()).first { $0.hasSuffix(".lbj") })
        #expect(truncate(dir.store() + "/" + segment, 1 << 40) == 0)
        let reopened = try Store.open(at: dir.store(), options: options)
        #expect(try contents(reopened.snapshot()).count == 10)
        try commitOne(reopened, 100, "after")
        try reopened.close()
        let again = try Store.open(at: dir.store(), options: options)
        #expect(try contents(again.snapshot()).count == 11)
        try again.close()
    }
}
