#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

extension OrderedIndex {
    // MARK: Queries

    /// The number of entries whose key is below `key` (or at most `key` when `inclusive`).
    func rank(_ key: UnsafeRawBufferPointer, inclusive: Bool) -> Int {
        guard var node = root else { return 0 }
        let probe = IndexKeyProbe(key)
        var total = 0
        while !node.isLeaf {
            let c = node.lastChild(below: probe, nil, orEqual: inclusive)
            guard c >= 0 else { return total }
            for j in 0..<c { total += node.counts[j] }
            node = node.children[c]
        }
        return total + node.leafLowerBound(probe, nil, after: inclusive)
    }

    /// The number of entries with `lower ≤ key` (or `<`) and `key ≤ upper` (or `<`).
    func count(from lower: IndexBound?, to upper: IndexBound?) -> Int {
        let low = lower.map { b in b.key.withUnsafeBytes { rank($0, inclusive: !b.inclusive) } } ?? 0
        let high = upper.map { b in b.key.withUnsafeBytes { rank($0, inclusive: b.inclusive) } } ?? count
        return max(0, high - low)
    }

    /// Visits entries in key order (or reverse) within the bounds; stops when `body` returns false.
    func forEach(
        from lower: IndexBound?, to upper: IndexBound?, reverse: Bool = false,
        _ body: (UnsafeRawBufferPointer, UInt64) throws -> Bool
    ) rethrows {
        guard let root else { return }
        let startRank = lower.map { b in b.key.withUnsafeBytes { rank($0, inclusive: !b.inclusive) } } ?? 0
        let endRank = upper.map { b in b.key.withUnsafeBytes { rank($0, inclusive: b.inclusive) } } ?? count
        guard startRank < endRank else { return }
        var remaining = endRank - startRank
        if reverse {
            _ = try Self.visitReverse(root, endBefore: endRank, remaining: &remaining, body)
        } else {
            _ = try Self.visit(root, skip: startRank, remaining: &remaining, body)
        }
    }

    /// The primary keys of the entries between the bounds, in order (or reverse), at most
    /// `limit` of them: the fast way to list a range, with no closure per entry.
    func primaryKeys(from lower: IndexBound?, to upper: IndexBound?, reverse: Bool = false, limit: Int? = nil)
        -> [UInt64]
    {
        guard let root else { return [] }
        let startRank = lower.map { b in b.key.withUnsafeBytes { rank($0, inclusive: !b.inclusive) } } ?? 0
        let endRank = upper.map { b in b.key.withUnsafeBytes { rank($0, inclusive: b.inclusive) } } ?? count
        guard startRank < endRank else { return [] }
        let total = min(endRank - startRank, limit ?? .max)
        var out: [UInt64] = []
        out.reserveCapacity(total)
        if reverse {
            // Reverse walks are rare (descending sorts): the general visitor serves them.
            var remaining = total
            _ = Self.visitReverse(root, endBefore: endRank, remaining: &remaining) { _, pk in
                out.append(pk)
                return true
            }
        } else {
            Self.collect(root, skip: startRank, total: total, into: &out)
        }
        return out
    }

    private static func collect(_ node: Node, skip: Int, total: Int, into out: inout [UInt64]) {
        if node.isLeaf {
            let end = min(node.count, skip + (total - out.count))
            if skip < end {
                out.append(contentsOf: UnsafeBufferPointer(start: node.primaryKeys + skip, count: end - skip))
            }
            return
        }
        var skip = skip
        for c in node.children.indices {
            if out.count >= total { return }
            if skip >= node.counts[c] {
                skip -= node.counts[c]
                continue
            }
            collect(node.children[c], skip: skip, total: total, into: &out)
            skip = 0
        }
    }

    /// Visits `remaining` entries after skipping `skip` of them, in order.
    private static func visit(
        _ node: Node, skip: Int, remaining: inout Int,
        _ body: (UnsafeRawBufferPointer, UInt64) throws -> Bool
    ) rethrows -> Bool {
        if node.isLeaf {
            var i = skip
            while i < node.count && remaining > 0 {
                remaining -= 1
                if try !node.withKeyBytes(i, { try body($0, node.primaryKeys[i]) }) { return false }
                i += 1
            }
            return true
        }
        var skip = skip
        for c in node.children.indices {
            if remaining <= 0 { return true }
            if skip >= node.counts[c] {
                skip -= node.counts[c]
                continue
            }
            if try !visit(node.children[c], skip: skip, remaining: &remaining, body) { return false }
            skip = 0
        }
        return true
    }

    /// Visits `remaining` entries backwards from rank `endBefore - 1`.
    private static func visitReverse(
        _ node: Node, endBefore: Int, remaining: inout Int,
        _ body: (UnsafeRawBufferPointer, UInt64) throws -> Bool
    ) rethrows -> Bool {
        if node.isLeaf {
            var i = min(endBefore, node.count) - 1
            while i >= 0 && remaining > 0 {
                remaining -= 1
                if try !node.withKeyBytes(i, { try body($0, node.primaryKeys[i]) }) { return false }
                i -= 1
            }
            return true
        }
        var before = 0
        var limits: [(Int, Int)] = []
        for c in node.children.indices {
            if before >= endBefore { break }
            limits.append((c, endBefore - before))
            before += node.counts[c]
        }
        for (c, limit) in limits.reversed() {
            if remaining <= 0 { return true }
            if try !visitReverse(node.children[c], endBefore: limit, remaining: &remaining, body) { return false }
        }
        return true
    }

    /// An estimate of the heap bytes the tree takes (for statistics).
    func estimatedBytes() -> Int {
        var total = 0
        func walk(_ node: Node) {
            total += 96
            if node.isLeaf {
                total += leafCapacityBytes + node.tails.capacity + (node.tailEnds == nil ? 0 : 4 * Self.leafCapacity)
            } else {
                total +=
                    32 * 4 + node.children.capacity * 8 + node.counts.capacity * 8 + node.minPrimaryKeys.capacity * 8
                total += node.minKeys.reduce(0) { $0 + 24 + ($1.tail.isEmpty ? 0 : 32 + $1.tail.capacity) }
                node.children.forEach(walk)
            }
        }
        if let root { walk(root) }
        return total
    }

    private var leafCapacityBytes: Int { Self.leafCapacity * (8 + 2 + 8) }

    #if DEBUG
        /// Checks order and counts (tests and debug builds only).
        func checkInvariants() {
            var previous: ([UInt8], UInt64)?
            var seen = 0
            forEach(from: nil, to: nil) { key, pk in
                let k = Array(key)
                if let (pkey, ppk) = previous {
                    let c = pkey.withUnsafeBytes { a in k.withUnsafeBytes { b in compareBytes(a, b) } }
                    precondition(c < 0 || (c == 0 && ppk < pk), "OrderedIndex out of order")
                }
                previous = (k, pk)
                seen += 1
                return true
            }
            precondition(seen == count, "OrderedIndex count \(count) but \(seen) entries")
            // Every leaf's tails: a common width with no ends, or an end for each entry.
            func visit(_ node: Node) {
                guard node.isLeaf else {
                    node.children.forEach(visit)
                    return
                }
                var expected = 0
                for i in 0..<node.count {
                    let tail = max(0, Int(node.lengths[i]) - 8)
                    if node.tailEnds == nil {
                        precondition(tail == node.tailWidth, "a leaf without tail ends has a tail of another width")
                    }
                    expected += tail
                    precondition(node.tailRange(i).count == tail, "a tail range that is not its key's")
                }
                precondition(node.tails.count == expected, "a leaf's tails are not its keys'")
            }
            if let root { visit(root) }
        }
    #endif
}
