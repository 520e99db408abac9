/// A key as the index compares it: its first 8 bytes as a big-endian integer (zero padded),
/// its length, and the bytes after the eighth. Comparing two keys compares the prefixes as
/// integers first, so keys of 8 bytes or less (integers, dates, doubles) never touch memory
/// beyond two words.
struct IndexKeyProbe {
    var prefix: UInt64
    var length: Int
    var tail: UnsafeRawBufferPointer

    @inline(__always)
    init(_ key: UnsafeRawBufferPointer) {
        length = key.count
        if key.count >= 8 {
            prefix = UInt64(bigEndian: key.loadUnaligned(as: UInt64.self))
            tail = UnsafeRawBufferPointer(rebasing: key[8...])
        } else {
            var p: UInt64 = 0
            for i in 0..<key.count { p |= UInt64(key[i]) << UInt64(56 - 8 * i) }
            prefix = p
            tail = UnsafeRawBufferPointer(start: nil, count: 0)
        }
    }
}

extension IndexKeyProbe {
    /// The key's bytes (prefix and tail put back together).
    func asBytes<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R {
        var word = prefix.bigEndian
        if length <= 8 { return withUnsafeBytes(of: &word) { body(UnsafeRawBufferPointer(rebasing: $0[0..<length])) } }
        var bytes = withUnsafeBytes(of: &word) { Array($0) }
        bytes.append(contentsOf: tail)
        return bytes.withUnsafeBytes(body)
    }
}
