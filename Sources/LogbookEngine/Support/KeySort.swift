/// Stable sorting by 64-bit keys.
enum KeySort {
    /// `items` in ascending order of `key`, items of equal keys in the order given.
    ///
    /// A radix sort a byte at a time from the lowest, skipping the bytes every key shares (the
    /// keys of one keyspace differ in their low bytes only): a few linear passes where a
    /// comparison sort of a hundred thousand items makes two million comparisons. Items already
    /// in order come back as they are, after one pass.
    ///
    /// ```swift
    /// let order = KeySort.stable([0, 1, 2], key: { [30, 10, 20][$0] })   // [1, 2, 0]
    /// ```
    static func stable(_ items: [Int], key: (Int) -> UInt64) -> [Int] {
        let n = items.count
        guard n > 1 else { return items }
        var keys = items.map(key)
        var ordered = true
        var differing: UInt64 = 0
        for i in 1..<n {
            if keys[i] < keys[i - 1] { ordered = false }
            differing |= keys[i] ^ keys[0]
        }
        if ordered { return items }
        var values = items
        var otherKeys = [UInt64](repeating: 0, count: n)
        var otherValues = [Int](repeating: 0, count: n)
        var starts = [Int](repeating: 0, count: 256)
        for byte in 0..<8 {
            let shift = UInt64(byte * 8)
            guard (differing >> shift) & 0xFF != 0 else { continue }
            for d in 0..<256 { starts[d] = 0 }
            for k in keys { starts[Int(truncatingIfNeeded: k >> shift) & 0xFF] += 1 }
            var sum = 0
            for d in 0..<256 {
                let c = starts[d]
                starts[d] = sum
                sum += c
            }
            for i in 0..<n {
                let d = Int(truncatingIfNeeded: keys[i] >> shift) & 0xFF
                let p = starts[d]
                starts[d] = p + 1
                otherKeys[p] = keys[i]
                otherValues[p] = values[i]
            }
            swap(&keys, &otherKeys)
            swap(&values, &otherValues)
        }
        return values
    }
}
