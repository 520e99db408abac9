#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// An owned copy of a key, for inner nodes' routing entries.
struct StoredKey {
    var prefix: UInt64
    var length: Int
    var tail: [UInt8]

    init(_ probe: IndexKeyProbe) {
        prefix = probe.prefix
        length = probe.length
        tail = probe.tail.isEmpty ? [] : Array(probe.tail)
    }

    init(prefix: UInt64, length: Int, tail: [UInt8]) {
        self.prefix = prefix
        self.length = length
        self.tail = tail
    }

    @inline(__always)
    func compare(_ probe: IndexKeyProbe) -> Int {
        if prefix != probe.prefix { return prefix < probe.prefix ? -1 : 1 }
        if length <= 8 && probe.length <= 8 { return length == probe.length ? 0 : (length < probe.length ? -1 : 1) }
        return tail.withUnsafeBytes { compareBytes($0, probe.tail) }
    }
}
