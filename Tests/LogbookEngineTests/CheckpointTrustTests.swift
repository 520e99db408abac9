import LogbookTestSupport
import Testing

@testable import LogbookEngine

/// What a checkpoint says is not trusted: a file whose frames all check but whose values are
/// out of range is a bad checkpoint, and the open falls back to the journal (the checkpoint is
/// only a cache of it).
@Suite struct CheckpointTrustTests {
    /// A checkpoint whose header names a version at the top of its range (its checksums
    /// valid): the open used to take it, and the first commit trapped on the overflow.
    @Test func aCheckpointWithAnOutOfRangeVersionFallsBackToTheJournal() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        var options = StoreOptions()
        options.checkpointOnClose = false
        options.compaction = .manual
        let store = try Store.open(at: dir.store(), options: options)
        for i in 0..<3 { try commitOne(store, UInt64(i), "value \(i)") }
        try store.checkpoint()
        try store.close()
        let manifestPath = dir.store() + "/" + JournalFormat.manifestFileName
        let manifest = try Manifest.decode(fileBytes(manifestPath), path: manifestPath)
        let number = manifest.checkpoint
        let path = dir.store() + "/" + Checkpoint.fileName(number)
        var loaded = try Checkpoint.read(path: path, number: number, fileSystem: PosixFileSystem())
        loaded.state.version = UInt64.max - 1
        let stream = Checkpoint.encode(loaded.state, segment: loaded.segment, offset: loaded.offset)
        try PosixFileSystem().removeFile(path)
        try Checkpoint.write(stream, number: number, directory: dir.store(), fileSystem: PosixFileSystem())
        let reopened = try Store.open(at: dir.store(), options: options)
        #expect(reopened.recoveryReport.checkpointProblem != nil, "the checkpoint was refused")
        #expect(try contents(reopened.snapshot()) == [0: "value 0", 1: "value 1", 2: "value 2"])
        try commitOne(reopened, 3, "after")
        try reopened.close()
    }

    /// A checkpoint whose bytes cannot be read (an I/O error under it): the open replays the
    /// journal. It used to map the file, and an I/O error on a mapped page is `SIGBUS` in
    /// whatever thread touches it (the slot check's): the process died.
    @Test func anUnreadableCheckpointFallsBackToTheJournal() throws {
        let fs = FaultFileSystem()
        let store = try Store.open(at: FaultStorePaths.directory, options: quietOptions(.full), fileSystem: fs)
        var model: [UInt64: String] = [:]
        for i in 0..<200 {
            try commitOne(store, UInt64(i), "value \(i)")
            model[UInt64(i)] = "value \(i)"
        }
        try store.checkpoint()
        try commitOne(store, 1000, "after the checkpoint")
        model[1000] = "after the checkpoint"
        try store.close()
        fs.failingReads = { path, _ in path.hasSuffix(".lbc") }
        let reopened = try Store.open(at: FaultStorePaths.directory, options: quietOptions(.full), fileSystem: fs)
        #expect(reopened.recoveryReport.checkpoint == nil, "the checkpoint was not used")
        #expect(try contents(reopened.snapshot()) == model)
        try commitOne(reopened, 1001, "and commits go on")
        try reopened.close()
    }

    /// An I/O error under a whole leaf of a checkpoint (a slot frame, read when first
    /// checked): the frame is damaged, its leaves are mended from the journal, and every value
    /// reads as committed. (Mapped, the file's bad page was `SIGBUS` in the checking thread.)
    @Test func anUnreadableWholeLeafIsMendedFromTheJournal() throws {
        let fs = FaultFileSystem()
        var options = quietOptions(.full)
        options.segmentSize = 1 << 20
        let store = try Store.open(at: FaultStorePaths.directory, options: options, fileSystem: fs)
        var model: [UInt64: String] = [:]
        var t = Transaction()
        for i in 0..<20_000 {
            t.put(key(1, UInt64(i)), value: bytes("v\(i)"))
            model[UInt64(i)] = "v\(i)"
        }
        try store.commit(t)
        try store.checkpoint()
        try store.close()
        let name = try #require(fs.files(in: FaultStorePaths.directory).first { $0.hasSuffix(".lbc") })
        let path = FaultStorePaths.directory + "/" + name
        let bytes = try #require(fs.contents(path))
        let number = UInt64(name.dropFirst("checkpoint-".count).prefix(12), radix: 16)!
        let layout = try bytes.withUnsafeBytes { try Checkpoint.layout($0, path: path, number: number) }
        let slots = try #require(layout.slotFramePositions.last, "the checkpoint keeps whole leaves")
        // Reads inside the last slot frame's payload fail.
        let failed = Locked(0)
        fs.failingReads = { p, offset in
            guard p == path && offset > slots + JournalFormat.frameHeaderSize else { return false }
            failed.withLock { $0 += 1 }
            return true
        }
        let reopened = try Store.open(at: FaultStorePaths.directory, options: options, fileSystem: fs)
        #expect(try contents(reopened.snapshot()) == model)
        #expect(failed.withLock { $0 } > 0, "a read of the slot frame failed")
        try commitOne(reopened, 50_000, "commits go on")
        try reopened.close()
    }
}
