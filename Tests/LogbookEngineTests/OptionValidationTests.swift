import Dispatch
import LogbookTestSupport
import Testing

@testable import LogbookEngine

#if canImport(Glibc)
    import Glibc
#endif

/// Options out of range, and reads that find another key's record.
@Suite struct OptionValidationTests {
    // MARK: Options and reads

    /// Out-of-range options used to be taken as given: a segment size over 1 GiB overflowed
    /// the packed location, a tiny one rolled over at every commit.
    @Test func outOfRangeOptionsAreRefusedWithTheirName() throws {
        func refused(_ change: (inout StoreOptions) -> Void, naming name: String) {
            var options = quietOptions()
            change(&options)
            #expect {
                try Store.open(at: FaultStorePaths.directory, options: options, fileSystem: FaultFileSystem())
            } throws: { error in
                (error as? EngineError)?.code == .invalidArgument
                    && (error as? EngineError)?.message.contains(name) == true
            }
        }
        refused({ $0.segmentSize = 2 << 30 }, naming: "segmentSize")
        refused({ $0.segmentSize = 100 }, naming: "segmentSize")
        // Below 64 KiB a store would fill its 262,143 file numbers before it held much.
        refused({ $0.segmentSize = StoreOptions.minimumSegmentSize - 1 }, naming: "segmentSize")
        refused({ $0.checkpointInterval = -1 }, naming: "checkpointInterval")
        refused({ $0.cacheSize = -1 }, naming: "cacheSize")
        refused({ $0.compaction = .automatic(deadRatio: 0, minimumBytes: 0) }, naming: "deadRatio")
        refused({ $0.compaction = .automatic(deadRatio: 1.5, minimumBytes: 0) }, naming: "deadRatio")
        var largest = quietOptions()
        largest.segmentSize = JournalFormat.maxSegmentSize
        _ = try Store.open(at: FaultStorePaths.directory, options: largest, fileSystem: FaultFileSystem())
    }

    /// A read checks that the record at a key's location is that key's: a location that
    /// names another record is damage, not another record's bytes handed back.
    @Test func aLocationHoldingAnotherKeysRecordIsAnError() throws {
        let fs = FaultFileSystem()
        let store = try Store.open(at: FaultStorePaths.directory, options: quietOptions(), fileSystem: fs)
        var t = Transaction()
        t.put(key(1, 1), value: bytes("one"))
        t.put(key(1, 2), value: bytes("two"))
        try store.commit(t)
        var damaged = store.published.withLock { $0 }
        damaged.state.primary.set(key(1, 1), damaged.state.primary[key(1, 2)]!)
        let snapshot = Snapshot(published: damaged, cache: store.cache, registry: store.registry)
        #expect { try snapshot.value(forKey: key(1, 1)) } throws: { ($0 as? EngineError)?.code == .corruption }
        #expect(throws: EngineError.self) { try snapshot.forEachValue(forKeys: [key(1, 1)]) { _, _, _ in } }
        #expect(string(try snapshot.value(forKey: key(1, 2))) == "two")
    }
}
