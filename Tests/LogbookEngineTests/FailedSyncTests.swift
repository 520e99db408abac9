import Dispatch
import LogbookTestSupport
import Testing

@testable import LogbookEngine

#if canImport(Glibc)
    import Glibc
#endif

/// Failed syncs and writes: the store never acknowledges or replays what may not be on disk.
@Suite struct FailedSyncTests {
    // MARK: Failed syncs and writes

    /// After a failed sync the page cache may hold the commit's pages as clean although they
    /// never reached the disk. Reopening in the same boot used to replay that commit and build
    /// on it; now the segment is cut back to the last sync, so it is never read back.
    @Test func aFailedSyncIsCutBackSoAReopenNeverReplaysIt() throws {
        let fs = FaultFileSystem()
        let store = try Store.open(at: FaultStorePaths.directory, options: quietOptions(.full), fileSystem: fs)
        try commitOne(store, 1, "one")
        try commitOne(store, 2, "two")
        let synced = fs.contents(FaultStorePaths.segment)!.count
        // The commit's write goes through; its sync fails.
        fs.inject(.error(EIO), atStep: fs.steps + 2)
        #expect(throws: EngineError.self) { try commitOne(store, 3, "three") }
        #expect(fs.contents(FaultStorePaths.segment)!.count == synced, "the unsynced commit was cut")
        #expect { try commitOne(store, 4, "four") } throws: { ($0 as? EngineError)?.code == .failed }
        try? store.close()
        // No power loss: the "page cache" (the file's current bytes) is what a reopen reads.
        let reopened = try Store.open(at: FaultStorePaths.directory, options: quietOptions(.full), fileSystem: fs)
        #expect(try contents(reopened.snapshot()) == [1: "one", 2: "two"])
        try commitOne(reopened, 5, "five")
        try reopened.close()
    }

    /// Under `.none`, commits are acknowledged before any sync; a checkpoint's sync then
    /// fails and drops their pages (fsyncgate). The close must not return as if they were on
    /// disk (it did: a caller that closed cleanly found them gone). Found by the crash-state
    /// explorer ("single commits, no sync, then a checkpoint").
    @Test func closingAStoreWhoseSyncFailedThrows() throws {
        let fs = FaultFileSystem()
        let store = try Store.open(at: FaultStorePaths.directory, options: quietOptions(.none), fileSystem: fs)
        try commitOne(store, 1, "one")
        fs.inject(.failedSync, atStep: fs.steps + 1)
        #expect(throws: EngineError.self) { try store.checkpoint() }
        #expect { try store.close() } throws: { ($0 as? EngineError)?.code == .failed }
        fs.processCrash()
        let reopened = try Store.open(at: FaultStorePaths.directory, options: quietOptions(.none), fileSystem: fs)
        #expect(try contents(reopened.snapshot()).isEmpty, "what the failed sync covered is not replayed")
        try reopened.close()
    }

    /// A checkpoint that fails at any of its steps leaves no temporary file behind (each
    /// failed attempt used to leave a `checkpoint-N.lbc.tmp` holding its space until the next
    /// open), and a failure of its manifest write, where nothing on disk changed, does not stop
    /// the commits that follow (it used to mark the whole store failed).
    @Test func aFailedCheckpointLeavesNoTemporaryFileAndCommitsGoOn() throws {
        for k in 1...8 {
            let fs = FaultFileSystem()
            let store = try Store.open(at: FaultStorePaths.directory, options: quietOptions(.full), fileSystem: fs)
            for i in 0..<20 { try commitOne(store, UInt64(i), "value \(i)") }
            try store.checkpoint()
            try commitOne(store, 100, "after the first checkpoint")
            fs.inject(.error(EIO), atStep: fs.steps + k)
            let failed = (try? store.checkpoint()) == nil
            let name = fs.stepNames.last ?? ""
            let leftovers = fs.files(in: FaultStorePaths.directory).filter {
                $0.hasSuffix(JournalFormat.temporarySuffix)
            }
            #expect(leftovers.isEmpty, "step \(k) (\(name)): \(leftovers)")
            if failed {
                // The journal holds every commit and either manifest names a sound checkpoint.
                #expect(throws: Never.self, "step \(k) (\(name))") { try commitOne(store, 101, "after the failure") }
            }
            try? store.close()
            let reopened = try Store.open(at: FaultStorePaths.directory, options: quietOptions(.full), fileSystem: fs)
            #expect(try contents(reopened.snapshot())[100] == "after the first checkpoint")
            try reopened.close()
        }
    }

    /// A checkpoint that cannot fit on the disk (about the size of the last one) fails before
    /// it writes anything.
    @Test func aCheckpointChecksFreeSpaceFirst() throws {
        let fs = FaultFileSystem()
        let store = try Store.open(at: FaultStorePaths.directory, options: quietOptions(.full), fileSystem: fs)
        for i in 0..<20 { try commitOne(store, UInt64(i), "value \(i)") }
        try store.checkpoint()
        try commitOne(store, 100, "more")
        fs.freeSpace = 1_000
        let steps = fs.steps
        #expect { try store.checkpoint() } throws: { ($0 as? EngineError)?.code == .diskFull }
        #expect(fs.steps == steps, "nothing was written")
        try commitOne(store, 101, "commits go on")
        try store.close()
    }

    /// A transaction of more than 8 MiB goes out in several writes; a failure of any of them
    /// poisons the store like any other failed write (it used to leave it writable).
    @Test func aFailedPartialWriteOfALargeTransactionPoisonsTheStore() throws {
        let fs = FaultFileSystem()
        let store = try Store.open(at: FaultStorePaths.directory, options: quietOptions(.full), fileSystem: fs)
        try commitOne(store, 1, "one")
        let committed = fs.contents(FaultStorePaths.segment)!.count
        var large = Transaction()
        var random = SeededGenerator(seed: 7)
        for i in 0..<12 {
            large.put(key(2, UInt64(i)), value: (0..<(1 << 20)).map { _ in UInt8.random(in: 0...255, using: &random) })
        }
        // The first 8 MiB write goes through, the second fails.
        fs.inject(.error(ENOSPC), atStep: fs.steps + 2)
        #expect { try store.commit(large) } throws: { ($0 as? EngineError)?.code == .diskFull }
        #expect { try commitOne(store, 2, "two") } throws: { ($0 as? EngineError)?.code == .failed }
        #expect(fs.contents(FaultStorePaths.segment)!.count == committed, "the partial transaction was cut")
        try? store.close()
        let reopened = try Store.open(at: FaultStorePaths.directory, options: quietOptions(.full), fileSystem: fs)
        #expect(try contents(reopened.snapshot()) == [1: "one"])
        try reopened.close()
    }

    /// `close()` used to swallow its final sync error; now it reports it, and releases the lock
    /// all the same so that the store can be opened again.
    @Test func closeReportsItsFinalSyncErrorAndStillReleasesTheLock() throws {
        let fs = FaultFileSystem()
        let store = try Store.open(at: FaultStorePaths.directory, options: quietOptions(.normal), fileSystem: fs)
        var t = Transaction()
        t.put(key(1, 1), value: bytes("one"))
        try store.commit(t)
        var unsynced = quietOptions(.none)
        unsynced.checkpointOnClose = false
        try store.close()
        let second = try Store.open(at: FaultStorePaths.directory, options: unsynced, fileSystem: fs)
        try commitOne(second, 2, "two")
        fs.inject(.error(EIO), atStep: fs.steps + 1)
        #expect { try second.close() } throws: { ($0 as? EngineError)?.code == .io }
        let third = try Store.open(at: FaultStorePaths.directory, options: unsynced, fileSystem: fs)
        #expect(try contents(third.snapshot())[1] == "one")
        try third.close()
    }
}
