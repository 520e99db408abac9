import Dispatch
import LogbookTestSupport
import Testing

@testable import LogbookEngine

#if canImport(Glibc)
    import Glibc
#endif

/// Background maintenance: failures back off and are reported; commits never wait for it.
@Suite struct BackgroundMaintenanceTests {
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
        options.allowsTinySegments = true
        options.compaction = .automatic(deadRatio: 0.2, minimumBytes: 0)
        options.log = { line in lines.withLock { $0.append(line) } }
        let store = try Store.open(at: FaultStorePaths.directory, options: options, fileSystem: fs)
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
        options.allowsTinySegments = true
        options.checkpointInterval = 1  // every commit asks for background work
        let store = try Store.open(at: FaultStorePaths.directory, options: options, fileSystem: fs)
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
        options.allowsTinySegments = true
        let store = try Store.open(at: FaultStorePaths.directory, options: options, fileSystem: fs)
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
        let reopened = try Store.open(at: FaultStorePaths.directory, options: options, fileSystem: fs)
        #expect(try contents(reopened.snapshot()).count == 20)
        try reopened.close()
    }
}
