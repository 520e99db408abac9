import Dispatch

/// A set of writes that become visible together, or not at all.
///
/// Operations are encoded as they are added, into blocks that become the journal's frames,
/// so building a transaction of a million puts makes no per-operation allocation.
///
/// ```swift
/// var transaction = Transaction()
/// transaction.put(EngineKey(keyspace: 1, id: 42), value: Array("hello".utf8))
/// transaction.addMembers([EngineKey(keyspace: 1, id: 7)], toSet: EngineKey(keyspace: 2, id: 42))
/// let version = try store.commit(transaction)
/// ```
///
/// The format's limits (`JournalFormat.maxValueLength`, `maxIndexKeyLength`,
/// `maxIndexKeysPerPut`, `maxOperationSize`) are checked as operations are added: an operation
/// that breaks one is not added, and `Store.commit` then throws `transactionTooLarge` naming
/// the limit, writing nothing.
public struct Transaction: Sendable {
    var blocks: [[UInt8]] = []
    var current = ByteWriter()
    /// The number of operations added so far.
    public private(set) var operationCount = 0
    /// The members of the set operation being written (inlined into callers so that the copy
    /// of their sequence is specialized for its type: a `Set` read through the generic
    /// `Sequence` witness cost a tenth of a relationship-heavy save).
    @usableFromInline var scratch: [UInt64] = []
    /// Compresses finished blocks on another core while the caller goes on adding operations.
    var compressor: BlockCompressor?
    /// Each operation's key and place, recorded as it is encoded.
    var manifest = OperationTable()
    /// Whether `manifest` lists every operation. A transaction of more than `tableBlocks`
    /// blocks stops keeping it (16 bytes an operation) and the commit reads the operations from
    /// the blocks instead, as a replay does.
    private(set) var keepsTable = true
    static let tableBlocks = 64
    /// The first operation that broke a limit of the format (it was not added). `Store.commit`
    /// throws it, and writes nothing of the transaction.
    private(set) var limitViolation: EngineError?
    /// The stored (compressed) forms of finished blocks whose raw bytes were let go: a large
    /// transaction holds its blocks compressed until the commit, which writes them as they are
    /// and inflates them a few at a time to update the indexes.
    private(set) var storedBlocks: [Int: (JournalFormat.Codec, [UInt8]?)] = [:]
    /// Raw bytes of the blocks let go.
    private var releasedBytes = 0
    /// The puts whose index entries were copied from the version they replace
    /// (`putRetainingEntries`), in operation order.
    private(set) var retained = RetainedPuts()

    /// An empty transaction.
    public init() {}

    /// Whether the transaction has no operation (committing it writes nothing).
    public var isEmpty: Bool { operationCount == 0 }

    /// Bytes encoded so far (before compression).
    public var encodedSize: Int { blocks.reduce(current.count + releasedBytes) { $0 + $1.count } }

    /// Writes `value` under `key`, replacing any earlier value, with the given secondary index
    /// entries (the previous version's entries are removed from their indexes).
    public mutating func put(_ key: UInt64, value: UnsafeRawBufferPointer, indexKeys: [IndexKey] = []) {
        indexKeys.withUnsafeBufferPointer { put(key, value: value, keys: $0) }
    }

    /// Writes `value` under `key` with one secondary index entry (no allocation).
    public mutating func put(_ key: UInt64, value: UnsafeRawBufferPointer, indexKey: IndexKey) {
        withUnsafePointer(to: indexKey) { put(key, value: value, keys: UnsafeBufferPointer(start: $0, count: 1)) }
    }

    /// Writes `value` under `key` (raw), with the given secondary index entries.
    public mutating func put(_ key: UInt64, value: [UInt8], indexKeys: [IndexKey] = []) {
        value.withUnsafeBytes { put(key, value: $0, indexKeys: indexKeys) }
    }

    /// Writes `value` under `key` (raw) with one secondary index entry.
    public mutating func put(_ key: UInt64, value: [UInt8], indexKey: IndexKey) {
        value.withUnsafeBytes { put(key, value: $0, indexKey: indexKey) }
    }

    /// Writes a value of `valueCount` bytes that `writeValue` puts straight into the
    /// transaction's block (no intermediate buffer), with up to one index entry.
    public mutating func put(
        _ key: UInt64, valueCount: Int, indexKey: IndexKey?,
        writeValue: (UnsafeMutableRawBufferPointer) -> Void
    ) {
        if let indexKey {
            withUnsafePointer(to: indexKey) {
                putOperation(
                    key, valueCount: valueCount, keys: UnsafeBufferPointer(start: $0, count: 1), writeValue: writeValue)
            }
        } else {
            putOperation(
                key, valueCount: valueCount, keys: UnsafeBufferPointer(start: nil, count: 0), writeValue: writeValue)
        }
    }

    private mutating func put(_ key: UInt64, value: UnsafeRawBufferPointer, keys: UnsafeBufferPointer<IndexKey>) {
        putOperation(key, valueCount: value.count, keys: keys) { out in
            if value.count > 0 { out.baseAddress!.copyMemory(from: value.baseAddress!, byteCount: value.count) }
        }
    }

    /// The encoder of puts with index keys given as values.
    private mutating func putOperation(
        _ key: UInt64, valueCount: Int, keys: UnsafeBufferPointer<IndexKey>,
        writeValue: (UnsafeMutableRawBufferPointer) -> Void
    ) {
        var entriesSize = 0
        var longestIndexKey = 0
        for ik in keys {
            longestIndexKey = max(longestIndexKey, ik.count)
            entriesSize += varintSize(UInt64(ik.indexNumber)) + varintSize(UInt64(ik.count)) + ik.count
        }
        putOperation(
            key, valueCount: valueCount, indexCount: keys.count, entriesSize: entriesSize,
            longestIndexKey: longestIndexKey, writeValue: writeValue
        ) { p in
            var o = 0
            for ik in keys {
                o += storeVarint(UInt64(ik.indexNumber), at: p + o)
                o += storeVarint(UInt64(ik.count), at: p + o)
                let at = o
                ik.withBytes { b in if b.count > 0 { (p + at).copyMemory(from: b.baseAddress!, byteCount: b.count) } }
                o += ik.count
            }
        }
    }

    /// The one encoder of puts: the operation's size first, then one write into the block.
    /// `writeEntries` writes the `entriesSize` bytes of the index entries (after their count).
    /// Returns whether the put was added (false: it broke a limit, recorded in `limitViolation`).
    @discardableResult
    private mutating func putOperation(
        _ key: UInt64, valueCount: Int, indexCount: Int, entriesSize: Int, longestIndexKey: Int,
        writeValue: (UnsafeMutableRawBufferPointer) -> Void, writeEntries: (UnsafeMutableRawPointer) -> Void
    ) -> Bool {
        // Size first, checked against the limits the reader enforces (one set of constants).
        let size =
            1 + varintSize(UInt64(EngineKey(rawValue: key).keyspace)) + varintSize(EngineKey(rawValue: key).id)
            + varintSize(UInt64(valueCount)) + valueCount + varintSize(UInt64(indexCount)) + entriesSize
        if let violation = Self.limitViolation(
            key: key, valueCount: valueCount, indexKeyCount: indexCount, longestIndexKey: longestIndexKey,
            operationSize: size)
        {
            if limitViolation == nil { limitViolation = violation }
            return false
        }
        // The first block starts small (most transactions are small) and grows; later ones start full size.
        if current.capacity == 0 { current = ByteWriter(capacity: 2048) }
        let opOffset = current.count
        var indexDelta = 0
        current.write(size) { p in
            p.storeBytes(of: JournalFormat.OperationCode.put.rawValue, as: UInt8.self)
            var o = 1
            o += storeVarint(UInt64(EngineKey(rawValue: key).keyspace), at: p + o)
            o += storeVarint(EngineKey(rawValue: key).id, at: p + o)
            o += storeVarint(UInt64(valueCount), at: p + o)
            writeValue(UnsafeMutableRawBufferPointer(start: p + o, count: valueCount))
            o += valueCount
            o += storeVarint(UInt64(indexCount), at: p + o)
            indexDelta = o
            writeEntries(p + o)
        }
        if keepsTable {
            manifest.append(
                key: key, block: blocks.count, offset: opOffset, code: .put, indexDelta: indexDelta,
                indexCount: indexCount)
        }
        finishOperation()
        return true
    }

    /// Appends the operations of `other` after this transaction's, as if they had been added
    /// here in their order (how the workers of `Snapshot.rewriteValues` join their parts).
    /// The last block so far ends where it is; `other`'s compressed blocks come along.
    mutating func append(_ other: Transaction) {
        precondition(!isSpent && !other.isSpent, "a spent transaction cannot be joined")
        guard !other.isEmpty else { return }
        if isEmpty && limitViolation == nil && blocks.isEmpty && current.count == 0 && storedBlocks.isEmpty
            && releasedBytes == 0
        {
            // Nothing to put `other` after: it becomes this transaction, its arrays shared
            // rather than copied (a rewrite's first part held 8 MB of retained puts for
            // half a million keys). A shared compressor is left to `other` at the next put.
            self = other
            return
        }
        if limitViolation == nil { limitViolation = other.limitViolation }
        if current.count > 0 {
            blocks.append(current.take())
            current = ByteWriter()
        }
        let offset = blocks.count
        let ordinalOffset = operationCount
        var otherStored = other.storedBlocks
        for (i, payload) in other.compressor?.finish() ?? [:] { otherStored[i] = payload }
        for (i, payload) in otherStored { storedBlocks[offset + i] = payload }
        blocks.append(contentsOf: other.blocks)
        current = other.current
        releasedBytes += other.releasedBytes
        // Kept while the whole still fits one part of the commit's apply.
        if keepsTable && other.keepsTable && blocks.count < Self.tableBlocks {
            manifest.append(other.manifest, blockOffset: offset)
        } else {
            keepsTable = false
            manifest = OperationTable()
        }
        retained.append(other.retained, ordinalOffset: ordinalOffset)
        operationCount += other.operationCount
    }

    /// Room for `count` more puts of `putRetainingEntries`.
    mutating func reserveRetained(_ count: Int) { retained.reserve(additional: count) }

    /// A put of `value` under `key` whose index entries are those of the stored put `stored`
    /// (a whole operation, `header` decoded from it, at `previous`), copied byte for byte:
    /// `Snapshot.rewriteValues` writes these. The commit leaves the indexes as they are for it
    /// when `previous` is still the key's latest version (see `RetainedPuts`).
    mutating func putRetainingEntries(
        _ key: UInt64, value: UnsafeRawBufferPointer, stored: UnsafeRawBufferPointer,
        header: JournalOperation.Header, previous: Location
    ) {
        let ordinal = operationCount
        let entries = UnsafeRawBufferPointer(rebasing: stored[header.indexKeys])
        let added = putOperation(
            key, valueCount: value.count, indexCount: header.indexKeyCount, entriesSize: entries.count,
            longestIndexKey: 0,
            writeValue: { out in
                if value.count > 0 { out.baseAddress!.copyMemory(from: value.baseAddress!, byteCount: value.count) }
            },
            writeEntries: { p in
                if entries.count > 0 { p.copyMemory(from: entries.baseAddress!, byteCount: entries.count) }
            })
        if added {
            retained.append(
                ordinal: ordinal, previous: previous.packed, previousSize: header.end - previous.blockOffset)
        }
    }

    /// The limit a put breaks, as the error `Store.commit` throws; nil when it breaks none.
    private static func limitViolation(
        key: UInt64, valueCount: Int, indexKeyCount: Int, longestIndexKey: Int, operationSize: Int
    ) -> EngineError? {
        func tooLarge(_ what: String) -> EngineError {
            EngineError(.transactionTooLarge, "the put of key \(EngineKey(rawValue: key)) \(what); nothing was written")
        }
        if valueCount > JournalFormat.maxValueLength {
            return tooLarge(
                "has a value of \(valueCount) bytes; the limit is \(JournalFormat.maxValueLength) (JournalFormat.maxValueLength)"
            )
        }
        if indexKeyCount > JournalFormat.maxIndexKeysPerPut {
            return tooLarge(
                "has \(indexKeyCount) index keys; the limit is \(JournalFormat.maxIndexKeysPerPut) (JournalFormat.maxIndexKeysPerPut)"
            )
        }
        if longestIndexKey > JournalFormat.maxIndexKeyLength {
            return tooLarge(
                "has an index key of \(longestIndexKey) bytes; the limit is \(JournalFormat.maxIndexKeyLength) (JournalFormat.maxIndexKeyLength)"
            )
        }
        if operationSize > JournalFormat.maxOperationSize {
            return tooLarge(
                "encodes to \(operationSize) bytes; one operation is limited to \(JournalFormat.maxOperationSize) (JournalFormat.maxOperationSize)"
            )
        }
        return nil
    }

    /// Removes `key` and its index entries. Removing a missing key does nothing.
    public mutating func delete(_ key: UInt64) {
        if keepsTable {
            manifest.append(
                key: key, block: blocks.count, offset: current.count, code: .delete, indexDelta: 0, indexCount: 0)
        }
        current.append(JournalFormat.OperationCode.delete.rawValue)
        current.appendKey(key)
        finishOperation()
    }

    /// Adds members to the membership set `set` (for example a to-many relationship).
    @inlinable
    public mutating func addMembers(_ members: some Sequence<UInt64>, toSet set: UInt64) {
        scratch.removeAll(keepingCapacity: true)
        scratch.append(contentsOf: members)
        writeSetOperation(.setAdd, set)
    }

    /// Removes members from the membership set `set`.
    @inlinable
    public mutating func removeMembers(_ members: some Sequence<UInt64>, fromSet set: UInt64) {
        scratch.removeAll(keepingCapacity: true)
        scratch.append(contentsOf: members)
        writeSetOperation(.setRemove, set)
    }

    /// Makes `members` the whole of the set `set` (an empty sequence removes the set).
    @inlinable
    public mutating func replaceMembers(_ members: some Sequence<UInt64>, ofSet set: UInt64) {
        scratch.removeAll(keepingCapacity: true)
        scratch.append(contentsOf: members)
        writeSetOperation(.setReplace, set)
    }

    /// Writes the set operation `code` of `set` with the members in `scratch`.
    @usableFromInline
    mutating func writeSetOperation(_ code: JournalFormat.OperationCode, _ set: UInt64) {
        // Members mostly come ascending and distinct already (a context keeps them so): then
        // neither the sort nor the pass that drops repeats is needed.
        var ascending = true
        for i in scratch.indices.dropFirst() where scratch[i] <= scratch[i - 1] {
            ascending = false
            break
        }
        if !ascending {
            scratch.sort()
            var w = 0
            for i in scratch.indices where i == 0 || scratch[i] != scratch[i - 1] {
                scratch[w] = scratch[i]
                w += 1
            }
            scratch.removeSubrange(w...)
        }
        if scratch.isEmpty && code != .setReplace { return }
        // Very large sets are split so that an operation stays well inside a frame.
        let chunk = 1 << 20
        var start = 0
        repeat {
            let end = min(scratch.count, start + chunk)
            let opCode: JournalFormat.OperationCode = start == 0 ? code : (code == .setReplace ? .setAdd : code)
            if keepsTable {
                manifest.append(
                    key: set, block: blocks.count, offset: current.count, code: opCode, indexDelta: 0, indexCount: 0)
            }
            current.append(opCode.rawValue)
            current.appendKey(set)
            current.appendVarint(end - start)
            for i in start..<end {
                if i == start {
                    current.appendKey(scratch[i])
                } else {
                    current.appendVarint(scratch[i] - scratch[i - 1])
                }
            }
            finishOperation()
            start = end
        } while start < scratch.count
    }

    @inline(__always)
    private mutating func finishOperation() {
        operationCount += 1
        if current.count >= JournalFormat.blockTargetSize {
            let block = current.take()
            blocks.append(block)
            current = ByteWriter(capacity: JournalFormat.blockTargetSize + 4096)
            // Large transactions: compress in the background from the fourth block on.
            if blocks.count >= 4 {
                if compressor == nil || !isKnownUniquelyReferenced(&compressor!) { compressor = BlockCompressor() }
                compressor!.submit(index: blocks.count - 1, block)
                if blocks.count % 16 == 0 { releaseCompressedBlocks() }
                if blocks.count == Self.tableBlocks {
                    keepsTable = false
                    manifest = OperationTable()
                }
            }
        }
    }

    /// Keeps only the compressed form of the blocks the compressor has finished (those that
    /// LZ4 did not shrink stay raw), after waiting for all but the last 16 submitted: at most
    /// about 32 raw blocks (2 MB) are held however large the transaction grows.
    private mutating func releaseCompressedBlocks() {
        for (i, stored) in compressor!.takeFinished(backlog: 16) {
            // Kept as the compressor made it: `Frame.encodePayload` already copied the payload
            // to its exact size (a second copy here measured no lower peak).
            storedBlocks[i] = stored
            if stored.1 != nil {
                releasedBytes += blocks[i].count
                blocks[i] = []
            }
        }
    }

    /// Moves the stored forms out (the commit frees each once it is written and applied; a
    /// copy left here would keep them all until the commit returns).
    mutating func takeStoredBlocks() -> [Int: (JournalFormat.Codec, [UInt8]?)] {
        let taken = storedBlocks
        storedBlocks = [:]
        if !taken.isEmpty { isSpent = true }
        return taken
    }

    /// Whether a commit took this transaction's stored blocks (`Store.commit(taking:)`): its
    /// blocks let go are gone with them, and it cannot be committed again.
    private(set) var isSpent = false

    /// The blocks as the commit takes them: raw, except those let go (empty; their stored form
    /// is in `storedBlocks`), the last one included.
    func commitBlocks() -> [[UInt8]] {
        current.count > 0 ? blocks + [current.bytes] : blocks
    }

    /// The finished blocks, raw, the last one included.
    func finishedBlocks() -> [[UInt8]] {
        commitBlocks().enumerated().map { i, block in
            guard block.isEmpty, let stored = storedBlocks[i] else { return block }
            return Self.inflate(stored, raw: block)
        }
    }

    /// A block's raw bytes from its stored form (`raw` when it was stored as is).
    static func inflate(_ stored: (JournalFormat.Codec, [UInt8]?), raw: [UInt8]) -> [UInt8] {
        guard let payload = stored.1, stored.0 == .lz4 else { return raw }
        // The payload was made here from a block within the limit: it always inflates.
        return payload.withUnsafeBytes { LZ4.decompress($0, limit: JournalFormat.maxUncompressedPayload) }!
    }
}

/// Compressed forms of a transaction's blocks, made on a background queue.
///
/// The work in flight holds `Results`, never the compressor itself, so that a transaction can
/// tell from the compressor's reference count whether a copy of it shares the compressor.
final class BlockCompressor: Sendable {
    /// `values` and `inFlight` are guarded by `lock`.
    final class Results: @unchecked Sendable {
        let lock = ConditionLock()
        var values: [Int: (JournalFormat.Codec, [UInt8]?)] = [:]
        var inFlight = 0
    }

    private let results = Results()
    private let group = DispatchGroup()

    func submit(index: Int, _ block: [UInt8]) {
        let results = self.results
        results.lock.withLock { results.inFlight += 1 }
        DispatchQueue.global().async(group: group) {
            let encoded = block.withUnsafeBytes { Frame.encodePayload($0) }
            results.lock.withLock {
                results.values[index] = encoded
                results.inFlight -= 1
                results.lock.broadcast()
            }
        }
    }

    /// What was compressed so far, by block index; those returned are not returned again.
    /// Waits first until at most `backlog` blocks are still being compressed, so that a
    /// transaction built faster than it compresses holds a bounded number of raw blocks.
    func takeFinished(backlog: Int) -> [Int: (JournalFormat.Codec, [UInt8]?)] {
        results.lock.withLock {
            while results.inFlight > backlog { results.lock.wait() }
            defer { results.values = [:] }
            return results.values
        }
    }

    /// Waits for the work in flight; returns what was compressed, by block index.
    func finish() -> [Int: (JournalFormat.Codec, [UInt8]?)] {
        group.wait()
        return results.lock.withLock { results.values }
    }
}

/// The puts of a transaction whose index entries are those of the version each replaces,
/// copied byte for byte (`Snapshot.rewriteValues`), in operation order: each one's operation
/// number, the location of the version it replaces and that version's size.
///
/// Applying such a put changes no index when the version it replaces is still the key's
/// latest: its entries are in the indexes already. The commit then only moves the key's
/// location and takes the replaced version's bytes off the live count — no read of the
/// replaced version, no removal and insertion of equal entries. A put whose key another commit
/// wrote in between is applied as any other (its replaced version read, its entries inserted).
/// On replay every put is applied the general way: the journal does not record this.
struct RetainedPuts: Sendable {
    /// 16 bytes a put.
    struct Entry {
        var ordinal: UInt32
        var previousSize: UInt32
        var previous: UInt64
    }
    private(set) var entries: [Entry] = []

    var isEmpty: Bool { entries.isEmpty }

    /// Room for `additional` more entries (a rewrite of a million keys grew the array twenty
    /// times, copying it each time).
    mutating func reserve(additional: Int) { entries.reserveCapacity(entries.count + additional) }

    /// Appends `other`'s entries, their operation numbers moved by `ordinalOffset`.
    mutating func append(_ other: RetainedPuts, ordinalOffset: Int) {
        guard let last = other.entries.last else { return }
        precondition(Int(last.ordinal) + ordinalOffset <= Int(UInt32.max), "a transaction's own limits")
        // Entries are in ordinal order: the last one's bound holds for all. One pass that
        // writes in place (half a million entries joined a rewrite's two parts).
        let offset = UInt32(ordinalOffset)
        entries.append(contentsOf: other.entries)
        entries.withUnsafeMutableBufferPointer { all in
            for i in (all.count - other.count)..<all.count { all[i].ordinal &+= offset }
        }
    }

    mutating func append(ordinal: Int, previous: UInt64, previousSize: Int) {
        precondition(ordinal <= Int(UInt32.max) && previousSize <= Int(UInt32.max), "a transaction's own limits")
        entries.append(Entry(ordinal: UInt32(ordinal), previousSize: UInt32(previousSize), previous: previous))
    }

    /// The first entry whose operation number is `ordinal` or more (entries are in order).
    func firstIndex(atOrAfter ordinal: Int) -> Int {
        var low = 0
        var high = entries.count
        while low < high {
            let mid = (low + high) / 2
            if Int(entries[mid].ordinal) < ordinal { low = mid + 1 } else { high = mid }
        }
        return low
    }

    subscript(i: Int) -> Entry { entries[i] }
    var count: Int { entries.count }
}
