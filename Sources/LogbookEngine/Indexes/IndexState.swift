import Dispatch

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Everything the engine keeps in memory about the store at one version: the primary index
/// (key → location of its latest put), the ordered secondary indexes, the membership sets,
/// and byte counts for the compaction policy. A value: copying it is O(1) and is how a
/// snapshot pins a version.
struct IndexState: Sendable {
    var primary = RadixMap<UInt64>()
    /// The secondary indexes (built from the checkpoint on first use: `SecondaryIndexes`).
    var secondary = SecondaryIndexes()
    var indexes: [UInt32: OrderedIndex] {
        get { secondary.all }
        _modify { yield &secondary.all }
        set { secondary.all = newValue }
    }
    var sets = RadixMap<MemberSet>()
    /// The version (transaction number) of the last commit applied.
    var version: UInt64 = 0
    /// Uncompressed bytes of the operations that are still live (latest puts, set members).
    var liveBytes = 0
    /// Uncompressed bytes of all operations in the store's segments.
    var totalBytes = 0
    /// The check of the checkpoint's whole leaves that the open left running, if any
    /// (`Checkpoint.SlotCheck`): whatever writes waits for it.
    var slotCheck: Checkpoint.SlotCheck?

    /// Waits for the checks an open left running (the whole leaves' checksums, the secondary
    /// index section's); throws what they found and could not mend.
    func checkLoaded() throws(EngineError) {
        try slotCheck?.check()
        try secondary.check()
    }

    /// Applies a committed transaction: its blocks, in order, at their frame offsets.
    ///
    /// Three phases:
    /// 1. the operation table (given by the writer, or decoded from the blocks on replay);
    /// 2. two passes over structures that do not overlap — the primary index and the sets (in
    ///    operation order, collecting each key whose previous version was replaced), and the
    ///    secondary indexes (every put's new entries); for a large transaction they run on two
    ///    threads;
    /// 3. a sequential fix-up that removes the index entries of replaced versions that the
    ///    key's final version does not have, and takes their bytes off the live count.
    ///
    /// `retained` lists the puts whose index entries are those of the version they replace
    /// (`RetainedPuts`); `firstOrdinal` is the number of the first operation of `blocks` in
    /// their transaction (a large one is applied a part at a time). Such a put adds no entry
    /// in phase 2; when the version it replaced was not the one it names, its entries are
    /// inserted after phase 3 (if it is still the key's latest).
    mutating func apply(
        transaction blocks: [(frameOffset: Int, block: [UInt8])], manifest given: OperationTable? = nil,
        retained: RetainedPuts = RetainedPuts(), firstOrdinal: Int = 0,
        segment: UInt64, reader: BlockReader
    ) throws {
        guard !blocks.isEmpty else { return }
        // Deferred indexes whose check after the open is still running are waited for, and
        // indexes that could not be had make this throw (`DeferredIndexes`): every phase
        // below may change them. So are whole leaves that could not be mended (`SlotCheck`).
        try checkLoaded()
        let path = reader.segments.files[segment]?.path
        let table = try given ?? Self.operationTable(blocks, path: path)
        let (replaced, unsettled) = try runPasses(
            blocks, table, retained: retained, firstOrdinal: firstOrdinal, segment: segment, path: path)
        try removeReplacedEntries(replaced, blocks: blocks, segment: segment, reader: reader)
        try insertEntries(of: unsettled, blocks: blocks, segment: segment, path: path)
    }

    /// After phase 3: the entries of retained puts whose replaced version was not the one they
    /// name (another commit wrote the key in between, or deleted it), when still the key's latest.
    private mutating func insertEntries(
        of puts: [(key: UInt64, location: UInt64)], blocks: [(frameOffset: Int, block: [UInt8])],
        segment: UInt64, path: String?
    ) throws {
        for (key, packed) in puts where primary[key] == packed {
            let location = Location(packed: packed)
            guard let entry = blocks.first(where: { $0.frameOffset == location.frameOffset }) else { continue }
            try entry.block.withUnsafeBytes { raw in
                guard let h = try? JournalOperation.header(raw, at: location.blockOffset) else {
                    throw EngineError(
                        .corruption, "malformed operation at block offset \(location.blockOffset)", path: path,
                        offset: location.frameOffset)
                }
                JournalOperation.forEachIndexKey(raw, h.indexKeys, count: h.indexKeyCount) { index, bytes in
                    indexes[index, default: OrderedIndex()].insert(bytes, key)
                }
            }
        }
    }

    /// Phase 1 on replay: the operation table decoded from the blocks, its errors located.
    static func operationTable(_ blocks: [(frameOffset: Int, block: [UInt8])], path: String?) throws
        -> OperationTable
    {
        do {
            return try OperationTable.decode(blocks)
        } catch let error as OperationTable.DecodeFailure {
            throw EngineError(
                .corruption, "\(error.reason) at block offset \(error.offset)", path: path,
                offset: blocks[error.block].frameOffset)
        }
    }

    /// Phase 2: the primary/sets pass and the index pass. Returns the replaced versions.
    /// Also returns the retained puts whose entries phase 2 left out and that replaced another
    /// version than they name, or none.
    private mutating func runPasses(
        _ blocks: [(frameOffset: Int, block: [UInt8])], _ table: OperationTable, retained: RetainedPuts,
        firstOrdinal: Int, segment: UInt64, path: String?
    ) throws -> (replaced: [(UInt64, UInt64)], unsettled: [(key: UInt64, location: UInt64)]) {
        // The passes take the structures (so that copy-on-write does not copy them) and give
        // them back when both are done.
        var primaryPass = PrimaryPass(
            primary: primary, sets: sets, retained: retained, firstOrdinal: firstOrdinal)
        var indexPass = IndexPass(secondary: secondary, retained: retained, firstOrdinal: firstOrdinal)
        primary = RadixMap()
        sets = RadixMap()
        secondary = SecondaryIndexes()
        if blocks.count >= 8 {
            // Each thread owns one pass; `concurrentPerform` returns only after both are done,
            // so the pointers never outlive their `withUnsafeMutablePointer` closures.
            withUnsafeMutablePointer(to: &primaryPass) { primaryPointer in
                withUnsafeMutablePointer(to: &indexPass) { indexPointer in
                    let passes = UncheckedSendable((primaryPointer, indexPointer, blocks, table))
                    DispatchQueue.concurrentPerform(iterations: 2) { worker in
                        let (primaryPass, indexPass, blocks, table) = passes.value
                        if worker == 0 {
                            primaryPass.pointee.run(blocks, table, segment: segment, path: path)
                        } else {
                            indexPass.pointee.run(blocks, table, path: path)
                        }
                    }
                }
            }
        } else {
            primaryPass.run(blocks, table, segment: segment, path: path)
            indexPass.run(blocks, table, path: path)
        }
        primary = primaryPass.primary
        sets = primaryPass.sets
        secondary = indexPass.secondary
        totalBytes += primaryPass.totalBytes
        liveBytes += primaryPass.liveBytes
        if let error = primaryPass.error ?? indexPass.error { throw error }
        return (primaryPass.replaced, primaryPass.unsettled)
    }

    /// Phase 3: for each replaced version, the live bytes it held come off, and its index
    /// entries that the key's final version does not share leave their indexes.
    private mutating func removeReplacedEntries(
        _ replaced: [(UInt64, UInt64)], blocks: [(frameOffset: Int, block: [UInt8])],
        segment: UInt64, reader: BlockReader
    ) throws {
        guard !replaced.isEmpty else { return }
        // The transaction's own blocks are at hand; older versions are read through the cache.
        var local: [UInt64: [UInt8]] = [:]
        for (offset, block) in blocks {
            local[Location(segment: segment, frameOffset: offset, blockOffset: 0).frameKey] = block
        }
        // Replaced versions come in runs from the same block (a batch rewrites records in key
        // order), or from a few blocks in turn (keys a batch update left as they were beside
        // those it wrote): the last blocks asked for are kept at hand, four for old versions
        // (slots 0–3, taken in turn) and one for final ones (slot 4).
        var recent: [(frameKey: UInt64, block: [UInt8])] = Array(repeating: (.max, []), count: 5)
        var nextOld = 0
        func block(_ loc: Location, final: Bool) throws -> [UInt8] {
            let frameKey = loc.frameKey
            let slots = final ? 4..<5 : 0..<4
            for i in slots where recent[i].frameKey == frameKey { return recent[i].block }
            let b = try local[frameKey] ?? reader.block(segment: loc.segment, frameOffset: loc.frameOffset)
            if final {
                recent[4] = (frameKey, b)
            } else {
                recent[nextOld] = (frameKey, b)
                nextOld = (nextOld + 1) & 3
            }
            return b
        }
        func putOperation(_ loc: Location, _ raw: UnsafeRawBufferPointer) throws -> (
            indexKeys: Range<Int>, count: Int, end: Int
        ) {
            guard
                case (.put(_, _, let keys, let count), let end)? = try? JournalOperation.decode(
                    raw, at: loc.blockOffset)
            else {
                throw EngineError(
                    .corruption, "a key's location does not hold a put",
                    path: reader.segments.files[loc.segment]?.path, offset: loc.frameOffset)
            }
            return (keys, count, end)
        }
        for (key, previous) in replaced {
            let old = Location(packed: previous)
            let final = primary[key].map(Location.init(packed:))
            // The final version is this transaction's own (a put here) or none (a delete).
            let finalBlock = try final.map { try block($0, final: true) }
            // The previous version is old data: its block may be damaged or gone (a bad sector
            // in a sealed segment) while this transaction is sound. Applying the transaction
            // must not depend on it: its entries are then found by the key instead, with a walk
            // of every index (slow, but only ever after damage), and its bytes stay counted as
            // live until a compaction rewrites what is live.
            guard let oldBlock = try? block(old, final: false),
                let o = oldBlock.withUnsafeBytes({ try? putOperation(old, $0) })
            else {
                try removeEntries(of: key, keepingThoseOf: final, in: finalBlock, putOperation)
                continue
            }
            try oldBlock.withUnsafeBytes { oldRaw in
                liveBytes -= o.end - old.blockOffset
                guard o.count > 0 else { return }
                // The final version's index section: entries it shares with the old one stay.
                // The common case, the same section byte for byte, is settled without copying.
                var finalKeys: [(UInt32, [UInt8])] = []
                if let final, let finalBlock {
                    let same = try finalBlock.withUnsafeBytes { f -> Bool in
                        let n = try putOperation(final, f)
                        if n.count == o.count && n.indexKeys.count == o.indexKeys.count
                            && memcmp(
                                f.baseAddress! + n.indexKeys.lowerBound, oldRaw.baseAddress! + o.indexKeys.lowerBound,
                                o.indexKeys.count) == 0
                        {
                            return true
                        }
                        JournalOperation.forEachIndexKey(f, n.indexKeys, count: n.count) {
                            finalKeys.append(($0, Array($1)))
                        }
                        return false
                    }
                    if same { return }
                }
                JournalOperation.forEachIndexKey(oldRaw, o.indexKeys, count: o.count) { index, bytes in
                    if finalKeys.contains(where: { $0.0 == index && $0.1.elementsEqual(bytes) }) { return }
                    if indexes[index]?.remove(bytes, key) == true, indexes[index]?.count == 0 { indexes[index] = nil }
                }
            }
        }
    }

    /// Removes `key`'s index entries that its final version (if any) does not have, found by
    /// walking every index: the way when the replaced version cannot be read.
    private mutating func removeEntries(
        of key: UInt64, keepingThoseOf final: Location?, in finalBlock: [UInt8]?,
        _ putOperation: (Location, UnsafeRawBufferPointer) throws -> (indexKeys: Range<Int>, count: Int, end: Int)
    ) throws {
        var keep: [(UInt32, [UInt8])] = []
        if let final, let finalBlock {
            try finalBlock.withUnsafeBytes { raw in
                let n = try putOperation(final, raw)
                JournalOperation.forEachIndexKey(raw, n.indexKeys, count: n.count) { keep.append(($0, Array($1))) }
            }
        }
        for id in Array(indexes.keys) {
            var stale: [[UInt8]] = []
            indexes[id]!.forEach(from: nil, to: nil) { bytes, primaryKey in
                if primaryKey == key && !keep.contains(where: { $0.0 == id && $0.1.elementsEqual(bytes) }) {
                    stale.append(Array(bytes))
                }
                return true
            }
            for bytes in stale {
                bytes.withUnsafeBytes { raw in _ = indexes[id]!.remove(raw, key) }
            }
            if indexes[id]!.count == 0 { indexes[id] = nil }
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
    /// Retained puts (`RetainedPuts`) whose replaced version was another than they name, or
    /// none: their entries are inserted after phase 3.
    var unsettled: [(key: UInt64, location: UInt64)] = []
    /// For each put of the batch being flushed, its entry in `retained` (-1: none); -1 once
    /// settled. (A property: a local captured by the flush's closure was checked for
    /// exclusive access at every use.)
    private var retainedEntry: [Int] = []
    var totalBytes = 0
    var liveBytes = 0
    var error: EngineError?
    private let retained: RetainedPuts
    private let firstOrdinal: Int

    init(primary: RadixMap<UInt64>, sets: RadixMap<MemberSet>, retained: RetainedPuts, firstOrdinal: Int) {
        self.primary = primary
        self.sets = sets
        self.retained = retained
        self.firstOrdinal = firstOrdinal
    }

    mutating func run(
        _ blocks: [(frameOffset: Int, block: [UInt8])], _ m: OperationTable, segment: UInt64, path: String?
    ) {
        var keys: [UInt64] = []
        var locations: [UInt64] = []
        keys.reserveCapacity(2048)
        locations.reserveCapacity(2048)
        var nextRetained = retained.firstIndex(atOrAfter: firstOrdinal)
        let anyRetained = nextRetained < retained.count
        func flush() {
            guard !keys.isEmpty else { return }
            if anyRetained {
                primary.setMany(
                    keys.count, key: { keys[$0] }, value: { locations[$0] },
                    previous: { j, key, old in
                        let r = retainedEntry[j]
                        if r >= 0 {
                            retainedEntry[j] = -1
                            if retained[r].previous == old {
                                // The version it names: its entries are in the indexes already.
                                liveBytes -= Int(retained[r].previousSize)
                                return
                            }
                            unsettled.append((key, locations[j]))
                        }
                        replaced.append((key, old))
                    })
                // A retained put of a key that had no version left (deleted in between).
                for j in retainedEntry.indices where retainedEntry[j] >= 0 { unsettled.append((keys[j], locations[j])) }
                retainedEntry.removeAll(keepingCapacity: true)
            } else {
                primary.setMany(
                    keys.count, key: { keys[$0] }, value: { locations[$0] },
                    previous: { _, key, old in replaced.append((key, old)) })
            }
            keys.removeAll(keepingCapacity: true)
            locations.removeAll(keepingCapacity: true)
        }
        let n = m.count
        var setOperations: [Int] = []
        for i in 0..<n {
            let ref = m.ref(i)
            let b = OperationTable.block(ref)
            let offset = OperationTable.offset(ref)
            let end =
                i + 1 < n && OperationTable.block(m.ref(i + 1)) == b
                ? OperationTable.offset(m.ref(i + 1)) : blocks[b].block.count
            let size = end - offset
            totalBytes += size
            switch OperationTable.code(ref) {
            case JournalFormat.OperationCode.put.rawValue:
                keys.append(m.key(i))
                locations.append(
                    Location(segment: segment, frameOffset: blocks[b].frameOffset, blockOffset: offset).packed)
                liveBytes += size
                if anyRetained {
                    if nextRetained < retained.count && Int(retained[nextRetained].ordinal) == firstOrdinal + i {
                        retainedEntry.append(nextRetained)
                        nextRetained += 1
                    } else {
                        retainedEntry.append(-1)
                    }
                }
            case JournalFormat.OperationCode.delete.rawValue:
                flush()
                if let previous = primary.remove(m.key(i)) { replaced.append((m.key(i), previous)) }
            default:
                // The sets' own map: applied after the puts, in key order (below).
                setOperations.append(i)
            }
        }
        flush()
        applySetOperations(setOperations, blocks, m, path: path)
    }

    /// The transaction's set operations, `operations` (positions in `m`, in transaction order),
    /// applied in key order (a stable sort: one set's operations keep their order). The sets of
    /// neighbouring keys share a leaf of the map, and a run of additions to them is made with
    /// one descent a leaf (`RadixMap.modifyAdding`). Only the sets' map and the byte counts
    /// change here: the puts and deletes need no particular order with them.
    private mutating func applySetOperations(
        _ operations: [Int], _ blocks: [(frameOffset: Int, block: [UInt8])], _ m: OperationTable, path: String?
    ) {
        guard !operations.isEmpty else { return }
        var cursor = RadixMap<MemberSet>.LeafCursor()
        for i in KeySort.stable(operations, key: { m.key($0) }) {
            let ref = m.ref(i)
            let b = OperationTable.block(ref)
            let offset = OperationTable.offset(ref)
            let decoded = blocks[b].block.withUnsafeBytes { try? JournalOperation.decode($0, at: offset) }
            guard case (.set(let code, let set, let members), _)? = decoded else {
                error = EngineError(
                    .corruption, "malformed operation at block offset \(offset)", path: path,
                    offset: blocks[b].frameOffset)
                return
            }
            if code == .setAdd && !members.isEmpty {
                sets.modifyAdding(set, cursor: &cursor) { s in liveBytes += s.add(sorted: members) * 8 }
                continue
            }
            cursor = RadixMap<MemberSet>.LeafCursor()  // a removal can take a leaf away
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
}

/// The secondary indexes: every put's new entries. Deferred indexes are built only when a
/// put has index entries.
struct IndexPass {
    var secondary: SecondaryIndexes
    var error: EngineError?
    /// Puts whose entries are in the indexes already (`RetainedPuts`): left out here.
    private let retained: RetainedPuts
    private let firstOrdinal: Int

    init(secondary: SecondaryIndexes, retained: RetainedPuts, firstOrdinal: Int) {
        self.secondary = secondary
        self.retained = retained
        self.firstOrdinal = firstOrdinal
    }

    mutating func run(_ blocks: [(frameOffset: Int, block: [UInt8])], _ m: OperationTable, path: String?) {
        var pending: [(UInt32, PendingEntries)] = []
        var i = 0
        let n = m.count
        var nextRetained = retained.firstIndex(atOrAfter: firstOrdinal)
        for (b, entry) in blocks.enumerated() {
            entry.block.withUnsafeBytes { raw in
                for p in pending.indices { pending[p].1.removeAll() }
                while i < n && OperationTable.block(m.ref(i)) == b {
                    let ref = m.ref(i)
                    let key = m.key(i)
                    i += 1
                    if nextRetained < retained.count && Int(retained[nextRetained].ordinal) == firstOrdinal + i - 1 {
                        nextRetained += 1
                        continue
                    }
                    guard OperationTable.code(ref) == JournalFormat.OperationCode.put.rawValue else { continue }
                    var count = OperationTable.indexCount(ref)
                    guard count > 0 else { continue }
                    let offset = OperationTable.offset(ref)
                    var start = offset + OperationTable.indexDelta(ref)
                    if count == OperationTable.manyIndexKeys
                        || OperationTable.indexDelta(ref) == OperationTable.unknownDelta
                    {
                        guard let h = try? JournalOperation.header(raw, at: offset) else {
                            error = EngineError(
                                .corruption, "malformed operation at block offset \(offset)", path: path,
                                offset: entry.frameOffset)
                            return
                        }
                        start = h.indexKeys.lowerBound
                        count = h.indexKeyCount
                    }
                    JournalOperation.forEachIndexKeyRange(raw, start..<raw.count, count: count) { index, range in
                        if let p = pending.firstIndex(where: { $0.0 == index }) {
                            pending[p].1.append(range, key)
                        } else {
                            var entries = PendingEntries()
                            entries.append(range, key)
                            pending.append((index, entries))
                        }
                    }
                }
                // Entries after everything in their index go in a leaf at a time (`apply`
                // checked deferred indexes first).
                for (id, entries) in pending where entries.count > 0 {
                    var index = secondary.all.removeValue(forKey: id) ?? OrderedIndex()
                    if !index.appendAscending(entries, raw) {
                        for j in 0..<entries.count {
                            index.insert(UnsafeRawBufferPointer(rebasing: raw[entries.keys[j]]), entries.primaryKeys[j])
                        }
                    }
                    secondary.all[id] = index
                }
            }
            if error != nil { return }
        }
    }
}
