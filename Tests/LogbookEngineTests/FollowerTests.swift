import Foundation
import LogbookTestSupport
import Testing

@testable import LogbookEngine

/// A read-only store in one process follows the commits of a writer in another
/// (`Store.refresh()`), across segment rollovers and compactions, and never keeps the writer
/// out.
@Suite struct FollowerTests {
    @Test func aReaderInAnotherProcessSeesEveryCommitWholeAndInOrder() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        // The writer: LogbookCrashHelper commits pairs (2i, 2i+1) forever, in 256 KiB segments,
        // compacting automatically.
        let process = Process()
        process.executableURL = URL(fileURLWithPath: CrashRecoveryTests.helperPath)
        process.arguments = [dir.store()]
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        defer {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        var options = StoreOptions()
        options.readOnly = true
        options.log = nil
        // Wait for the writer to make the store.
        var follower: Store?
        for _ in 0..<500 where follower == nil {
            follower = try? Store.open(at: dir.store(), options: options)
            if follower == nil { usleep(10_000) }
        }
        let store = try #require(follower)
        var versions: [UInt64] = [store.version]
        var reopened = 0
        var segmentsSeen = Set<UInt64>()
        let deadline = Date().addingTimeInterval(3)
        while Date() < deadline {
            let before = store.writer.withLock { $0.manifest.segments }
            let moved = try store.refresh()
            let after = store.writer.withLock { $0.manifest.segments }
            segmentsSeen.formUnion(after)
            if !after.starts(with: before) { reopened += 1 }
            let s = store.snapshot()
            if moved { versions.append(s.version) }
            // Every commit the reader sees is whole: both keys of each pair, the index entry.
            let pairs = s.count(inKeyspace: 1)
            #expect(pairs % 2 == 0, "a commit seen in part (\(pairs) keys)")
            let committed = UInt64(pairs / 2)
            if committed > 0 {
                #expect(string(try s.value(forKey: key(1, 2 * (committed - 1)))) == "a\(committed - 1)")
                #expect(try s.indexCount(index: 1) == Int(committed))
            }
            usleep(2_000)
        }
        // Versions only grow; the writer went on committing while it was followed, across
        // rollovers and at least one compaction.
        #expect(versions == versions.sorted() && Set(versions).count == versions.count)
        #expect(versions.count > 20, "refreshes that moved: \(versions.count)")
        #expect(segmentsSeen.count > 2)
        #expect(reopened > 0, "no compaction was followed")
        #expect(process.isRunning, "the writer stopped")
    }

    /// A follower reads no further than the writer's last sync reached (`SYNCED`): a commit
    /// written under durability `none` is not read until a sync covers it (it used to be read
    /// at once, and a failed sync could then cut what the follower had shown).
    @Test func aFollowerReadsOnlyWhatTheWritersLastSyncReached() throws {
        let fs = FaultFileSystem()
        var writerOptions = quietOptions(.none)
        writerOptions.checkpointOnClose = false
        var readOptions = quietOptions(.full)
        readOptions.readOnly = true
        let first = try Store.open(at: FaultStorePaths.directory, options: quietOptions(.full), fileSystem: fs)
        try commitOne(first, 1, "one")
        try first.close()
        let writer = try Store.open(at: FaultStorePaths.directory, options: writerOptions, fileSystem: fs)
        let follower = try Store.open(at: FaultStorePaths.directory, options: readOptions, fileSystem: fs)
        #expect(try contents(follower.snapshot()) == [1: "one"])
        try commitOne(writer, 2, "not synced yet")
        #expect(try follower.refresh() == false)
        #expect(try contents(follower.snapshot()) == [1: "one"])
        try writer.close()  // synced
        #expect(try follower.refresh())
        #expect(try contents(follower.snapshot()) == [1: "one", 2: "not synced yet"])
        try follower.close()
    }

    /// The safety net under that rule: a follower that read a commit the writer then cut (as
    /// a hint that ran ahead of the sync would let it: here one written by hand), while a new
    /// writer committed others at the same offsets, finds at its next refresh that what it
    /// read is gone and opens the store again: it shows the new commits, not the cut one (it
    /// used to go on from the old end, in the middle of the new commits, never to see them).
    @Test func aFollowerNoticesThatTheWriterCutWhatItRead() throws {
        let fs = FaultFileSystem()
        var writerOptions = quietOptions(.none)
        writerOptions.checkpointOnClose = false
        var readOptions = quietOptions(.full)
        readOptions.readOnly = true
        let writer = try Store.open(at: FaultStorePaths.directory, options: writerOptions, fileSystem: fs)
        try commitOne(writer, 1, "one")
        try writer.close()  // synced: one is durable
        let second = try Store.open(at: FaultStorePaths.directory, options: writerOptions, fileSystem: fs)
        let follower = try Store.open(at: FaultStorePaths.directory, options: readOptions, fileSystem: fs)
        try commitOne(second, 2, "cut later " + String(repeating: "x", count: 100))
        // A hint ahead of the sync (a torn or stale one): the follower reads the commit.
        let segment = try #require(fs.contents(FaultStorePaths.segment))
        let salt = segment.withUnsafeBytes { FileHeader.decode(Array($0[0..<32]), magic: JournalFormat.segmentMagic) }
        guard case .success(let header) = salt else { throw EngineError(.corruption, "no header") }
        fs.setContents(
            FaultStorePaths.directory + "/" + JournalFormat.syncedFileName,
            SyncedHint(segment: 1, offset: segment.count, salt: header.salt).encoded())
        #expect(try follower.refresh())
        #expect(try contents(follower.snapshot())[2] != nil)
        // The close's sync fails: the commit it covered is cut.
        fs.inject(.failedSync, atStep: fs.steps + 1)
        #expect(throws: EngineError.self) { try second.close() }
        fs.clearFaults()
        var synced = writerOptions
        synced.durability = .full
        let third = try Store.open(at: FaultStorePaths.directory, options: synced, fileSystem: fs)
        try commitOne(third, 3, "three")
        try commitOne(third, 4, "four " + String(repeating: "y", count: 200))
        _ = try follower.refresh()
        #expect(
            try contents(follower.snapshot()) == [1: "one", 3: "three", 4: "four " + String(repeating: "y", count: 200)]
        )
        try third.close()
        try follower.close()
    }
}
