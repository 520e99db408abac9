import Dispatch
import LogbookTestSupport
import Testing

@testable import LogbookEngine

#if canImport(Glibc)
    import Glibc
#endif

/// File numbers past the end of the sequence.
@Suite struct FileNumberTests {
    // MARK: File numbers

    /// File numbers used to run out after 262,143 rollovers, checkpoints and compactions in a
    /// store's life. Past the end of the sequence, numbers that no file uses are reused.
    @Test func fileNumbersAreReusedPastTheEndOfTheSequence() throws {
        let fs = FaultFileSystem()
        var options = quietOptions()
        options.segmentSize = 1024
        var store = try Store.open(at: FaultStorePaths.directory, options: options, fileSystem: fs)
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
            store = try Store.open(at: FaultStorePaths.directory, options: options, fileSystem: fs)
            #expect(try contents(store.snapshot()) == model, "round \(round)")
        }
        let numbers = store.writer.withLock { $0.manifest.segments }
        #expect(numbers.contains { $0 < 100 }, "numbers were reused: \(numbers)")
        try store.close()
    }
}
