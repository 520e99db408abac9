import Dispatch
import LogbookTestSupport
import Testing

@testable import LogbookEngine

#if canImport(Glibc)
    import Glibc
#endif

/// Opening what is not a store: a clear error, nothing left behind.
@Suite struct NotAStoreTests {
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
            try Store.open(at: FaultStorePaths.directory, options: quietOptions(), fileSystem: fs).close()
            var manifest = Manifest()
            manifest.segments = segments
            manifest.nextFileNumber = 5
            fs.setContents("/store/MANIFEST", manifest.encoded())
            #expect {
                try Store.open(at: FaultStorePaths.directory, options: quietOptions(), fileSystem: fs)
            } throws: { ($0 as? EngineError)?.code == .corruption }
        }
    }
}
