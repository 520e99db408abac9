/// Everything the engine keeps in memory about the store at one version: the primary index
/// (key → location of its latest put), the ordered secondary indexes, the membership sets,
/// and byte counts for the compaction policy. A value: copying it is O(1) and is how a
/// snapshot pins a version.
struct IndexState: Sendable {
    var primary = RadixMap<UInt64>()
    var indexes: [UInt32: OrderedIndex] = [:]
    var sets = RadixMap<MemberSet>()
    /// The version (transaction number) of the last commit applied.
    var version: UInt64 = 0
    /// Uncompressed bytes of the operations that are still live (latest puts, set members).
    var liveBytes = 0
    /// Uncompressed bytes of all operations in the store's segments.
    var totalBytes = 0

    /// Applies every operation of a committed block at `frame`.
    /// `reader` finds the previous version of an overwritten key, to remove its index entries.
    mutating func apply(block: [UInt8], segment: UInt64, frameOffset: Int, reader: BlockReader) throws {
        try block.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                guard offset < (1 << JournalFormat.locationBlockOffsetBits) else {
                    throw EngineError(.corruption, "an operation starts beyond the addressable part of its block",
                                      path: reader.segments.files[segment]?.path, offset: frameOffset)
                }
                let (op, end): (Operation, Int)
                do { (op, end) = try Operation.decode(raw, at: offset) } catch let error as Operation.Malformed {
                    throw EngineError(.corruption, "malformed operation at block offset \(error.offset)",
                                      path: reader.segments.files[segment]?.path, offset: frameOffset)
                }
                let size = end - offset
                totalBytes += size
                switch op {
                case let .put(key, _, keys, keyCount):
                    let location = Location(segment: segment, frameOffset: frameOffset, blockOffset: offset).packed
                    let previous = primary.set(key, location)
                    var sameKeys = false
                    if let previous {
                        sameKeys = try removePrevious(key: key, location: previous, reader: reader, unlessKeys: (raw, keys))
                    }
                    if !sameKeys && keyCount > 0 {
                        Operation.forEachIndexKey(raw, keys, count: keyCount) { index, bytes in
                            indexes[index, default: OrderedIndex()].insert(bytes, key)
                        }
                    }
                    liveBytes += size
                case let .delete(key):
                    if let previous = primary.remove(key) {
                        _ = try removePrevious(key: key, location: previous, reader: reader, unlessKeys: nil)
                    }
                case let .set(code, set, members):
                    sets.modify(set) { s in
                        let before = s.count
                        switch code {
                        case .setAdd: s.add(sorted: members)
                        case .setRemove: s.remove(sorted: members)
                        default: s.replace(sorted: members)
                        }
                        liveBytes += (s.count - before) * 8
                    }
                }
                offset = end
            }
        }
    }

    /// Removes the index entries of the put at `location` and its bytes from the live count.
    /// When the put's index section equals `unlessKeys`, leaves the entries and returns true.
    private mutating func removePrevious(key: UInt64, location: UInt64, reader: BlockReader,
                                         unlessKeys: (UnsafeRawBufferPointer, Range<Int>)?) throws -> Bool {
        let loc = Location(packed: location)
        let block = try reader.block(segment: loc.segment, frameOffset: loc.frameOffset)
        return try block.withUnsafeBytes { old in
            let decoded: (Operation, Int)
            do { decoded = try Operation.decode(old, at: loc.blockOffset) } catch {
                throw EngineError(.corruption, "malformed operation at block offset \(loc.blockOffset)",
                                  path: reader.segments.files[loc.segment]?.path, offset: loc.frameOffset)
            }
            guard case let .put(_, _, keys, keyCount) = decoded.0 else {
                throw EngineError(.corruption, "a key's location does not hold a put",
                                  path: reader.segments.files[loc.segment]?.path, offset: loc.frameOffset)
            }
            liveBytes -= decoded.1 - loc.blockOffset
            if let (newBlock, newKeys) = unlessKeys, newKeys.count == keys.count,
               compareBytes(UnsafeRawBufferPointer(rebasing: newBlock[newKeys]), UnsafeRawBufferPointer(rebasing: old[keys])) == 0 {
                return true
            }
            Operation.forEachIndexKey(old, keys, count: keyCount) { index, bytes in
                if indexes[index]?.remove(bytes, key) == true, indexes[index]?.count == 0 {
                    indexes[index] = nil
                }
            }
            return false
        }
    }
}
