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
