#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Dispatch

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

    /// Applies a committed transaction: its blocks, in order, at their frame offsets.
    ///
    /// Two passes that touch disjoint structures: the primary index and the sets (in operation
    /// order, collecting each key whose previous version was replaced), and the secondary
    /// indexes (every put's new entries). For a large transaction they run on two threads.
    /// A sequential fix-up then removes the entries of replaced versions that the key's final
    /// version does not have, and takes their bytes off the live count.
    mutating func apply(transaction blocks: [(frameOffset: Int, block: [UInt8])], manifest given: OperationManifest? = nil,
                        segment: UInt64, reader: BlockReader) throws {
        guard !blocks.isEmpty else { return }
        let path = reader.segments.files[segment]?.path
        let manifest: OperationManifest
        if let given { manifest = given } else {
            do { manifest = try OperationManifest.decode(blocks) } catch let error as OperationManifest.DecodeFailure {
                throw EngineError(.corruption, "\(error.reason) at block offset \(error.offset)", path: path, offset: blocks[error.block].frameOffset)
            }
        }
        var primaryPass = PrimaryPass(primary: primary, sets: sets)
        var indexPass = IndexPass(indexes: indexes)
        primary = RadixMap()
        sets = RadixMap()
        indexes = [:]
        if blocks.count >= 8 {
            let p = UncheckedSendable(withUnsafeMutablePointer(to: &primaryPass) { $0 })
            let q = UncheckedSendable(withUnsafeMutablePointer(to: &indexPass) { $0 })
            let b = UncheckedSendable(blocks)
            // Each thread owns one pass; both end before the passes are read again.
            let m = UncheckedSendable(manifest)
            DispatchQueue.concurrentPerform(iterations: 2) { worker in
                if worker == 0 { p.value.pointee.run(b.value, m.value, segment: segment, path: path) }
                else { q.value.pointee.run(b.value, m.value, path: path) }
            }
        } else {
            primaryPass.run(blocks, manifest, segment: segment, path: path)
            indexPass.run(blocks, manifest, path: path)
        }
        primary = primaryPass.primary
        sets = primaryPass.sets
        indexes = indexPass.indexes
        totalBytes += primaryPass.totalBytes
        liveBytes += primaryPass.liveBytes
        if let error = primaryPass.error ?? indexPass.error { throw error }
        // Fix-up of replaced versions.
        guard !primaryPass.replaced.isEmpty else { return }
        var local: [UInt64: [UInt8]] = [:]
        for (offset, block) in blocks { local[Location(segment: segment, frameOffset: offset, blockOffset: 0).frameKey] = block }
        func block(_ loc: Location) throws -> [UInt8] {
            if let b = local[loc.frameKey] { return b }
            return try reader.block(segment: loc.segment, frameOffset: loc.frameOffset)
        }
        func putOperation(_ loc: Location, _ raw: UnsafeRawBufferPointer) throws -> (indexKeys: Range<Int>, count: Int, end: Int) {
            guard case let (.put(_, _, keys, count), end)? = try? Operation.decode(raw, at: loc.blockOffset) else {
                throw EngineError(.corruption, "a key's location does not hold a put",
                                  path: reader.segments.files[loc.segment]?.path, offset: loc.frameOffset)
            }
            return (keys, count, end)
        }
        for (key, previous) in primaryPass.replaced {
            let old = Location(packed: previous)
            let oldBlock = try block(old)
            let final = primary[key].map(Location.init(packed:))
            let finalBlock = try final.map(block)
            try oldBlock.withUnsafeBytes { oldRaw in
                let o = try putOperation(old, oldRaw)
                liveBytes -= o.end - old.blockOffset
                guard o.count > 0 else { return }
                // The final version's index section: entries it shares with the old one stay.
                // The common case, the same section byte for byte, is settled without copying.
                var finalKeys: [(UInt32, [UInt8])] = []
                if let final, let finalBlock {
                    let same = try finalBlock.withUnsafeBytes { f -> Bool in
                        let n = try putOperation(final, f)
                        if n.count == o.count && n.indexKeys.count == o.indexKeys.count
                            && memcmp(f.baseAddress! + n.indexKeys.lowerBound, oldRaw.baseAddress! + o.indexKeys.lowerBound, o.indexKeys.count) == 0 {
                            return true
                        }
                        Operation.forEachIndexKey(f, n.indexKeys, count: n.count) { finalKeys.append(($0, Array($1))) }
                        return false
                    }
                    if same { return }
                }
                Operation.forEachIndexKey(oldRaw, o.indexKeys, count: o.count) { index, bytes in
                    if finalKeys.contains(where: { $0.0 == index && $0.1.elementsEqual(bytes) }) { return }
                    if indexes[index]?.remove(bytes, key) == true, indexes[index]?.count == 0 { indexes[index] = nil }
                }
            }
        }
    }

    /// Applies one block as a transaction of its own (tests and tools).
    mutating func apply(block: [UInt8], segment: UInt64, frameOffset: Int, reader: BlockReader) throws {
        try apply(transaction: [(frameOffset, block)], segment: segment, reader: reader)
    }
}

/// The primary index and sets, in operation order.
struct PrimaryPass {
    var primary: RadixMap<UInt64>
    var sets: RadixMap<MemberSet>
    /// Keys whose previous version a put or delete replaced, with that version's location.
    var replaced: [(UInt64, UInt64)] = []
    var totalBytes = 0
    var liveBytes = 0
    var error: EngineError?

    init(primary: RadixMap<UInt64>, sets: RadixMap<MemberSet>) {
        self.primary = primary
        self.sets = sets
    }

    mutating func run(_ blocks: [(frameOffset: Int, block: [UInt8])], _ m: OperationManifest, segment: UInt64, path: String?) {
        var keys: [UInt64] = []
        var locations: [UInt64] = []
        keys.reserveCapacity(2048)
        locations.reserveCapacity(2048)
        func flush() {
            guard !keys.isEmpty else { return }
            primary.setMany(keys.count, key: { keys[$0] }, value: { locations[$0] }) { _, key, old in
                replaced.append((key, old))
            }
            keys.removeAll(keepingCapacity: true)
            locations.removeAll(keepingCapacity: true)
        }
        let n = m.count
        for i in 0..<n {
            let ref = m.ref(i)
            let b = OperationManifest.block(ref)
            let offset = OperationManifest.offset(ref)
            let end = i + 1 < n && OperationManifest.block(m.ref(i + 1)) == b ? OperationManifest.offset(m.ref(i + 1)) : blocks[b].block.count
            let size = end - offset
            totalBytes += size
            switch OperationManifest.code(ref) {
            case JournalFormat.OperationCode.put.rawValue:
                keys.append(m.key(i))
                locations.append(Location(segment: segment, frameOffset: blocks[b].frameOffset, blockOffset: offset).packed)
                liveBytes += size
            case JournalFormat.OperationCode.delete.rawValue:
                flush()
                if let previous = primary.remove(m.key(i)) { replaced.append((m.key(i), previous)) }
            default:
                flush()
                let decoded = blocks[b].block.withUnsafeBytes { try? Operation.decode($0, at: offset) }
                guard case let (.set(code, set, members), _)? = decoded else {
                    error = EngineError(.corruption, "malformed operation at block offset \(offset)", path: path, offset: blocks[b].frameOffset)
                    return
                }
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
        }
        flush()
    }
}

/// The secondary indexes: every put's new entries.
struct IndexPass {
    var indexes: [UInt32: OrderedIndex]
    var error: EngineError?

    init(indexes: [UInt32: OrderedIndex]) { self.indexes = indexes }

    mutating func run(_ blocks: [(frameOffset: Int, block: [UInt8])], _ m: OperationManifest, path: String?) {
        var pending: [(UInt32, PendingEntries)] = []
        var i = 0
        let n = m.count
        for (b, entry) in blocks.enumerated() {
            entry.block.withUnsafeBytes { raw in
                for p in pending.indices { pending[p].1.removeAll() }
                while i < n && OperationManifest.block(m.ref(i)) == b {
                    let ref = m.ref(i)
                    let key = m.key(i)
                    i += 1
                    guard OperationManifest.code(ref) == JournalFormat.OperationCode.put.rawValue else { continue }
                    var count = OperationManifest.indexCount(ref)
                    guard count > 0 else { continue }
                    let offset = OperationManifest.offset(ref)
                    var start = offset + OperationManifest.indexDelta(ref)
                    if count == OperationManifest.manyIndexKeys || OperationManifest.indexDelta(ref) == OperationManifest.unknownDelta {
                        guard let h = try? Operation.header(raw, at: offset) else {
                            error = EngineError(.corruption, "malformed operation at block offset \(offset)", path: path, offset: entry.frameOffset)
                            return
                        }
                        start = h.indexKeys.lowerBound
                        count = h.indexKeyCount
                    }
                    Operation.forEachIndexKeyRange(raw, start..<raw.count, count: count) { index, range in
                        if let p = pending.firstIndex(where: { $0.0 == index }) {
                            pending[p].1.append(range, key)
                        } else {
                            var entries = PendingEntries()
                            entries.append(range, key)
                            pending.append((index, entries))
                        }
                    }
                }
                // Entries after everything in their index go in a leaf at a time.
                for (id, entries) in pending where entries.count > 0 {
                    var index = indexes.removeValue(forKey: id) ?? OrderedIndex()
                    if !index.appendAscending(entries, raw) {
                        for j in 0..<entries.count {
                            index.insert(UnsafeRawBufferPointer(rebasing: raw[entries.keys[j]]), entries.primaryKeys[j])
                        }
                    }
                    indexes[id] = index
                }
            }
            if error != nil { return }
        }
    }
}
