import LogbookTestSupport
import Testing

@testable import LogbookEngine

/// How an open loads a checkpoint's primary index: a leaf at a time on the caller's thread,
/// while another thread finds the end of the primary section and checks the secondary indexes
/// (a stream of 128 KB or more), or all on the caller's thread (a smaller one).
@Suite struct CheckpointLoadTests {
    /// Dense ids, sparse ids up to the 48-bit limit, a keyspace of one key, and a secondary
    /// index large enough that the stream takes the two-thread path.
    func largeState() -> IndexState {
        var state = IndexState()
        var location: UInt64 = 1_000
        state.primary.setMany(
            300_000, key: { key(1, UInt64($0) + 1) },
            value: { n in
                location += UInt64(17 + n % 5)
                return location
            }, previous: { _, _, _ in })
        // Sparse, and locations that go down as well as up (zigzag deltas of both signs).
        state.primary.setMany(
            5_000, key: { key(2, UInt64($0) * 65_537 + 3) },
            value: { UInt64(1 << 40) - UInt64($0 % 2 == 0 ? $0 : 7 * $0) },
            previous: { _, _, _ in })
        state.primary.setMany(1, key: { _ in key(2, EngineKey.maxID) }, value: { _ in 99 }, previous: { _, _, _ in })
        state.primary.setMany(1, key: { _ in key(7, 42) }, value: { _ in 5 }, previous: { _, _, _ in })
        var index = OrderedIndex()
        for i in UInt64(1)...40_000 {
            _ = IndexKey(index: 9, orderedInt64: Int64(i / 2)).bytes.withUnsafeBytes { index.insert($0, key(1, i)) }
        }
        state.indexes[9] = index
        return state
    }

    func entries(_ map: RadixMap<UInt64>) -> [(UInt64, UInt64)] {
        var all: [(UInt64, UInt64)] = []
        for keyspace in map.keyspaces {
            map.forEach(inKeyspace: keyspace) { k, v in
                all.append((k, v))
                return true
            }
        }
        return all
    }

    @Test func theTwoThreadLoadGivesThePrimaryIndexAsWritten() throws {
        let state = largeState()
        let stream = Checkpoint.encode(state, segment: 1, offset: 32)
        #expect(stream.count >= 1 << 17)
        let deferred = try Checkpoint.decode(stream) { _ in stream }.state
        let eager = try Checkpoint.decode(stream).state
        let written = entries(state.primary)
        #expect(written.count == 300_000 + 5_000 + 2)
        for loaded in [deferred.primary, eager.primary] {
            let read = entries(loaded)
            #expect(read.count == written.count)
            #expect(read.elementsEqual(written) { $0 == $1 })
            #expect(loaded.count(inKeyspace: 1) == 300_000)
            #expect(loaded.count(inKeyspace: 2) == 5_001)
            #expect(loaded.count(inKeyspace: 7) == 1)
            #expect(loaded[key(2, EngineKey.maxID)] == 99)
            #expect(loaded[key(1, 300_001)] == nil)
        }
        #expect(!deferred.secondary.isBuilt)
        #expect(deferred.indexes[9]?.count == 40_000)
    }

    /// A large keyspace's leaves are carved from 2 MiB chunks (`SlotChunk`), a small one's
    /// are on the heap; a later write copies a chunked leaf to the heap and leaves a copy of
    /// the map that still holds it as it was; a chunk is freed with its last leaf.
    @Test func aLargeLoadCarvesItsLeavesFromChunksThatWritesCopy() throws {
        let stream = Checkpoint.encode(largeState(), segment: 1, offset: 32)
        weak var firstChunk: SlotChunk?
        do {
            var loaded = try Checkpoint.decode(stream) { _ in stream }.state.primary
            let chunked = try #require(loaded.leafInfo(for: key(1, 1)))
            #if os(Linux)
                #expect(chunked.owner != nil, "300,000 keys are a large load")
                #expect(loaded.leafInfo(for: key(1, 299_999))?.owner != nil)
                // 300,000 keys: 4,688 leaves of 512 bytes, in two chunks.
                #expect(loaded.leafInfo(for: key(1, 1))?.owner !== loaded.leafInfo(for: key(1, 299_999))?.owner)
            #endif
            #expect(loaded.leafInfo(for: key(7, 42))?.owner == nil, "a keyspace of one key stays on the heap")
            firstChunk = chunked.owner as? SlotChunk
            let before = loaded[key(1, 5)]
            let copy = loaded
            loaded.set(key(1, 5), 123_456)
            loaded.remove(key(1, 6))
            loaded.set(key(1, 300_001), 77)
            #expect(loaded[key(1, 5)] == 123_456 && loaded[key(1, 6)] == nil && loaded[key(1, 300_001)] == 77)
            #expect(copy[key(1, 5)] == before && copy[key(1, 6)] != nil && copy[key(1, 300_001)] == nil)
            #expect(loaded.leafInfo(for: key(1, 5))?.owner == nil, "the written leaf is a heap copy")
            #expect(copy.leafInfo(for: key(1, 5))?.slots == chunked.slots, "the copy keeps the loaded leaf")
            #expect(loaded.count(inKeyspace: 1) == 300_000 && copy.count(inKeyspace: 1) == 300_000)
            #expect(entries(copy).elementsEqual(entries(largeState().primary)) { $0 == $1 })
        }
        #expect(firstChunk == nil, "freed with the last map that held its leaves")
    }

    /// A `HugePages` mapping is aligned to 2 MiB, zeroed and writable to its last byte;
    /// `MappedBytes` of a small count is on the heap.
    @Test func mappedBytesAreAlignedZeroedAndWritable() {
        let large = MappedBytes(count: 5 << 20)
        #expect(large.bytes.count == 5 << 20)
        #if os(Linux)
            #expect(UInt(bitPattern: large.bytes.baseAddress!) % UInt(HugePages.size) == 0)
        #endif
        #expect(large.bytes[0] == 0 && large.bytes[large.bytes.count - 1] == 0)
        large.bytes[large.bytes.count - 1] = 7
        #expect(large.bytes[large.bytes.count - 1] == 7)
        let small = MappedBytes(count: 100)
        #expect(small.bytes.count == 100)
        small.bytes[99] = 1
        #expect(small.bytes[99] == 1)
    }

    /// The stream is encoded and written a chunk at a time: every chunk but the last is
    /// exactly `chunkSize` bytes, and together they are the stream.
    @Test func theStreamComesInWholeChunks() {
        let state = largeState()
        var chunks: [[UInt8]] = []
        // Small chunks, so that they end in every section of the stream.
        Checkpoint.encode(state, segment: 1, offset: 32, chunkSize: 4_096) { chunks.append(Array($0)) }
        #expect(chunks.count >= 100)
        #expect(chunks.dropLast().allSatisfy { $0.count == 4_096 })
        #expect(chunks.last!.count <= 4_096 && !chunks.last!.isEmpty)
        #expect(Array(chunks.joined()) == Checkpoint.encode(state, segment: 1, offset: 32))
    }

    /// A store whose checkpoint spans several chunks (a large primary index, a secondary
    /// index, a set of 200,000 members) opens from it with everything as committed.
    @Test func aCheckpointOfManyChunksReopensAsCommitted() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        do {
            let store = try Store.open(at: dir.store(), options: quietOptions(.none))
            var t = Transaction()
            for i in UInt64(1)...300_000 {
                t.put(
                    key(1, i), value: bytes("v\(i % 1000)"),
                    indexKeys: [IndexKey(index: 3, orderedInt64: Int64(i % 977))])
            }
            t.addMembers(Array(UInt64(1)...200_000).map { $0 * 3 }, toSet: key(5, 1))
            try store.commit(t)
            try store.checkpoint()
            try store.close()
        }
        let names = listDirectory(dir.store())
        #expect(names.contains { $0.hasPrefix("checkpoint-") })
        let reopened = try Store.open(at: dir.store(), options: quietOptions(.none))
        let snapshot = reopened.snapshot()
        #expect(snapshot.count(inKeyspace: 1) == 300_000)
        #expect(try string(snapshot.value(forKey: key(1, 123_456))) == "v456")
        #expect(try snapshot.indexCount(index: 3) == 300_000)
        let members = snapshot.members(ofSet: key(5, 1))
        #expect(members.count == 200_000)
        #expect(members.first == 3 && members.last == 600_000)
        try reopened.close()
    }

    /// A stream cut anywhere (in the primary section, in the secondary indexes, in the sets)
    /// is an error on both paths, never a crash, and the two paths agree.
    @Test func aTruncatedLargeStreamIsMalformedOnEveryPath() throws {
        let stream = Checkpoint.encode(largeState(), segment: 1, offset: 32)
        for fraction in [0.2, 0.45, 0.7, 0.9, 0.999] {
            let cut = Array(stream[0..<Int(Double(stream.count) * fraction)])
            #expect(cut.count >= 1 << 17 || fraction < 0.45)
            #expect(throws: Checkpoint.Malformed.self) { try Checkpoint.decode(cut) { _ in cut } }
            #expect(throws: Checkpoint.Malformed.self) { try Checkpoint.decode(cut) }
        }
    }
}
