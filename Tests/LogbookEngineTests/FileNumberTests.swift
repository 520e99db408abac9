import Dispatch
import Foundation
import LogbookTestSupport
import Testing

@testable import LogbookEngine

#if canImport(Glibc)
    import Glibc
#endif

/// File numbers past the end of the sequence.
@Suite struct FileNumberTests {
    /// Segments of 1 KiB: a rollover every few commits.
    static var tinySegments: StoreOptions {
        var options = quietOptions()
        options.segmentSize = 1024
        options.allowsTinySegments = true
        return options
    }

    /// A store of tiny segments near the end of the file numbers' sequence, as a store of long
    /// life would be.
    static func openNearTheEndOfTheSequence(_ fs: FaultFileSystem) throws -> Store {
        let store = try Store.open(at: FaultStorePaths.directory, options: tinySegments, fileSystem: fs)
        try store.writer.withLock { writerState in
            writerState.manifest.nextFileNumber = JournalFormat.maxSegmentNumber - 2
            try store.writeManifest(writerState.manifest)
        }
        return store
    }

    // MARK: File numbers

    /// File numbers used to run out after 262,143 rollovers, checkpoints and compactions in a
    /// store's life. Past the end of the sequence, numbers that no file uses are reused.
    @Test func fileNumbersAreReusedPastTheEndOfTheSequence() throws {
        let (fs, options) = (FaultFileSystem(), Self.tinySegments)
        var store = try Self.openNearTheEndOfTheSequence(fs)
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
            store = try Store.open(at: FaultStorePaths.directory, options: options, fileSystem: fs)
            #expect(try contents(store.snapshot()) == model, "round \(round)")
        }
        let numbers = store.writer.withLock { $0.manifest.segments }
        #expect(numbers.contains { $0 < 100 }, "numbers were reused: \(numbers)")
        try store.close()
    }

    /// A snapshot of a closed store holds segments a compaction replaced; a later store on the
    /// same directory reuses their numbers (past the end of the sequence) for live segments.
    /// Releasing the snapshot used to remove its files by name, deleting the live ones; an
    /// obsolete segment's name is removed when it is replaced now, and a release only closes.
    @Test func releasingAnOldSnapshotNeverRemovesAFileThatReusedItsNumber() throws {
        let (fs, options) = (FaultFileSystem(), Self.tinySegments)
        var store = try Self.openNearTheEndOfTheSequence(fs)
        var model: [UInt64: String] = [:]
        func round(_ r: Int) throws {
            for i in 0..<8 {
                let text = "round \(r) value \(i) " + String(repeating: "\(i)", count: 300)
                try commitOne(store, UInt64(i), text)
                model[UInt64(i)] = text
            }
        }
        try round(0)
        var held: Snapshot? = store.snapshot()
        let heldNumbers = Set(store.writer.withLock { $0.manifest.segments })
        try store.compact()
        try store.close()
        var reused = false
        for r in 1..<12 where !reused {
            store = try Store.open(at: FaultStorePaths.directory, options: options, fileSystem: fs)
            try round(r)
            try store.compact()
            reused = !heldNumbers.isDisjoint(with: store.writer.withLock { $0.manifest.segments })
            if !reused { try store.close() }
        }
        #expect(reused, "a number the snapshot's segments had was reused")
        held = nil
        _ = held
        try store.close()
        let reopened = try Store.open(at: FaultStorePaths.directory, options: options, fileSystem: fs)
        #expect(try contents(reopened.snapshot()) == model)
        try reopened.close()
    }

    /// A store of many segments holds at most `SegmentDescriptors`' bound of their descriptors
    /// open (it held one per segment, and an open or rollover failed with `EMFILE` past the
    /// process's limit); reads of every segment, a compaction and a reopen work within it.
    @Test(.serialized) func openDescriptorsAreBoundedWhateverTheSegmentCount() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let descriptors = SegmentDescriptors.shared
        let before = descriptors.capacity
        descriptors.capacity = 8
        defer { descriptors.capacity = before }
        var options = quietOptions()
        options.segmentSize = 1024
        options.allowsTinySegments = true
        var store = try Store.open(at: dir.store(), options: options)
        var model: [UInt64: String] = [:]
        var random = SeededGenerator(seed: 11)
        for i in 0..<400 {
            // Letters LZ4 cannot shrink much: about a commit per segment.
            let text =
                "value \(i) "
                + String((0..<400).map { _ in Character(UnicodeScalar(UInt8.random(in: 97...122, using: &random))) })
            try commitOne(store, UInt64(i), text)
            model[UInt64(i)] = text
        }
        func openSegments() throws -> Int {
            try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").compactMap {
                try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + $0)
            }.filter { $0.hasPrefix(dir.store()) && $0.contains(".lbj") }.count
        }
        let segments = listDirectory(dir.store()).filter { $0.hasSuffix(".lbj") }.count
        #expect(segments > 100)
        #expect(try contents(store.snapshot()) == model)
        let open = try openSegments()
        #expect(open <= 8 + 1, "\(open) descriptors for \(segments) segments")
        try store.close()
        store = try Store.open(at: dir.store(), options: options)
        #expect(try contents(store.snapshot()) == model)
        #expect(try openSegments() <= 8 + 1)
        _ = try store.compact()
        #expect(try contents(store.snapshot()) == model)
        try store.close()
    }
}
