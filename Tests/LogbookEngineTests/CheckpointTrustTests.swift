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
}
