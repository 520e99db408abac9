/// An entry for a secondary index: which index, and the key bytes to order by.
///
/// Index keys compare as unsigned bytes, so the caller encodes values order-preservingly
/// (big-endian integers with the sign bit flipped, and so on; see `IndexKey.init(index:orderedInt64:)`).
/// Keys up to 16 bytes are stored inline, without allocating.
///
/// ```swift
/// let byDate = IndexKey(index: 1, orderedDouble: createdAt.timeIntervalSinceReferenceDate)
/// transaction.put(key, value: bytes, indexKeys: CollectionOfOne(byDate))
/// ```
public struct IndexKey: Sendable, Hashable {
    /// The index the entry belongs to.
    public var index: IndexID { IndexID(rawValue: indexNumber) }
    @usableFromInline let indexNumber: UInt32
    @usableFromInline enum Storage: Sendable, Hashable {
        case inline(UInt64, UInt64, UInt8)
        case heap([UInt8])
    }
    @usableFromInline let storage: Storage

    /// An entry of `index` ordered by `bytes` as given (at most `JournalFormat.maxIndexKeyLength` bytes).
    public init(index: IndexID, bytes: [UInt8]) {
        self.indexNumber = index.rawValue
        if bytes.count <= 16 {
            var a: UInt64 = 0
            var b: UInt64 = 0
            withUnsafeMutableBytes(of: &a) { p in for i in 0..<min(8, bytes.count) { p[i] = bytes[i] } }
            withUnsafeMutableBytes(of: &b) { p in for i in 8..<max(8, bytes.count) { p[i - 8] = bytes[i] } }
            storage = .inline(a, b, UInt8(bytes.count))
        } else {
            storage = .heap(bytes)
        }
    }

    /// An 8-byte key that orders like the unsigned integer.
    public init(index: IndexID, orderedUInt64 value: UInt64) {
        self.indexNumber = index.rawValue
        storage = .inline(value.bigEndian, 0, 8)
    }

    /// An 8-byte key that orders like the signed integer.
    public init(index: IndexID, orderedInt64 value: Int64) {
        self.init(index: index, orderedUInt64: UInt64(bitPattern: value) ^ (1 << 63))
    }

    /// An 8-byte key that orders like the double (NaN sorts last).
    /// -0.0 is 0.0 here (they are equal numbers: an equality lookup finds both).
    public init(index: IndexID, orderedDouble value: Double) {
        let v = value == 0 ? 0 : value
        self.init(index: index, orderedUInt64: v.sign == .minus ? ~v.bitPattern : v.bitPattern | (1 << 63))
    }

    /// A 9-byte key: a tag byte, then 8 bytes that order like the unsigned integer.
    /// (The object layer tags values 0x01 and the absent value 0x00, which sorts first.)
    public init(index: IndexID, tag: UInt8, orderedUInt64 value: UInt64) {
        self.indexNumber = index.rawValue
        let v = value.bigEndian
        // Bytes: tag, then the 8 big-endian bytes, in two little-endian-stored words.
        var a: UInt64 = 0
        var b: UInt64 = 0
        withUnsafeMutableBytes(of: &a) { p in
            p[0] = tag
            withUnsafeBytes(of: v) { q in for i in 0..<7 { p[i + 1] = q[i] } }
        }
        withUnsafeMutableBytes(of: &b) { p in withUnsafeBytes(of: v) { q in p[0] = q[7] } }
        storage = .inline(a, b, 9)
    }

    /// A 9-byte tagged key that orders like the signed integer.
    public init(index: IndexID, tag: UInt8, orderedInt64 value: Int64) {
        self.init(index: index, tag: tag, orderedUInt64: UInt64(bitPattern: value) ^ (1 << 63))
    }

    /// A 9-byte tagged key that orders like the double.
    public init(index: IndexID, tag: UInt8, orderedDouble value: Double) {
        let v = value == 0 ? 0 : value
        self.init(index: index, tag: tag, orderedUInt64: v.sign == .minus ? ~v.bitPattern : v.bitPattern | (1 << 63))
    }

    /// Calls `body` with the key bytes.
    @inlinable
    public func withBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        switch storage {
        case .inline(let a, let b, let n):
            var pair = (a, b)
            return try withUnsafeBytes(of: &pair) { try body(UnsafeRawBufferPointer(rebasing: $0[0..<Int(n)])) }
        case .heap(let bytes):
            return try bytes.withUnsafeBytes(body)
        }
    }

    /// The key bytes (a copy).
    public var bytes: [UInt8] { withBytes { Array($0) } }
    /// The number of key bytes.
    public var count: Int {
        switch storage {
        case .inline(_, _, let n): return Int(n)
        case .heap(let b): return b.count
        }
    }
}
