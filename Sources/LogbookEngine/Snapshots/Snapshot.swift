import Dispatch

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A consistent, read-only view of the store at one version.
///
/// Taking one is O(1) and never blocks the writer; it sees exactly the commits up to its
/// `version`. Release it (let it go out of scope) when done: a pinned snapshot keeps the
/// segments it reads from being deleted by compaction.
///
/// ```swift
/// let snapshot = store.snapshot()
/// let count = snapshot.count(inKeyspace: 1)
/// snapshot.forEachIndexEntry(index: 1, from: IndexBound(low, inclusive: true), to: nil) { key, primaryKey in
///     print(primaryKey)
///     return true          // false stops the scan
/// }
/// ```
public final class Snapshot: Sendable {
    let state: IndexState
    let reader: BlockReader
    private let registry: SnapshotRegistry
    /// Its entry in the store's registry of pinned snapshots.
    let pin: Int

    init(published: Store.Published, cache: FrameCache, registry: SnapshotRegistry) {
        state = published.state
        reader = BlockReader(segments: published.segments, cache: cache)
        self.registry = registry
        pin = registry.pin(version: published.state.version)
    }

    deinit { registry.unpin(pin) }

    /// The version of the last commit this snapshot sees.
    public var version: UInt64 { state.version }

    /// Throws when the checkpoint's whole leaves failed their checksums and the journal could
    /// not mend them (`Checkpoint.SlotCheck`): they read as empty, so a read that may have
    /// gone through them fails rather than answer without their keys. (The non-throwing
    /// reads — `contains`, the counts, the key lists — answer without them.)
    @inline(__always)
    private func requireSoundLeaves() throws {
        if let failure = state.slotCheck?.failure { throw failure }
    }

    /// Number of keys in the store.
    public var keyCount: Int { state.primary.count }

    /// Number of keys in a keyspace (the high 16 bits of a key), without scanning.
    public func count(inKeyspace keyspace: UInt16) -> Int { state.primary.count(inKeyspace: keyspace) }

    /// Whether `key` (raw) has a value at this version.
    public func contains(_ key: UInt64) -> Bool { state.primary[key] != nil }

    /// The value stored under `key`, or nil.
    public func value(forKey key: UInt64) throws -> [UInt8]? {
        try withValue(forKey: key) { Array($0) }
    }

    /// Calls `body` with the value stored under `key` without copying it; nil if there is none.
    public func withValue<R>(forKey key: UInt64, _ body: (UnsafeRawBufferPointer) throws -> R) throws -> R? {
        let found = state.primary[key]
        try requireSoundLeaves()
        guard let packed = found else { return nil }
        let location = Location(packed: packed)
        let block = try reader.block(segment: location.segment, frameOffset: location.frameOffset)
        return try block.withUnsafeBytes { raw -> R in
            try body(UnsafeRawBufferPointer(rebasing: raw[putValue(raw, at: location, of: key)]))
        }
    }

    /// Calls `body` with the position in `keys`, the key and the value of each of `keys` that
    /// has one. Values are visited in the order they are stored, so that each block is read
    /// once: that is the order of `keys` when they were written in that order (as keys written
    /// together are), else the storage order. This is the fast way to read many values.
    ///
    /// `caching`: whether the blocks read are kept in the store's shared block cache (see
    /// `StoreOptions.cacheSize`). By default (nil) a read of at most `cachedReadLimit` keys
    /// keeps them and a larger one does not: a read of a whole entity would otherwise push out
    /// every block that other reads use, for blocks it reads once. A caller that reads a large
    /// result in parts says so itself (a streamed fetch caches its first part only).
    ///
    /// ```swift
    /// try snapshot.forEachValue(forKeys: keys, caching: false) { i, key, value in
    ///     total += value.count
    /// }
    /// ```
    public func forEachValue(
        forKeys keys: [UInt64], caching: Bool? = nil, _ body: (Int, UInt64, UnsafeRawBufferPointer) throws -> Void
    ) throws {
        try forEachPut(forKeys: keys, keys.indices, caching: caching ?? (keys.count <= Self.cachedReadLimit)) {
            i, key, raw, location in
            try body(i, key, UnsafeRawBufferPointer(rebasing: raw[putValue(raw, at: location, of: key)]))
        }
    }

    /// Writes into `transaction` a new version of each of `keys` that has a value: the value
    /// `transform` makes from the stored one, with the stored version's index entries copied
    /// byte for byte. `transform` is given the position in `keys`, the key, the stored value
    /// and a buffer of the value's length plus `growth` bytes to write the new value into; it
    /// returns the bytes it wrote, or nil to leave the key as it is (nothing is written for
    /// it: a value the transform would not change need not be written again). Returns the
    /// number of keys that have a value (written or left).
    ///
    /// For changes that no index entry is made from — a batch update of an attribute that no
    /// index covers. The commit then leaves the indexes as they are, where it would remove and
    /// insert again every entry of a put (and read every replaced version to find them). A key
    /// that another commit writes after this snapshot and before `transaction`'s commit is
    /// applied as a put with these entries would be. The caller answers for the entries still
    /// being the value's: the engine never reads values.
    ///
    /// Many keys are read and written on two threads, each half of `keys` in order, its
    /// operations after the first half's: `transform` is called concurrently.
    ///
    /// ```swift
    /// var transaction = Transaction()
    /// try store.snapshot().rewriteValues(forKeys: keys, growth: 0, into: &transaction) { _, _, value, out in
    ///     if value[0] == 1 { return nil }   // already set: not written again
    ///     out.copyMemory(from: value)
    ///     out[0] = 1                        // a flag no index covers
    ///     return value.count
    /// }
    /// try store.commit(transaction)
    /// ```
    @discardableResult
    public func rewriteValues(
        forKeys keys: [UInt64], growth: Int, into transaction: inout Transaction,
        _ transform: @Sendable (Int, UInt64, UnsafeRawBufferPointer, UnsafeMutableRawBufferPointer) throws -> Int?
    ) throws -> Int {
        try rewriteValues(
            forKeys: keys, growth: growth, into: &transaction, parallelFrom: Self.parallelRewriteKeys, transform)
    }

    /// `rewriteValues(forKeys:growth:into:_:)`, on two threads from `parallelFrom` keys (tests
    /// make the threads work on few keys).
    func rewriteValues(
        forKeys keys: [UInt64], growth: Int, into transaction: inout Transaction, parallelFrom: Int,
        _ transform: @Sendable (Int, UInt64, UnsafeRawBufferPointer, UnsafeMutableRawBufferPointer) throws -> Int?
    ) throws -> Int {
        precondition(growth >= 0, "a value's growth is not negative")
        guard keys.count >= parallelFrom, Self.processors > 1 else {
            return try rewriteValues(keys, keys.indices, growth: growth, into: &transaction, transform)
        }
        let halves = [0..<keys.count / 2, keys.count / 2..<keys.count]
        var parts = [(Transaction, Int)?](repeating: nil, count: 2)
        var errors = [(any Error)?](repeating: nil, count: 2)
        parts.withUnsafeMutableBufferPointer { partsBuffer in
            errors.withUnsafeMutableBufferPointer { errorsBuffer in
                // Each worker writes only its own element; both are read after the join.
                let out = UncheckedSendable((partsBuffer, errorsBuffer))
                DispatchQueue.concurrentPerform(iterations: 2) { worker in
                    var part = Transaction()
                    // The first part has room for every key's retained put: the second is
                    // appended to it in place.
                    part.reserveRetained(worker == 0 ? keys.count : 0)
                    do {
                        let n = try self.rewriteValues(keys, halves[worker], growth: growth, into: &part, transform)
                        out.value.0[worker] = (part, n)
                    } catch {
                        out.value.1[worker] = error
                    }
                }
            }
        }
        if let error = errors[0] ?? errors[1] { throw error }
        let (first, firstCount) = parts[0]!
        let (second, secondCount) = parts[1]!
        parts = []
        // Let go of the parts as they are joined: the transaction's arrays are then its own,
        // and grow in place.
        transaction.append(consume first)
        transaction.append(consume second)
        return firstCount + secondCount
    }

    /// Keys from which `rewriteValues` works on two threads.
    static let parallelRewriteKeys = 1 << 16
    static let processors = Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))

    /// The most keys a read of many values (`forEachValue(forKeys:)`) keeps the blocks of in
    /// the shared block cache unless told otherwise.
    public static let cachedReadLimit = 8192

    /// `rewriteValues` of `keys[positions]` on this thread.
    private func rewriteValues(
        _ keys: [UInt64], _ positions: Range<Int>, growth: Int, into transaction: inout Transaction,
        _ transform: (Int, UInt64, UnsafeRawBufferPointer, UnsafeMutableRawBufferPointer) throws -> Int?
    ) throws -> Int {
        var scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 4096 + growth, alignment: 8)
        defer { scratch.deallocate() }
        transaction.reserveRetained(positions.count)
        var found = 0
        // The blocks read are not cached: their versions are being replaced.
        try forEachPut(forKeys: keys, positions, caching: false) { i, key, raw, location in
            guard let header = try? JournalOperation.header(raw, at: location.blockOffset), header.code == .put,
                header.key == key
            else { throw misplaced(key, at: location, in: raw) }
            // One parse of the operation gives its value and its index section.
            let value = UnsafeRawBufferPointer(rebasing: raw[header.value])
            if scratch.count < value.count + growth {
                scratch.deallocate()
                scratch = .allocate(byteCount: value.count + growth, alignment: 8)
            }
            let out = UnsafeMutableRawBufferPointer(rebasing: scratch[0..<(value.count + growth)])
            found += 1
            guard let count = try transform(i, key, value, out) else { return }
            precondition(count >= 0 && count <= out.count, "a rewritten value is within its buffer")
            transaction.putRetainingEntries(
                key, value: UnsafeRawBufferPointer(rebasing: out[0..<count]), stored: raw, header: header,
                previous: location)
        }
        return found
    }

    /// Calls `body` with the position in `keys`, the key, the raw block that holds the key's
    /// latest put, and the put's location, in storage order.
    private func forEachPut(
        forKeys keys: [UInt64], _ positions: Range<Int>, caching: Bool = true,
        _ body: (Int, UInt64, UnsafeRawBufferPointer, Location) throws -> Void
    ) throws {
        // Locations first: when they rise with the keys, a single pass reads each block once.
        var locations = state.primary.values(forKeys: keys[positions])
        try requireSoundLeaves()
        var ordered = true
        var previous: UInt64 = 0
        for i in locations.indices {
            let packed = locations[i]
            if packed == 0 {
                locations[i] = .max  // no such key
                continue
            }
            if packed < previous { ordered = false }
            previous = packed
        }
        let scanner = BlockScanner(reader: reader, caching: caching)
        let order: [Int]? = ordered ? nil : locations.indices.sorted(by: { locations[$0] < locations[$1] })
        // The keys of one block are handed over in one visit of it: the block is looked up
        // (and its buffer retained) once per block, not once per key.
        let start = positions.lowerBound
        let n = locations.count
        var j = 0
        while j < n {
            let i = order?[j] ?? j
            let packed = locations[i]
            j += 1
            guard packed != .max else { continue }
            let location = Location(packed: packed)
            let frame = location.frameKey
            try scanner.withBlock(segment: location.segment, frameOffset: location.frameOffset) { raw in
                try body(start + i, keys[start + i], raw, location)
                while j < n {
                    let next = order?[j] ?? j
                    let p = locations[next]
                    if p == .max {
                        j += 1
                        continue
                    }
                    let l = Location(packed: p)
                    guard l.frameKey == frame else { return }
                    j += 1
                    try body(start + next, keys[start + next], raw, l)
                }
            }
        }
    }

    /// The smallest and largest key of a keyspace, or nil when it holds none: how a scan
    /// splits a keyspace between workers.
    public func keyBounds(inKeyspace keyspace: UInt16) -> ClosedRange<UInt64>? {
        var first: UInt64?
        state.primary.forEach(inKeyspace: keyspace) { key, _ in
            first = key
            return false
        }
        guard let first, let last = state.primary.lastKey(inKeyspace: keyspace) else { return nil }
        return first...last
    }

    /// One value a block scan visits: its key and where its value is in the block.
    public struct ScanEntry: Sendable {
        /// The key (raw).
        public var key: UInt64
        /// The value's bytes in the block the entry was handed with.
        public var value: Range<Int>
    }

    /// Visits the value of every key of `keyspace` within `range` (full keys), for a scan.
    ///
    /// Keys are taken in ascending order in batches of up to `batchSize`; each batch is read in
    /// storage order, so that each block is decoded once per batch, and the blocks a scan reads
    /// are not kept in the shared block cache (a pass over the whole store does not evict what
    /// other reads use). Within a batch, keys come in ascending order when they were written
    /// in that order (as keys written together are); a caller that needs key order sorts what
    /// it keeps of a batch. At most one block is held at a time. `body` returns false to stop.
    ///
    /// ```swift
    /// var names = 0
    /// try snapshot.scanValues(inKeyspace: 1, in: snapshot.keyBounds(inKeyspace: 1)!) { key, value in
    ///     names += value.count
    ///     return true
    /// }
    /// ```
    public func scanValues(
        inKeyspace keyspace: UInt16, in range: ClosedRange<UInt64>, batchSize: Int = 4096,
        _ body: (UInt64, UnsafeRawBufferPointer) throws -> Bool
    ) throws {
        try scanBlocks(inKeyspace: keyspace, in: range, batchSize: batchSize) { block, entries in
            for e in entries where try !body(e.key, UnsafeRawBufferPointer(rebasing: block[e.value])) { return false }
            return true
        }
    }

    /// The same scan handed over a block at a time: `body` gets the decoded block and the
    /// entries of the batch that are in it (in storage order), and returns false to stop. The
    /// loop over a block's values is the caller's own, with no call per value.
    ///
    /// `caching`: whether the blocks read are kept in the shared block cache (worth it for a
    /// small scan that runs often; a large one should leave the cache to other reads).
    public func scanBlocks(
        inKeyspace keyspace: UInt16, in range: ClosedRange<UInt64>, batchSize: Int = 4096, caching: Bool = false,
        _ body: (UnsafeRawBufferPointer, UnsafeBufferPointer<ScanEntry>) throws -> Bool
    ) throws {
        let batch = max(1, min(batchSize, state.primary.count(inKeyspace: keyspace)))
        // Scratch for one batch, reused: keys, their locations, the entries handed over.
        let keys = UnsafeMutableBufferPointer<UInt64>.allocate(capacity: batch)
        let locations = UnsafeMutableBufferPointer<UInt64>.allocate(capacity: batch)
        let entries = UnsafeMutableBufferPointer<ScanEntry>.allocate(capacity: batch)
        defer {
            keys.deallocate()
            locations.deallocate()
            entries.deallocate()
        }
        var next = range.lowerBound
        let scanner = BlockScanner(reader: reader, caching: caching)
        var order: [Int] = []
        let blockShift = UInt64(JournalFormat.locationBlockOffsetBits)
        while next <= range.upperBound {
            let n = state.primary.collect(
                inKeyspace: keyspace, from: next, through: range.upperBound, keys: keys, values: locations)
            try requireSoundLeaves()
            guard n > 0 else { return }
            let last = keys[n - 1]
            var ordered = true
            for i in 1..<max(1, n) where locations[i] < locations[i - 1] {
                ordered = false
                break
            }
            if !ordered {
                // Storage order: each block read once for the batch.
                order.removeAll(keepingCapacity: true)
                order.append(contentsOf: 0..<n)
                order.sort { locations[$0] < locations[$1] }
                let sortedKeys = order.map { keys[$0] }
                let sortedLocations = order.map { locations[$0] }
                for i in 0..<n {
                    keys[i] = sortedKeys[i]
                    locations[i] = sortedLocations[i]
                }
            }
            // Runs of entries in one block are handed over together.
            var i = 0
            while i < n {
                let first = Location(packed: locations[i])
                var end = i + 1
                while end < n && locations[end] >> blockShift == locations[i] >> blockShift { end += 1 }
                let stop = try scanner.withBlock(segment: first.segment, frameOffset: first.frameOffset) { raw in
                    for j in i..<end {
                        let location = Location(packed: locations[j])
                        guard let (stored, value) = JournalOperation.putValue(raw, at: location.blockOffset),
                            stored == keys[j]
                        else { throw misplaced(keys[j], at: location, in: raw) }
                        entries[j - i] = ScanEntry(key: keys[j], value: value)
                    }
                    return try !body(raw, UnsafeBufferPointer(rebasing: entries[0..<(end - i)]))
                }
                if stop { return }
                i = end
            }
            if last == UInt64.max { return }
            next = last + 1
        }
    }

    /// The value's range in `raw` of the put at `location`, which must be a put of `key`: a
    /// location that holds anything else (damage, or a bug that mixed up two records) is an
    /// error, never another record's bytes.
    private func putValue(_ raw: UnsafeRawBufferPointer, at location: Location, of key: UInt64) throws -> Range<Int> {
        if let (stored, value) = JournalOperation.putValue(raw, at: location.blockOffset), stored == key {
            return value
        }
        throw misplaced(key, at: location, in: raw)
    }

    /// The error for a location that does not hold a put of `key` (out of the scan's loop).
    @inline(never)
    private func misplaced(_ key: UInt64, at location: Location, in raw: UnsafeRawBufferPointer) -> EngineError {
        let path = reader.segments.files[location.segment]?.path ?? ""
        guard let (stored, _) = JournalOperation.putValue(raw, at: location.blockOffset) else {
            return EngineError.corruption(
                "the location of key \(EngineKey(rawValue: key)) does not hold a put", path: path,
                offset: location.frameOffset)
        }
        return EngineError.corruption(
            "the location of key \(EngineKey(rawValue: key)) holds the put of key \(EngineKey(rawValue: stored))",
            path: path, offset: location.frameOffset)
    }

    /// The secondary index entries stored with `key`'s value.
    public func indexKeys(forKey key: UInt64) throws -> [IndexKey] {
        let found = state.primary[key]
        try requireSoundLeaves()
        guard let packed = found else { return [] }
        let location = Location(packed: packed)
        let block = try reader.block(segment: location.segment, frameOffset: location.frameOffset)
        return block.withUnsafeBytes { raw in
            guard
                case (.put(_, _, let keys, let count), _)? = try? JournalOperation.decode(raw, at: location.blockOffset)
            else { return [] }
            var result: [IndexKey] = []
            JournalOperation.forEachIndexKey(raw, keys, count: count) {
                result.append(IndexKey(index: IndexID(rawValue: $0), bytes: Array($1)))
            }
            return result
        }
    }

    /// Visits the keys of a keyspace in ascending order from `start`; `body` returns false to stop.
    public func forEachKey(inKeyspace keyspace: UInt16, from start: UInt64 = 0, _ body: (UInt64) throws -> Bool)
        rethrows
    {
        try state.primary.forEach(inKeyspace: keyspace, from: start) { key, _ in try body(key) }
    }

    /// The keys of a keyspace in ascending order from `start`, at most `limit` of them.
    public func keys(inKeyspace keyspace: UInt16, from start: UInt64 = 0, limit: Int? = nil) -> [UInt64] {
        let capacity = min(limit ?? .max, state.primary.count(inKeyspace: keyspace))
        guard capacity > 0 else { return [] }
        // Walks of a few thousand keys that store into the array (the locations into scratch
        // memory), without a closure call and an append per key.
        return withUnsafeTemporaryAllocation(of: UInt64.self, capacity: min(capacity, 4096)) { scratch in
            [UInt64](unsafeUninitializedCapacity: capacity) { out, made in
                let through = EngineKey(keyspace: keyspace, id: EngineKey.maxID).rawValue
                var from = start
                while made < capacity {
                    let room = min(capacity - made, scratch.count)
                    let n = state.primary.collect(
                        inKeyspace: keyspace, from: from, through: through,
                        keys: UnsafeMutableBufferPointer(rebasing: out[made..<(made + room)]),
                        values: UnsafeMutableBufferPointer(rebasing: scratch[0..<room]))
                    made += n
                    guard n == room, out[made - 1] < through else { break }
                    from = out[made - 1] + 1
                }
            }
        }
    }

    /// The keyspaces that hold keys.
    public var keyspaces: [UInt16] { state.primary.keyspaces.sorted() }

    // MARK: Secondary indexes

    // The reads of an index throw only in one case: a store opened from a checkpoint whose
    // secondary-index section failed the check made after the open, and whose journal could
    // not give the indexes either (`.corruption`; the open would have thrown it before the
    // check moved after it). Its records, keys and sets stay readable; its commits are refused.

    /// The indexes that hold entries.
    public var indexes: [IndexID] {
        get throws { try state.secondary.ids().sorted().map(IndexID.init(rawValue:)) }
    }

    /// Number of entries of `index` between the bounds, in O(log n) (before a deferred build
    /// has finished, a search of its restart points and one interval decoded in place).
    ///
    /// ```swift
    /// let adults = try snapshot.indexCount(index: ageIndex, from: IndexBound(age18, inclusive: true))
    /// ```
    public func indexCount(index: IndexID, from lower: IndexBound? = nil, to upper: IndexBound? = nil) throws -> Int {
        try state.secondary.reader(index.rawValue)?.count(from: lower, to: upper) ?? 0
    }

    /// Visits the entries of `index` between the bounds in key order (or reverse), with the
    /// primary key of each; `body` returns false to stop.
    public func forEachIndexEntry(
        index: IndexID, from lower: IndexBound? = nil, to upper: IndexBound? = nil, reverse: Bool = false,
        _ body: (UnsafeRawBufferPointer, UInt64) throws -> Bool
    ) throws {
        try state.secondary.reader(index.rawValue)?.forEach(from: lower, to: upper, reverse: reverse, body)
    }

    /// The primary keys of `index`'s entries between the bounds, in order (or reverse), at most
    /// `limit` of them: what a fetch walks, without a closure per entry.
    public func primaryKeys(
        index: IndexID, from lower: IndexBound? = nil, to upper: IndexBound? = nil, reverse: Bool = false,
        limit: Int? = nil
    ) throws -> [UInt64] {
        try state.secondary.reader(index.rawValue)?.primaryKeys(
            from: lower, to: upper, reverse: reverse, limit: limit) ?? []
    }

    /// The values of many keys copied into one buffer, with each key's span in it (`offset` is
    /// `UInt32.max` for a key that has no value): a fetch's records in one read. `caching` as in `forEachValue(forKeys:caching:_:)`.
    public func copyValues(forKeys keys: [UInt64], caching: Bool? = nil) throws -> (
        bytes: [UInt8], spans: [(offset: UInt32, count: UInt32)]
    ) {
        var bytes: [UInt8] = []
        var spans = [(offset: UInt32, count: UInt32)](repeating: (.max, 0), count: keys.count)
        try forEachValue(forKeys: keys, caching: caching) { i, _, raw in
            if bytes.isEmpty { bytes.reserveCapacity(min(raw.count * keys.count * 5 / 4 + 64, Int(UInt32.max))) }
            guard bytes.count + raw.count < Int(UInt32.max) else {
                throw EngineError(.invalidArgument, "more than 4 GiB of values in one read")
            }
            spans[i] = (UInt32(bytes.count), UInt32(raw.count))
            bytes.append(contentsOf: raw)
        }
        return (bytes, spans)
    }

    // MARK: Sets

    /// The members of a set, ascending.
    public func members(ofSet set: UInt64) -> [UInt64] { state.sets[set]?.members ?? [] }

    /// How many members the set `set` (raw) has, without reading them.
    public func memberCount(ofSet set: UInt64) -> Int { state.sets[set]?.count ?? 0 }

    /// Whether `member` is in the set `set` (raw keys).
    public func isMember(_ member: UInt64, ofSet set: UInt64) -> Bool { state.sets[set]?.contains(member) ?? false }

    /// The keyspaces that hold non-empty sets.
    public var setKeyspaces: [UInt16] { state.sets.keyspaces.sorted() }

    /// Number of non-empty sets.
    public var setCount: Int { state.sets.count }

    /// Visits the non-empty sets of a keyspace in ascending key order.
    public func forEachSet(inKeyspace keyspace: UInt16, _ body: (UInt64, [UInt64]) throws -> Bool) rethrows {
        try state.sets.forEach(inKeyspace: keyspace) { key, set in try body(key, set.members) }
    }
}
