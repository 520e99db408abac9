/// The operations of a transaction, in order: each one's key and where it is. A transaction
/// records it while encoding, so a commit applies its operations without decoding its blocks
/// again; recovery builds the same thing by decoding.
///
/// `refs` packs: block index (24 bits) · offset in the block (16) · offset of the first index
/// entry from the operation's start (16; `unknownDelta` when it does not fit) · code (4) ·
/// index entry count (4; 15 means "15 or more": decode).
struct OperationTable: Sendable {
    struct Entry {
        var key: UInt64
        var ref: UInt64
    }
    /// One array of pairs: one append per operation.
    var entries: [Entry] = []

    static let unknownDelta = 0xFFFF
    static let manyIndexKeys = 15

    var count: Int { entries.count }

    @inline(__always) func key(_ i: Int) -> UInt64 { entries[i].key }
    @inline(__always) func ref(_ i: Int) -> UInt64 { entries[i].ref }

    @inline(__always)
    mutating func append(
        key: UInt64, block: Int, offset: Int, code: JournalFormat.OperationCode, indexDelta: Int, indexCount: Int
    ) {
        let delta = UInt64(indexDelta < Self.unknownDelta ? indexDelta : Self.unknownDelta)
        entries.append(
            Entry(
                key: key,
                ref: UInt64(block) << 40 | UInt64(offset) << 24 | delta << 8 | UInt64(code.rawValue) << 4
                    | UInt64(min(indexCount, Self.manyIndexKeys))))
    }

    /// Appends `other`'s entries, their block indexes moved by `blockOffset`.
    mutating func append(_ other: OperationTable, blockOffset: Int) {
        entries.reserveCapacity(entries.count + other.count)
        for e in other.entries { entries.append(Entry(key: e.key, ref: e.ref + UInt64(blockOffset) << 40)) }
    }

    @inline(__always) static func block(_ ref: UInt64) -> Int { Int(ref >> 40) }
    @inline(__always) static func offset(_ ref: UInt64) -> Int { Int((ref >> 24) & 0xFFFF) }
    @inline(__always) static func indexDelta(_ ref: UInt64) -> Int { Int((ref >> 8) & 0xFFFF) }
    @inline(__always) static func code(_ ref: UInt64) -> UInt8 { UInt8((ref >> 4) & 0xF) }
    @inline(__always) static func indexCount(_ ref: UInt64) -> Int { Int(ref & 0xF) }

    /// The manifest of blocks, by decoding them (recovery, tools). Throws at the first
    /// malformed operation, naming its block and offset.
    static func decode(_ blocks: [(frameOffset: Int, block: [UInt8])]) throws -> OperationTable {
        var m = OperationTable()
        for (b, entry) in blocks.enumerated() {
            try entry.block.withUnsafeBytes { raw in
                var offset = 0
                while offset < raw.count {
                    guard offset < (1 << JournalFormat.locationBlockOffsetBits) else {
                        throw DecodeFailure(
                            block: b, offset: offset,
                            reason: "an operation starts beyond the addressable part of its block")
                    }
                    let h: JournalOperation.Header
                    do throws(JournalOperation.Malformed) { h = try JournalOperation.header(raw, at: offset) } catch {
                        throw DecodeFailure(block: b, offset: offset, reason: "malformed operation")
                    }
                    m.append(
                        key: h.key, block: b, offset: offset, code: h.code,
                        indexDelta: h.code == .put ? h.indexKeys.lowerBound - offset : 0, indexCount: h.indexKeyCount)
                    offset = h.end
                }
            }
        }
        return m
    }

    struct DecodeFailure: Error {
        var block: Int
        var offset: Int
        var reason: String
    }
}
