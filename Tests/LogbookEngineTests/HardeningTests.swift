import Dispatch
import LogbookTestSupport
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
        #expect(try reopened.snapshot().indexCount(index: 1) == JournalFormat.maxIndexKeysPerPut)
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

    // MARK: Applying a commit without old data

    /// Applying an update used to read the previous version's block after the commit was on
    /// disk; a damaged old block then poisoned the store, and the next open failed on replay.
    /// Now the old entries are found by the key when the old block cannot be read.
    @Test func aDamagedOldVersionStopsNeitherTheUpdateNorTheReplay() throws {
        let fs = FaultFileSystem()
        var options = quietOptions(.full)
        options.cacheSize = 0  // every read goes to the file
        let store = try Store.open(at: Self.directory, options: options, fileSystem: fs)
        var first = Transaction()
        first.put(key(1, 1), value: bytes("first"), indexKeys: [IndexKey(index: 1, orderedUInt64: 10)])
        first.put(key(1, 2), value: bytes("other"), indexKeys: [IndexKey(index: 1, orderedUInt64: 15)])
        try store.commit(first)
        try store.checkpoint()
        // A bad sector under the first transaction's frame (before the checkpoint's position).
        var damaged = fs.contents(Self.segment)!
        damaged[JournalFormat.fileHeaderSize + JournalFormat.frameHeaderSize + 3] ^= 0xFF
        fs.setContents(Self.segment, damaged)
        var update = Transaction()
        update.put(key(1, 1), value: bytes("second"), indexKeys: [IndexKey(index: 1, orderedUInt64: 20)])
        try store.commit(update)
        func check(_ snapshot: Snapshot, _ place: String) throws {
            #expect(string(try snapshot.value(forKey: key(1, 1))) == "second", "\(place)")
            #expect(try snapshot.indexCount(index: 1) == 2, "\(place): key 1's old entry is gone")
            let ten = IndexBound(IndexKey(index: 1, orderedUInt64: 10).bytes, inclusive: true)
            #expect(try snapshot.primaryKeys(index: 1, from: ten, to: ten).isEmpty, "\(place)")
        }
        try check(store.snapshot(), "after the update")
        try commitOne(store, 3, "the store still takes writes")
        try store.close()
        let reopened = try Store.open(at: Self.directory, options: options, fileSystem: fs)
        try check(reopened.snapshot(), "after the replay")
        try reopened.close()
    }

    // MARK: Options and reads

    /// Out-of-range options used to be taken as given: a segment size over 1 GiB overflowed
    /// the packed location, a tiny one rolled over at every commit.
    @Test func outOfRangeOptionsAreRefusedWithTheirName() throws {
        func refused(_ change: (inout StoreOptions) -> Void, naming name: String) {
            var options = quietOptions()
            change(&options)
            #expect {
                try Store.open(at: Self.directory, options: options, fileSystem: FaultFileSystem())
            } throws: { error in
                (error as? EngineError)?.code == .invalidArgument
                    && (error as? EngineError)?.message.contains(name) == true
            }
        }
        refused({ $0.segmentSize = 2 << 30 }, naming: "segmentSize")
        refused({ $0.segmentSize = 100 }, naming: "segmentSize")
        refused({ $0.checkpointInterval = -1 }, naming: "checkpointInterval")
        refused({ $0.cacheSize = -1 }, naming: "cacheSize")
        refused({ $0.compaction = .automatic(deadRatio: 0, minimumBytes: 0) }, naming: "deadRatio")
        refused({ $0.compaction = .automatic(deadRatio: 1.5, minimumBytes: 0) }, naming: "deadRatio")
        var largest = quietOptions()
        largest.segmentSize = JournalFormat.maxSegmentSize
        _ = try Store.open(at: Self.directory, options: largest, fileSystem: FaultFileSystem())
    }

    /// A read checks that the record at a key's location is that key's: a location that
    /// names another record is damage, not another record's bytes handed back.
    @Test func aLocationHoldingAnotherKeysRecordIsAnError() throws {
        let fs = FaultFileSystem()
        let store = try Store.open(at: Self.directory, options: quietOptions(), fileSystem: fs)
        var t = Transaction()
        t.put(key(1, 1), value: bytes("one"))
        t.put(key(1, 2), value: bytes("two"))
        try store.commit(t)
        var damaged = store.published.withLock { $0 }
        damaged.state.primary.set(key(1, 1), damaged.state.primary[key(1, 2)]!)
        let snapshot = Snapshot(published: damaged, cache: store.cache, registry: store.registry)
        #expect { try snapshot.value(forKey: key(1, 1)) } throws: { ($0 as? EngineError)?.code == .corruption }
        #expect(throws: EngineError.self) { try snapshot.forEachValue(forKeys: [key(1, 1)]) { _, _, _ in } }
        #expect(string(try snapshot.value(forKey: key(1, 2))) == "two")
    }

    // MARK: Opening what is not a store

    /// A failed open of a directory that is not a store used to leave a LOCK file in it.
    @Test func aFailedOpenOfADirectoryThatIsNotAStoreLeavesNothingBehind() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let path = dir.store("photos")
        try PosixFileSystem().createDirectory(path)
        writeFileBytes(path + "/holiday.jpg", bytes("not a journal"))
        #expect { try Store.open(at: path) } throws: { ($0 as? EngineError)?.code == .notAStore }
        #expect(listDirectory(path) == ["holiday.jpg"])
    }

    /// Segment numbers a manifest names are checked: 0, one past what a location can hold, or
    /// the same number twice is corruption, not a store that misreads its files.
    @Test func aManifestNamingImpossibleSegmentsIsCorruption() throws {
        for segments: [UInt64] in [[0], [JournalFormat.maxSegmentNumber + 1], [1, 1]] {
            let fs = FaultFileSystem()
            try Store.open(at: Self.directory, options: quietOptions(), fileSystem: fs).close()
            var manifest = Manifest()
            manifest.segments = segments
            manifest.nextFileNumber = 5
            fs.setContents("/store/MANIFEST", manifest.encoded())
            #expect {
                try Store.open(at: Self.directory, options: quietOptions(), fileSystem: fs)
            } throws: { ($0 as? EngineError)?.code == .corruption }
        }
    }

    // MARK: File numbers

    /// File numbers used to run out after 262,143 rollovers, checkpoints and compactions in a
    /// store's life. Past the end of the sequence, numbers that no file uses are reused.
    @Test func fileNumbersAreReusedPastTheEndOfTheSequence() throws {
        let fs = FaultFileSystem()
        var options = quietOptions()
        options.segmentSize = 1024
        var store = try Store.open(at: Self.directory, options: options, fileSystem: fs)
        // Near the end of the sequence, as a store of long life would be.
        try store.writer.withLock { writerState in
            writerState.manifest.nextFileNumber = JournalFormat.maxSegmentNumber - 2
            try store.writeManifest(writerState.manifest)
        }
        var model: [UInt64: String] = [:]
        for round in 0..<6 {
            for i in 0..<8 {
                let id = UInt64(i)
                let text = "round \(round) value \(i) " + String(repeating: "\(i)", count: 300)
                try commitOne(store, id, text)
                model[id] = text
            }
            try store.checkpoint()
            try store.compact()
            try store.close()
            store = try Store.open(at: Self.directory, options: options, fileSystem: fs)
            #expect(try contents(store.snapshot()) == model, "round \(round)")
        }
        let numbers = store.writer.withLock { $0.manifest.segments }
        #expect(numbers.contains { $0 < 100 }, "numbers were reused: \(numbers)")
        try store.close()
    }

    // MARK: Background maintenance

    /// A compaction that keeps failing used to be tried again after every commit, rolling a new
    /// segment over each time. Now it backs off, says why in the statistics and the log, and the
    /// commits go on.
    @Test func aFailingBackgroundCompactionBacksOffAndIsReported() throws {
        let fs = FaultFileSystem()
        fs.freeSpace = 0
        let lines = Locked<[String]>([])
        var options = quietOptions(.full)
        options.segmentSize = 4096
        options.compaction = .automatic(deadRatio: 0.2, minimumBytes: 0)
        options.log = { line in lines.withLock { $0.append(line) } }
        let store = try Store.open(at: Self.directory, options: options, fileSystem: fs)
        for i in 0..<200 {
            try commitOne(store, UInt64(i % 4), "version \(i) " + String(repeating: "x", count: 200))
            store.background.sync {}
        }
        let statistics = store.statistics()
        #expect(statistics.maintenanceFailures >= 1)
        #expect(statistics.lastMaintenanceFailure?.code == .diskFull)
        #expect(lines.withLock { $0.count } >= 1)
        #expect(lines.withLock { $0.first?.contains("compaction") } == true)
        // 200 commits within the first backoff: one attempt, not one per commit.
        #expect(lines.withLock { $0.count } <= 2, "\(lines.withLock { $0 })")
        #expect(statistics.segments.count < 40, "\(statistics.segments.count) segments")
        try store.close()
    }

    /// A committer asking whether to queue background work used to wait for the lock that a
    /// running compaction holds (2.9 s behind a 3 s compaction). Now it never waits for it.
    @Test func aCommitNeverWaitsForARunningCompaction() throws {
        let fs = FaultFileSystem()
        var options = quietOptions(.full)
        options.segmentSize = 4096
        options.checkpointInterval = 1  // every commit asks for background work
        let store = try Store.open(at: Self.directory, options: options, fileSystem: fs)
        for i in 0..<20 { try commitOne(store, UInt64(i), "value \(i) " + String(repeating: "v", count: 300)) }
        store.background.sync {}
        // The compaction stops in the middle of writing its new segment.
        // (Frames, not a header: the header of the segment that the compaction's rollover
        // starts is written under the writer lock, as it should be.)
        fs.pauseNextWrite { path, count in
            path.contains(JournalFormat.segmentPrefix) && count > JournalFormat.fileHeaderSize
        }
        let compaction = DispatchGroup()
        onOwnThread(group: compaction) { _ = try? store.compact() }
        #expect(fs.waitUntilPaused())
        let committed = DispatchSemaphore(value: 0)
        onOwnThread {
            try? commitOne(store, 100, "during the compaction")
            committed.signal()
        }
        let done = committed.wait(timeout: .now() + .seconds(20)) == .success
        fs.resume()
        compaction.wait()
        if !done { committed.wait() }
        #expect(done, "the commit waited for the compaction")
        #expect(string(try store.snapshot().value(forKey: key(1, 100))) == "during the compaction")
        try store.close()
    }

    /// `close()` used not to wait for a compaction running on another thread, which could then
    /// remove files after the next writer had reused their numbers.
    @Test func closeWaitsForARunningCompaction() throws {
        let fs = FaultFileSystem()
        var options = quietOptions(.full)
        options.segmentSize = 4096
        let store = try Store.open(at: Self.directory, options: options, fileSystem: fs)
        for i in 0..<20 { try commitOne(store, UInt64(i), "value \(i) " + String(repeating: "c", count: 300)) }
        // (Frames, not a header: the header of the segment that the compaction's rollover
        // starts is written under the writer lock, as it should be.)
        fs.pauseNextWrite { path, count in
            path.contains(JournalFormat.segmentPrefix) && count > JournalFormat.fileHeaderSize
        }
        let compaction = DispatchGroup()
        onOwnThread(group: compaction) { _ = try? store.compact() }
        #expect(fs.waitUntilPaused())
        let closed = DispatchSemaphore(value: 0)
        onOwnThread {
            try? store.close()
            closed.signal()
        }
        let closedDuringCompaction = closed.wait(timeout: .now() + .milliseconds(500)) == .success
        fs.resume()
        compaction.wait()
        if !closedDuringCompaction { closed.wait() }
        #expect(!closedDuringCompaction, "close returned while the compaction was running")
        let reopened = try Store.open(at: Self.directory, options: options, fileSystem: fs)
        #expect(try contents(reopened.snapshot()).count == 20)
        try reopened.close()
    }
}
