import Dispatch
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

// The checkpoint stream written: the state's sections, sorted and delta-encoded, in chunks.
extension Checkpoint {
    // MARK: Stream

    /// Serializes the state: position and byte counts, then the primary index, the secondary
    /// indexes and the sets, each sorted and delta-encoded.
    static func encode(_ state: IndexState, segment: UInt64, offset: Int) -> [UInt8] {
        var stream: [UInt8] = []
        encode(state, segment: segment, offset: offset) { stream.append(contentsOf: $0) }
        return stream
    }

    /// Hands `chunk` every whole chunk `w` holds (all of it when `final`), keeping the rest.
    @inline(__always)
    static func flushChunks(
        _ w: inout ByteWriter, chunkSize: Int, final: Bool, _ chunk: (UnsafeRawBufferPointer) -> Void
    ) {
        guard final || w.count >= chunkSize else { return }
        var start = 0
        w.withBytes { bytes in
            while bytes.count - start >= chunkSize || (final && start < bytes.count) {
                let end = min(bytes.count, start + chunkSize)
                chunk(UnsafeRawBufferPointer(rebasing: bytes[start..<end]))
                start = end
            }
        }
        w.removeFirst(start)
    }

    /// Serializes the state as `encode(_:segment:offset:)` does, handing the stream to `chunk`
    /// as it goes, in pieces of `chunkSize` bytes (the last one shorter; a file takes pieces
    /// of at most `Checkpoint.chunkSize`, the default): the whole stream is
    /// never in memory (12 MB for a million objects, at the end of the save that wrote them).
    /// Every key of the primary index is in the stream.
    static func encode(
        _ state: IndexState, segment: UInt64, offset: Int, chunkSize: Int = Checkpoint.chunkSize,
        chunk: (UnsafeRawBufferPointer) -> Void
    ) {
        encode(
            state, segment: segment, offset: offset, chunkSize: chunkSize, minimum: .max, leaf: { _ in }, chunk: chunk)
    }

    /// Serializes the state as `encode(_:segment:offset:chunkSize:chunk:)` does, except that
    /// each leaf of the primary index that holds at least `JournalFormat.wholeLeafMinimumKeys`
    /// keys is handed to `leaf` whole (its 64 slots) and only named in the stream: a checkpoint
    /// file of version 3.
    static func encode(
        _ state: IndexState, segment: UInt64, offset: Int, chunkSize: Int = Checkpoint.chunkSize,
        leaf: (UnsafePointer<UInt64>) -> Void, chunk: (UnsafeRawBufferPointer) -> Void
    ) {
        encode(
            state, segment: segment, offset: offset, chunkSize: chunkSize,
            minimum: JournalFormat.wholeLeafMinimumKeys, leaf: leaf, chunk: chunk)
    }

    static func encode(
        _ state: IndexState, segment: UInt64, offset: Int, chunkSize: Int, minimum: Int,
        leaf leaves: (UnsafePointer<UInt64>) -> Void, chunk: (UnsafeRawBufferPointer) -> Void
    ) {
        var w = ByteWriter(capacity: chunkSize + 64 * 1024)
        // A local function would capture `w` in a box, with a dynamic exclusivity check on
        // every append (a third of the encode when it did): `flush` takes it `inout` instead.
        func flush(_ w: inout ByteWriter, final: Bool = false) {
            flushChunks(&w, chunkSize: chunkSize, final: final, chunk)
        }
        w.appendLE(state.version)
        w.appendLE(segment)
        w.appendLE(UInt64(offset))
        w.appendLE(UInt64(max(0, state.liveBytes)))
        w.appendLE(UInt64(max(0, state.totalBytes)))
        // Primary index, per keyspace: the whole leaves named (their slots go to `leaves`),
        // then the keys of the other leaves.
        let spaces = state.primary.keyspaces.sorted()
        w.appendVarint(spaces.count)
        for ks in spaces {
            w.appendVarint(UInt64(ks))
            w.appendVarint(state.primary.count(inKeyspace: ks))
            var whole = 0
            state.primary.forEachLeaf(inKeyspace: ks) { _, _, occupied in if occupied >= minimum { whole += 1 } }
            w.appendVarint(whole)
            var previousLeaf: UInt64 = 0
            state.primary.forEachLeaf(inKeyspace: ks) { number, slots, occupied in
                guard occupied >= minimum else { return }
                w.appendVarint(number - previousLeaf)
                w.appendVarint(occupied)
                previousLeaf = number
                leaves(slots)
                flush(&w)
            }
            var previousKey: UInt64 = 0
            var previousLocation: UInt64 = 0
            var first = true
            state.primary.forEachLeaf(inKeyspace: ks) { number, slots, occupied in
                guard occupied < minimum else { return }
                for i in 0..<RadixMap<UInt64>.fanout where slots[i] != 0 {
                    let id = number << 6 | UInt64(i)
                    let location = slots[i]
                    w.appendVarint(first ? id : id - previousKey)
                    w.appendVarint(zigzag(Int64(bitPattern: location &- previousLocation)))
                    previousKey = id
                    previousLocation = location
                    first = false
                }
                flush(&w)
            }
        }
        // Sets (before the secondary indexes: an open can stop where those begin).
        let setSpaces = state.sets.keyspaces.sorted()
        w.appendVarint(setSpaces.count)
        for ks in setSpaces {
            w.appendVarint(UInt64(ks))
            w.appendVarint(state.sets.count(inKeyspace: ks))
            var previousKey: UInt64 = 0
            var first = true
            state.sets.forEach(inKeyspace: ks) { key, set in
                let id = EngineKey(rawValue: key).id
                w.appendVarint(first ? id : id - previousKey)
                previousKey = id
                first = false
                let members = set.members
                w.appendVarint(members.count)
                var previous: UInt64 = 0
                for (i, m) in members.enumerated() {
                    w.appendVarint(i == 0 ? m : m - previous)
                    previous = m
                    if i & 0xFFF == 0xFFF { flush(&w) }
                }
                flush(&w)
                return true
            }
        }
        // Secondary indexes.
        let indexIDs = state.indexes.keys.sorted()
        w.appendVarint(indexIDs.count)
        for id in indexIDs {
            let index = state.indexes[id]!
            w.appendVarint(UInt64(id))
            w.appendVarint(index.count)
            var previous: [UInt8] = []
            var previousPK: UInt64 = 0
            index.forEach(from: nil, to: nil) { key, pk in
                var shared = 0
                let limit = min(previous.count, key.count)
                while shared < limit && previous[shared] == key[shared] { shared += 1 }
                w.appendVarint(shared)
                w.appendVarint(key.count - shared)
                w.append(UnsafeRawBufferPointer(rebasing: key[shared...]))
                w.appendVarint(zigzag(Int64(bitPattern: pk &- previousPK)))
                previous.removeAll(keepingCapacity: true)
                previous.append(contentsOf: key)
                previousPK = pk
                flush(&w)
                return true
            }
        }
        flush(&w, final: true)
    }
}
