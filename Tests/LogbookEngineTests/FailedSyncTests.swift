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
        // Nothing but the commit lock's hint (the file number the checkpoint took).
        #expect(
            fs.stepNames.dropFirst(steps).allSatisfy { $0.hasSuffix(JournalFormat.tailFileName) },
            "nothing was written: \(fs.stepNames.dropFirst(steps))")
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

    // MARK: Failed syncs at open, and maintenance that fails without harm

    /// Commits acknowledged under `.none` sit in the page cache when the process dies; the
    /// reopen's sync of them fails and drops their pages. That open fails, and cuts what the
    /// sync covered: the next open in this boot must not replay it (its retried sync would be
    /// told the clean pages are on disk, and its commits would vouch for pages a power loss
    /// takes away: the store would then not open).
    @Test func aFailedSyncAtOpenCutsWhatItCovered() throws {
        let fs = FaultFileSystem()
        let store = try Store.open(at: FaultStorePaths.directory, options: quietOptions(.full), fileSystem: fs)
        try commitOne(store, 1, "durable")
        try store.close()
        let unsynced = try Store.open(at: FaultStorePaths.directory, options: quietOptions(.none), fileSystem: fs)
        var t = Transaction()
        for i in 2..<40 { t.put(key(1, UInt64(i)), value: bytes(String(repeating: "page \(i) ", count: 40))) }
        try unsynced.commit(t)
        fs.processCrash()
        // The reopen's first step is its sync of the replayed segment: it fails.
        fs.inject(.failedSync, atStep: fs.steps + 1)
        #expect(throws: EngineError.self) {
            _ = try Store.open(at: FaultStorePaths.directory, options: quietOptions(.full), fileSystem: fs)
        }
        #expect(fs.stepNames.last?.hasPrefix("sync journal") == true, "\(fs.stepNames.suffix(3))")
        let reopened = try Store.open(at: FaultStorePaths.directory, options: quietOptions(.full), fileSystem: fs)
        #expect(try contents(reopened.snapshot()) == [1: "durable"], "what the failed sync covered was cut")
        try commitOne(reopened, 100, "after")
        try reopened.close()
        fs.powerLoss()
        let again = try Store.open(at: FaultStorePaths.directory, options: quietOptions(.full), fileSystem: fs)
        #expect(try contents(again.snapshot()) == [1: "durable", 100: "after"])
        try again.close()
    }

    /// A rollover that cannot start its new segment (a full disk, a failed manifest write
    /// before its rename) changes nothing the store has: commits go on in the segment they
    /// were going into, and a later rollover succeeds (it used to poison the store).
    @Test func aFailedRolloverLeavesCommitsGoingOn() throws {
        for k in 1...6 {
            let fs = FaultFileSystem()
            var options = quietOptions(.full)
            options.segmentSize = 4 << 10
            options.allowsTinySegments = true
            let store = try Store.open(at: FaultStorePaths.directory, options: options, fileSystem: fs)
            var i: UInt64 = 0
            // Up to the segment's end: the next commit rolls over.
            while (fs.contents(FaultStorePaths.segment)?.count ?? 0) < options.segmentSize {
                try commitOne(store, i, String(repeating: "v", count: 200))
                i += 1
            }
            // A failure at step k of the rollover (after the seal's sync).
            fs.inject(.error(ENOSPC), atStep: fs.steps + 2 + k)
            let failed = (try? commitOne(store, 1000, "in the rollover")) == nil
            let name = fs.stepNames.last ?? ""
            let inDoubt = name.hasPrefix("syncdir")  // after the manifest's rename
            if failed && !inDoubt {
                #expect(throws: Never.self, "step \(k) (\(name))") { try commitOne(store, 1001, "after") }
                #expect(
                    !fs.files(in: FaultStorePaths.directory).contains { $0.hasSuffix(".tmp") },
                    "step \(k) (\(name))")
            }
            try? store.close()
            let reopened = try Store.open(at: FaultStorePaths.directory, options: options, fileSystem: fs)
            let found = try contents(reopened.snapshot())
            #expect(found[i - 1] != nil, "step \(k) (\(name))")
            if failed && !inDoubt { #expect(found[1001] == "after", "step \(k) (\(name))") }
            try reopened.close()
        }
    }

    /// A compaction on a disk too full for its rewrite fails before it seals the active
    /// segment (no rollover for nothing), and one whose switch cannot write its manifest
    /// drops its rewrite; either way commits go on.
    @Test func aFailedCompactionLeavesCommitsGoingOn() throws {
        let fs = FaultFileSystem()
        var options = quietOptions(.full)
        options.segmentSize = 8 << 10
        options.allowsTinySegments = true
        let store = try Store.open(at: FaultStorePaths.directory, options: options, fileSystem: fs)
        for round in 0..<6 {
            for i in 0..<10 { try commitOne(store, UInt64(i), "round \(round) " + String(repeating: "x", count: 200)) }
        }
        let segmentsBefore = fs.files(in: FaultStorePaths.directory).filter { $0.hasSuffix(".lbj") }
        fs.freeSpace = 1_000
        #expect { _ = try store.compact() } throws: { ($0 as? EngineError)?.code == .diskFull }
        #expect(fs.files(in: FaultStorePaths.directory).filter { $0.hasSuffix(".lbj") } == segmentsBefore)
        fs.freeSpace = nil
        try commitOne(store, 50, "after the full disk")
        try store.close()
        // The switch's manifest write fails at each of its steps in turn.
        for k in 1...5 {
            let fs = FaultFileSystem()
            var options = quietOptions(.full)
            options.segmentSize = 8 << 10
            options.allowsTinySegments = true
            let hook = UncheckedSendable(fs)
            options.beforeCompactionSwitch = { hook.value.inject(.error(EIO), atStep: hook.value.steps + k) }
            let store = try Store.open(at: FaultStorePaths.directory, options: options, fileSystem: fs)
            for round in 0..<6 {
                for i in 0..<10 {
                    try commitOne(store, UInt64(i), "round \(round) " + String(repeating: "x", count: 200))
                }
            }
            let failed = (try? store.compact()) == nil
            let name = fs.stepNames.last ?? ""
            fs.clearFaults()
            if failed && name.contains("MANIFEST") {
                #expect(throws: Never.self, "step \(k) (\(name))") { try commitOne(store, 50, "after") }
            }
            try? store.close()
            let reopened = try Store.open(at: FaultStorePaths.directory, options: options, fileSystem: fs)
            let found = try contents(reopened.snapshot())
            #expect(found[9]?.hasPrefix("round 5 ") == true, "step \(k) (\(name))")
            if failed && name.contains("MANIFEST") { #expect(found[50] == "after", "step \(k) (\(name))") }
            try reopened.close()
        }
    }
}
