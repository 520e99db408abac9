/// Appends little-endian integers and LEB128 varints to a byte buffer.
///
/// The buffer grows ahead of use (zero filled) and is written through a raw pointer, so an
/// append costs a bounds check and a store rather than an Array append: building a block of
/// operations is the engine's hottest loop.
package struct ByteWriter {
    private var storage: [UInt8]
    package private(set) var count = 0

    package init(capacity: Int = 0) {
        storage = capacity > 0 ? [UInt8](repeating: 0, count: capacity) : []
    }

    /// The bytes written so far.
    package var bytes: [UInt8] {
        get { storage.count == count ? storage : Array(storage[0..<count]) }
        set {
            storage = newValue
            count = newValue.count
        }
    }

    package var capacity: Int { storage.count }

    /// Calls `body` with the bytes written so far (no copy).
    package func withBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try storage.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
    }

    /// Drops the first `n` bytes written, moving the rest to the front; the capacity stays.
    package mutating func removeFirst(_ n: Int) {
        precondition(n >= 0 && n <= count, "removeFirst past the bytes written")
        let rest = count - n
        if rest > 0 {
            storage.withUnsafeMutableBytes { p in
                p.baseAddress!.copyMemory(from: p.baseAddress! + n, byteCount: rest)
            }
        }
        count = rest
    }

    /// The bytes written, taken without a copy (the storage is cut to them); the writer is
    /// left empty.
    package mutating func take() -> [UInt8] {
        storage.removeLast(storage.count - count)
        count = 0
        defer { storage = [] }
        return storage
    }

    @inline(__always)
    private mutating func reserve(_ n: Int) {
        if count + n > storage.count { grow(n) }
    }

    @inline(never)
    private mutating func grow(_ n: Int) {
        let target = Swift.max(count + n, Swift.max(64, storage.count * 2))
        storage.append(contentsOf: repeatElement(0, count: target - storage.count))
    }

    /// Writes `n` bytes through `body` (which gets a pointer to the first one).
    @inline(__always)
    package mutating func write(_ n: Int, _ body: (UnsafeMutableRawPointer) -> Void) {
        reserve(n)
        let at = count
        storage.withUnsafeMutableBytes { body($0.baseAddress! + at) }
        count += n
    }

    @inline(__always)
    package mutating func append(_ byte: UInt8) {
        write(1) { $0.storeBytes(of: byte, as: UInt8.self) }
    }

    @inline(__always)
    package mutating func appendVarint(_ value: UInt64) {
        write(varintSize(value)) { p in _ = storeVarint(value, at: p) }
    }

    @inline(__always)
    package mutating func appendVarint(_ value: Int) { appendVarint(UInt64(value)) }

    /// A key as two varints: keyspace (high 16 bits), then id (low 48 bits), so that the
    /// common small ids of any keyspace take a few bytes.
    @inline(__always)
    package mutating func appendKey(_ key: UInt64) {
        appendVarint(UInt64(EngineKey(rawValue: key).keyspace))
        appendVarint(EngineKey(rawValue: key).id)
    }

    @inline(__always)
    package mutating func appendLE<T: FixedWidthInteger>(_ value: T) {
        write(MemoryLayout<T>.size) { $0.storeBytes(of: value.littleEndian, as: T.self) }
    }

    package mutating func append(contentsOf data: some Sequence<UInt8>) {
        for byte in data { append(byte) }
    }

    @inline(__always)
    package mutating func append(_ buffer: UnsafeRawBufferPointer) {
        guard buffer.count > 0 else { return }
        write(buffer.count) { $0.copyMemory(from: buffer.baseAddress!, byteCount: buffer.count) }
    }

    package mutating func append(contentsOf data: [UInt8]) {
        data.withUnsafeBytes { append($0) }
    }

    /// Overwrites a little-endian integer at `offset`.
    package mutating func patchLE<T: FixedWidthInteger>(_ value: T, at offset: Int) {
        precondition(offset + MemoryLayout<T>.size <= count)
        storage.withUnsafeMutableBytes { $0.storeBytes(of: value.littleEndian, toByteOffset: offset, as: T.self) }
    }

    package mutating func removeAll() { count = 0 }
}

/// Stores a varint at `p`; returns its size.
@inline(__always)
func storeVarint(_ value: UInt64, at p: UnsafeMutableRawPointer) -> Int {
    var v = value
    var i = 0
    while v >= 0x80 {
        p.storeBytes(of: UInt8(truncatingIfNeeded: v) | 0x80, toByteOffset: i, as: UInt8.self)
        v >>= 7
        i += 1
    }
    p.storeBytes(of: UInt8(v), toByteOffset: i, as: UInt8.self)
    return i + 1
}

/// Number of bytes `value` takes as a varint.
@inline(__always)
func varintSize(_ value: UInt64) -> Int {
    let bits = 64 - value.leadingZeroBitCount
    return bits == 0 ? 1 : (bits + 6) / 7
}

/// Reads little-endian integers and varints from a byte buffer, checking every bound.
///
/// Any read past the end throws `ByteReader.OutOfBounds`; nothing is ever read outside `buffer`.
package struct ByteReader {
    package struct OutOfBounds: Error {}

    package let buffer: UnsafeRawBufferPointer
    package var offset: Int

    package init(_ buffer: UnsafeRawBufferPointer, offset: Int = 0) {
        self.buffer = buffer
        self.offset = offset
    }

    package var isAtEnd: Bool { offset >= buffer.count }
    package var remaining: Int { buffer.count - offset }

    @inline(__always)
    package mutating func readByte() throws(OutOfBounds) -> UInt8 {
        guard offset < buffer.count else { throw OutOfBounds() }
        defer { offset += 1 }
        return buffer[offset]
    }

    @inline(__always)
    package mutating func readVarint() throws(OutOfBounds) -> UInt64 {
        var result: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            guard offset < buffer.count else { throw OutOfBounds() }
            let byte = buffer[offset]
            offset += 1
            if shift == 63 && byte > 1 { throw OutOfBounds() }
            result |= UInt64(byte & 0x7F) << shift
            if byte < 0x80 { return result }
            shift += 7
            if shift > 63 { throw OutOfBounds() }
        }
    }

    @inline(__always)
    package mutating func readKey() throws(OutOfBounds) -> UInt64 {
        let keyspace = try readVarint()
        let id = try readVarint()
        guard keyspace <= UInt64(UInt16.max), id <= EngineKey.maxID else { throw OutOfBounds() }
        return EngineKey(keyspace: UInt16(keyspace), id: id).rawValue
    }

    /// A varint that must fit in `limit` (a length or count), so callers can allocate safely.
    @inline(__always)
    package mutating func readLength(limit: Int) throws(OutOfBounds) -> Int {
        let value = try readVarint()
        guard value <= UInt64(limit) else { throw OutOfBounds() }
        return Int(value)
    }

    @inline(__always)
    package mutating func readLE<T: FixedWidthInteger>(_: T.Type) throws(OutOfBounds) -> T {
        let size = MemoryLayout<T>.size
        guard size <= buffer.count - offset else { throw OutOfBounds() }
        defer { offset += size }
        return T(littleEndian: buffer.loadUnaligned(fromByteOffset: offset, as: T.self))
    }

    /// A little-endian u64 that must fit in `Int` (a byte count or file offset read from a
    /// file: a value past that is damage, not a number to trap on).
    @inline(__always)
    package mutating func readLength(_: UInt64.Type) throws(OutOfBounds) -> Int {
        let value = try readLE(UInt64.self)
        guard value <= UInt64(Int.max) else { throw OutOfBounds() }
        return Int(value)
    }

    @inline(__always)
    package mutating func readBytes(_ count: Int) throws(OutOfBounds) -> UnsafeRawBufferPointer {
        guard count >= 0, count <= buffer.count - offset else { throw OutOfBounds() }
        defer { offset += count }
        return UnsafeRawBufferPointer(rebasing: buffer[offset..<offset + count])
    }

    @inline(__always)
    package mutating func skip(_ count: Int) throws(OutOfBounds) {
        guard count >= 0, count <= buffer.count - offset else { throw OutOfBounds() }
        offset += count
    }
}

extension UnsafeRawBufferPointer {
    @inline(__always)
    func loadLE<T: FixedWidthInteger>(at offset: Int, as: T.Type) -> T {
        T(littleEndian: loadUnaligned(fromByteOffset: offset, as: T.self))
    }
}

/// Lexicographic comparison of two byte strings (memcmp, then length).
@inline(__always)
func compareBytes(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Int {
    let n = Swift.min(a.count, b.count)
    if n > 0 {
        let r = memcmp(a.baseAddress!, b.baseAddress!, n)
        if r != 0 { return r < 0 ? -1 : 1 }
    }
    return a.count == b.count ? 0 : (a.count < b.count ? -1 : 1)
}

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A signed difference as an unsigned varint value: small magnitudes, either sign, stay small.
@inline(__always)
package func zigzag(_ v: Int64) -> UInt64 { UInt64(bitPattern: (v << 1) ^ (v >> 63)) }

/// The signed value `zigzag` encoded.
@inline(__always)
package func unzigzag(_ v: UInt64) -> Int64 { Int64(bitPattern: v >> 1) ^ -Int64(bitPattern: v & 1) }
