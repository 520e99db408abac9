import Dispatch
import LogbookTestSupport
import Testing

@testable import LogbookEngine

#if canImport(Glibc)
    import Glibc
#endif

/// Applying a commit when an old version of a record cannot be read.
@Suite struct OldVersionDamageTests {
    // MARK: Applying a commit without old data

    /// Applying an update used to read the previous version's block after the commit was on
    /// disk; a damaged old block then poisoned the store, and the next open failed on replay.
    /// Now the old entries are found by the key when the old block cannot be read.
    @Test func aDamagedOldVersionStopsNeitherTheUpdateNorTheReplay() throws {
        let fs = FaultFileSystem()
        var options = quietOptions(.full)
        options.cacheSize = 0  // every read goes to the file
        let store = try Store.open(at: FaultStorePaths.directory, options: options, fileSystem: fs)
        var first = Transaction()
        first.put(key(1, 1), value: bytes("first"), indexKeys: [IndexKey(index: 1, orderedUInt64: 10)])
        first.put(key(1, 2), value: bytes("other"), indexKeys: [IndexKey(index: 1, orderedUInt64: 15)])
        try store.commit(first)
        try store.checkpoint()
        // A bad sector under the first transaction's frame (before the checkpoint's position).
        var damaged = fs.contents(FaultStorePaths.segment)!
        damaged[JournalFormat.fileHeaderSize + JournalFormat.frameHeaderSize + 3] ^= 0xFF
        fs.setContents(FaultStorePaths.segment, damaged)
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
        let reopened = try Store.open(at: FaultStorePaths.directory, options: options, fileSystem: fs)
        try check(reopened.snapshot(), "after the replay")
        try reopened.close()
    }
}
