import Foundation
import LogbookEngine

// Comparisons of stored strings and data, on their bytes: plain ASCII, searches, ordering,
// LIKE patterns.
extension RecordFilter {
    /// ASCII without a carriage return: where byte comparisons are `String` comparisons
    /// ("\r\n" is one character in Swift).
    @inline(__always)
    static func isPlain(_ bytes: UnsafeRawBufferPointer) -> Bool {
        // Eight bytes at a time: no high bit set, and no byte equal to 0x0D.
        let n = bytes.count
        var i = 0
        if let base = bytes.baseAddress {
            while i + 8 <= n {
                let w = base.loadUnaligned(fromByteOffset: i, as: UInt64.self)
                let cr = w ^ 0x0D0D_0D0D_0D0D_0D0D
                let hasCR = (cr &- 0x0101_0101_0101_0101) & ~cr & 0x8080_8080_8080_8080
                if (w & 0x8080_8080_8080_8080) | hasCR != 0 { return false }
                i += 8
            }
        }
        while i < n {
            let b = bytes[i]
            if b >= 0x80 || b == 0x0D { return false }
            i += 1
        }
        return true
    }

    static func isPlain(_ bytes: [UInt8]) -> Bool { bytes.withUnsafeBytes { isPlain($0) } }

    static func test(
        _ t: StringTestCode, _ op: Comparison.Operator, _ c: UnsafeRawBufferPointer, _ s: UnsafeRawBufferPointer
    ) -> Bool {
        switch t {
        case .equal: return c.count == s.count && (c.count == 0 || memcmp(c.baseAddress!, s.baseAddress!, c.count) == 0)
        case .order:
            let order = compare(s, c)
            switch op {
            case .less: return order < 0
            case .lessOrEqual: return order <= 0
            case .greater: return order > 0
            default: return order >= 0
            }
        case .beginsWith:
            return c.count <= s.count && (c.count == 0 || memcmp(c.baseAddress!, s.baseAddress!, c.count) == 0)
        case .endsWith:
            return c.count <= s.count
                && (c.count == 0 || memcmp(c.baseAddress!, s.baseAddress! + (s.count - c.count), c.count) == 0)
        case .contains: return find(c, in: s)
        case .like: return glob(c, s)
        case .oneOf:
            var o = 0
            while o + 4 <= c.count {
                let n = Int(c[o]) << 24 | Int(c[o + 1]) << 16 | Int(c[o + 2]) << 8 | Int(c[o + 3])
                o += 4
                if n == s.count && (n == 0 || memcmp(c.baseAddress! + o, s.baseAddress!, n) == 0) { return true }
                o += n
            }
            return false
        }
    }

    /// Whether `needle` (not empty) occurs in `haystack`: `memchr` for its first byte, then
    /// `memcmp` for the rest.
    @inline(__always)
    static func find(_ needle: UnsafeRawBufferPointer, in haystack: UnsafeRawBufferPointer) -> Bool {
        guard needle.count <= haystack.count, let base = haystack.baseAddress, let n = needle.baseAddress else {
            return false
        }
        let lastStart = haystack.count - needle.count
        if haystack.count <= 32 {
            // Short values (names, titles): a loop costs less than calls to memchr and memcmp.
            let first = needle[0]
            for i in 0...lastStart where haystack[i] == first {
                var k = 1
                while k < needle.count && haystack[i + k] == needle[k] { k += 1 }
                if k == needle.count { return true }
            }
            return false
        }
        let first = Int32(needle[0])
        var i = 0
        while i <= lastStart {
            guard let hit = memchr(base + i, first, lastStart - i + 1) else { return false }
            let at = base.distance(to: UnsafeRawPointer(hit))
            if memcmp(base + at, n, needle.count) == 0 { return true }
            i = at + 1
        }
        return false
    }

    /// Lexicographic byte order (UTF-8 byte order is scalar order).
    static func compare(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Int {
        let n = min(a.count, b.count)
        if n > 0 {
            let r = memcmp(a.baseAddress!, b.baseAddress!, n)
            if r != 0 { return r < 0 ? -1 : 1 }
        }
        return a.count == b.count ? 0 : (a.count < b.count ? -1 : 1)
    }

    /// `LIKE` on plain bytes: `*` matches any run, `?` one byte (one character in ASCII).
    static func glob(_ p: UnsafeRawBufferPointer, _ s: UnsafeRawBufferPointer) -> Bool {
        var pi = 0
        var si = 0
        var starP = -1
        var starS = 0
        while si < s.count {
            if pi < p.count && (p[pi] == UInt8(ascii: "?") || (p[pi] != UInt8(ascii: "*") && p[pi] == s[si])) {
                pi += 1
                si += 1
            } else if pi < p.count && p[pi] == UInt8(ascii: "*") {
                starP = pi
                starS = si
                pi += 1
            } else if starP >= 0 {
                pi = starP + 1
                starS += 1
                si = starS
            } else {
                return false
            }
        }
        while pi < p.count && p[pi] == UInt8(ascii: "*") { pi += 1 }
        return pi == p.count
    }
}
