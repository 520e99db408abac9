/// Appends little-endian integers and LEB128 varints to a byte array.
struct ByteWriter {
    var bytes: [UInt8]

    init(capacity: Int = 0) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    var count: Int { bytes.count }

    @inline(__always)
    mutating func append(_ byte: UInt8) { bytes.append(byte) }

    @inline(__always)
    mutating func appendVarint(_ value: UInt64) {
        var v = value
        while v >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: v) | 0x80)
            v >>= 7
        }
        bytes.append(UInt8(v))
    }

    @inline(__always)
    mutating func appendVarint(_ value: Int) { appendVarint(UInt64(value)) }

    /// A key as two varints: keyspace (high 16 bits), then id (low 48 bits), so that the
    /// common small ids of any keyspace take a few bytes.
    @inline(__always)
    mutating func appendKey(_ key: UInt64) {
        appendVarint(key >> 48)
        appendVarint(key & 0xFFFF_FFFF_FFFF)
    }

    @inline(__always)
    mutating func appendLE<T: FixedWidthInteger>(_ value: T) {
        withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
    }

    mutating func append(contentsOf data: some Sequence<UInt8>) { bytes.append(contentsOf: data) }

    mutating func append(_ buffer: UnsafeRawBufferPointer) { bytes.append(contentsOf: buffer) }

    /// Overwrites a little-endian integer at `offset`.
    mutating func patchLE<T: FixedWidthInteger>(_ value: T, at offset: Int) {
        withUnsafeBytes(of: value.littleEndian) { raw in
            for i in 0..<raw.count { bytes[offset + i] = raw[i] }
        }
    }
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
struct ByteReader {
    struct OutOfBounds: Error {}

    let buffer: UnsafeRawBufferPointer
    var offset: Int

    init(_ buffer: UnsafeRawBufferPointer, offset: Int = 0) {
        self.buffer = buffer
        self.offset = offset
    }

    var isAtEnd: Bool { offset >= buffer.count }
    var remaining: Int { buffer.count - offset }

    @inline(__always)
    mutating func readByte() throws(OutOfBounds) -> UInt8 {
        guard offset < buffer.count else { throw OutOfBounds() }
        defer { offset += 1 }
        return buffer[offset]
    }

    @inline(__always)
    mutating func readVarint() throws(OutOfBounds) -> UInt64 {
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
    mutating func readKey() throws(OutOfBounds) -> UInt64 {
        let keyspace = try readVarint()
        let id = try readVarint()
        guard keyspace <= 0xFFFF, id <= 0xFFFF_FFFF_FFFF else { throw OutOfBounds() }
        return keyspace << 48 | id
    }

    /// A varint that must fit in `limit` (a length or count), so callers can allocate safely.
    @inline(__always)
    mutating func readLength(limit: Int) throws(OutOfBounds) -> Int {
        let value = try readVarint()
        guard value <= UInt64(limit) else { throw OutOfBounds() }
        return Int(value)
    }

    @inline(__always)
    mutating func readLE<T: FixedWidthInteger>(_: T.Type) throws(OutOfBounds) -> T {
        let size = MemoryLayout<T>.size
        guard size <= buffer.count - offset else { throw OutOfBounds() }
        defer { offset += size }
        return T(littleEndian: buffer.loadUnaligned(fromByteOffset: offset, as: T.self))
    }

    @inline(__always)
    mutating func readBytes(_ count: Int) throws(OutOfBounds) -> UnsafeRawBufferPointer {
        guard count >= 0, count <= buffer.count - offset else { throw OutOfBounds() }
        defer { offset += count }
        return UnsafeRawBufferPointer(rebasing: buffer[offset..<offset + count])
    }

    mutating func skip(_ count: Int) throws(OutOfBounds) {
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
