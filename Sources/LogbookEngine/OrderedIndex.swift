#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A persistent B+tree of `(key bytes, primary key)` entries, ordered by key bytes
/// (lexicographically) and then by primary key, with subtree counts so that the number of
/// entries in any key range is found in O(log n) without visiting them.
///
/// Leaves pack their keys into one byte array, so an entry costs its key length plus about
/// 12 bytes. Copies share nodes; writes copy the shared nodes on their path.
struct OrderedIndex {
    static var leafCapacity: Int { 128 }
    static var innerCapacity: Int { 64 }

    final class Node {
        // Leaf fields.
        var keyBytes: [UInt8] = []
        /// End offset in `keyBytes` of each entry's key.
        var keyEnds: [UInt32] = []
        var primaryKeys: [UInt64] = []
        // Inner fields.
        var children: [Node] = []
        /// Entry count of each child's subtree.
        var counts: [Int] = []
        /// Each child's greatest entry, to route searches.
        var maxKeys: [[UInt8]] = []
        var maxPrimaryKeys: [UInt64] = []
        let isLeaf: Bool

        init(leaf: Bool) { isLeaf = leaf }

        init(copying other: Node) {
            isLeaf = other.isLeaf
            keyBytes = other.keyBytes
            keyEnds = other.keyEnds
            primaryKeys = other.primaryKeys
            children = other.children
            counts = other.counts
            maxKeys = other.maxKeys
            maxPrimaryKeys = other.maxPrimaryKeys
        }

        var entryCount: Int { isLeaf ? primaryKeys.count : counts.reduce(0, +) }

        @inline(__always)
        func keyRange(_ i: Int) -> Range<Int> {
            (i == 0 ? 0 : Int(keyEnds[i - 1]))..<Int(keyEnds[i])
        }

        @inline(__always)
        func withKey<R>(_ i: Int, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
            let r = keyRange(i)
            return try keyBytes.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[r])) }
        }

        /// Compares entry `i` of a leaf with (key, pk).
        @inline(__always)
        func compareLeafEntry(_ i: Int, _ key: UnsafeRawBufferPointer, _ pk: UInt64?) -> Int {
            let c = withKey(i) { compareBytes($0, key) }
            if c != 0 || pk == nil { return c }
            return primaryKeys[i] == pk! ? 0 : (primaryKeys[i] < pk! ? -1 : 1)
        }

        @inline(__always)
        func compareChildMax(_ i: Int, _ key: UnsafeRawBufferPointer, _ pk: UInt64?) -> Int {
            let c = maxKeys[i].withUnsafeBytes { compareBytes($0, key) }
            if c != 0 || pk == nil { return c }
            return maxPrimaryKeys[i] == pk! ? 0 : (maxPrimaryKeys[i] < pk! ? -1 : 1)
        }

        /// First leaf entry not less than (key, pk); with `pk == nil`, compares keys only and
        /// `orEqual` chooses between "first ≥ key" (false) and "first > key" (true).
        func leafLowerBound(_ key: UnsafeRawBufferPointer, _ pk: UInt64?, after: Bool = false) -> Int {
            var lo = 0, hi = primaryKeys.count
            while lo < hi {
                let mid = (lo + hi) / 2
                let c = compareLeafEntry(mid, key, pk)
                if c < 0 || (after && c == 0) { lo = mid + 1 } else { hi = mid }
            }
            return lo
        }

        /// First child whose greatest entry is not less than (key, pk) (or greater, with `after`).
        func childLowerBound(_ key: UnsafeRawBufferPointer, _ pk: UInt64?, after: Bool = false) -> Int {
            var lo = 0, hi = children.count
            while lo < hi {
                let mid = (lo + hi) / 2
                let c = compareChildMax(mid, key, pk)
                if c < 0 || (after && c == 0) { lo = mid + 1 } else { hi = mid }
            }
            return lo
        }

        func lastEntry() -> ([UInt8], UInt64) {
            if isLeaf {
                let last = primaryKeys.count - 1
                return (Array(keyBytes[keyRange(last)]), primaryKeys[last])
            }
            return (maxKeys[maxKeys.count - 1], maxPrimaryKeys[maxPrimaryKeys.count - 1])
        }
    }

    private(set) var root: Node?
    private(set) var count = 0

    // MARK: Insert

    /// Inserts (key, pk); returns false if it was already present.
    @discardableResult
    mutating func insert(_ key: UnsafeRawBufferPointer, _ pk: UInt64) -> Bool {
        if root == nil { root = Node(leaf: true) }
        if !isKnownUniquelyReferenced(&root!) { root = Node(copying: root!) }
        var inserted = false
        if let sibling = Self.insert(into: root!, key, pk, &inserted) {
            let newRoot = Node(leaf: false)
            for node in [root!, sibling] { Self.appendChild(node, to: newRoot) }
            root = newRoot
        }
        if inserted { count += 1 }
        return inserted
    }

    private static func appendChild(_ child: Node, to parent: Node) {
        let (k, p) = child.lastEntry()
        parent.children.append(child)
        parent.counts.append(child.entryCount)
        parent.maxKeys.append(k)
        parent.maxPrimaryKeys.append(p)
    }

    /// Inserts into a uniquely referenced node; returns a new right sibling if the node split.
    private static func insert(into node: Node, _ key: UnsafeRawBufferPointer, _ pk: UInt64, _ inserted: inout Bool) -> Node? {
        if node.isLeaf {
            let i = node.leafLowerBound(key, pk)
            if i < node.primaryKeys.count && node.compareLeafEntry(i, key, pk) == 0 { return nil }
            inserted = true
            let at = i == 0 ? 0 : Int(node.keyEnds[i - 1])
            node.keyBytes.insert(contentsOf: key, at: at)
            node.keyEnds.insert(UInt32(at + key.count), at: i)
            for j in (i + 1)..<node.keyEnds.count { node.keyEnds[j] += UInt32(key.count) }
            node.primaryKeys.insert(pk, at: i)
            guard node.primaryKeys.count > leafCapacity else { return nil }
            // Appending at the end (ascending keys, the common case) leaves a full left leaf.
            let splitAt = i == node.primaryKeys.count - 1 ? node.primaryKeys.count - 1 : node.primaryKeys.count / 2
            return splitLeaf(node, at: splitAt)
        }
        var c = node.childLowerBound(key, pk)
        if c == node.children.count { c -= 1 }
        if !isKnownUniquelyReferenced(&node.children[c]) { node.children[c] = Node(copying: node.children[c]) }
        let child = node.children[c]
        let sibling = insert(into: child, key, pk, &inserted)
        if inserted { node.counts[c] += 1 }
        refreshMax(node, c)
        if let sibling {
            node.counts[c] = child.entryCount
            let (k, p) = sibling.lastEntry()
            node.children.insert(sibling, at: c + 1)
            node.counts.insert(sibling.entryCount, at: c + 1)
            node.maxKeys.insert(k, at: c + 1)
            node.maxPrimaryKeys.insert(p, at: c + 1)
            refreshMax(node, c)
            guard node.children.count > innerCapacity else { return nil }
            let splitAt = c + 1 == node.children.count - 1 ? node.children.count - 1 : node.children.count / 2
            let right = Node(leaf: false)
            right.children = Array(node.children[splitAt...])
            right.counts = Array(node.counts[splitAt...])
            right.maxKeys = Array(node.maxKeys[splitAt...])
            right.maxPrimaryKeys = Array(node.maxPrimaryKeys[splitAt...])
            node.children.removeSubrange(splitAt...)
            node.counts.removeSubrange(splitAt...)
            node.maxKeys.removeSubrange(splitAt...)
            node.maxPrimaryKeys.removeSubrange(splitAt...)
            return right
        }
        return nil
    }

    private static func refreshMax(_ node: Node, _ c: Int) {
        let child = node.children[c]
        if child.isLeaf {
            let last = child.primaryKeys.count - 1
            guard last >= 0 else { return }
            if node.maxPrimaryKeys[c] != child.primaryKeys[last] || node.maxKeys[c].count != child.keyRange(last).count
                || !child.withKey(last, { k in node.maxKeys[c].withUnsafeBytes { compareBytes($0, k) == 0 } }) {
                node.maxKeys[c] = Array(child.keyBytes[child.keyRange(last)])
                node.maxPrimaryKeys[c] = child.primaryKeys[last]
            }
        } else if let lastKey = child.maxKeys.last {
            node.maxKeys[c] = lastKey
            node.maxPrimaryKeys[c] = child.maxPrimaryKeys.last!
        }
    }

    private static func splitLeaf(_ node: Node, at splitAt: Int) -> Node {
        let right = Node(leaf: true)
        let byteSplit = Int(node.keyEnds[splitAt - 1])
        right.keyBytes = Array(node.keyBytes[byteSplit...])
        right.keyEnds = node.keyEnds[splitAt...].map { $0 - UInt32(byteSplit) }
        right.primaryKeys = Array(node.primaryKeys[splitAt...])
        // Fresh arrays, so the left leaf does not keep the capacity it grew into.
        node.keyBytes = Array(node.keyBytes[..<byteSplit])
        node.keyEnds = Array(node.keyEnds[..<splitAt])
        node.primaryKeys = Array(node.primaryKeys[..<splitAt])
        return right
    }

    // MARK: Remove

    /// Removes (key, pk); returns false if it was not present.
    @discardableResult
    mutating func remove(_ key: UnsafeRawBufferPointer, _ pk: UInt64) -> Bool {
        guard root != nil else { return false }
        if !isKnownUniquelyReferenced(&root!) { root = Node(copying: root!) }
        let removed = Self.remove(from: root!, key, pk)
        if removed {
            count -= 1
            if count == 0 { root = nil }
            while let r = root, !r.isLeaf, r.children.count == 1 { root = r.children[0] }
        }
        return removed
    }

    private static func remove(from node: Node, _ key: UnsafeRawBufferPointer, _ pk: UInt64) -> Bool {
        if node.isLeaf {
            let i = node.leafLowerBound(key, pk)
            guard i < node.primaryKeys.count, node.compareLeafEntry(i, key, pk) == 0 else { return false }
            let r = node.keyRange(i)
            node.keyBytes.removeSubrange(r)
            node.keyEnds.remove(at: i)
            for j in i..<node.keyEnds.count { node.keyEnds[j] -= UInt32(r.count) }
            node.primaryKeys.remove(at: i)
            return true
        }
        let c = node.childLowerBound(key, pk)
        guard c < node.children.count else { return false }
        if !isKnownUniquelyReferenced(&node.children[c]) { node.children[c] = Node(copying: node.children[c]) }
        let child = node.children[c]
        guard remove(from: child, key, pk) else { return false }
        node.counts[c] -= 1
        if node.counts[c] == 0 {
            node.children.remove(at: c)
            node.counts.remove(at: c)
            node.maxKeys.remove(at: c)
            node.maxPrimaryKeys.remove(at: c)
        } else {
            refreshMax(node, c)
        }
        return true
    }

    // MARK: Queries

    /// The number of entries whose key is below `key` (or at most `key` when `inclusive`).
    func rank(_ key: UnsafeRawBufferPointer, inclusive: Bool) -> Int {
        guard var node = root else { return 0 }
        var total = 0
        while !node.isLeaf {
            let c = node.childLowerBound(key, nil, after: inclusive)
            for j in 0..<c { total += node.counts[j] }
            if c == node.children.count { return total }
            node = node.children[c]
        }
        return total + node.leafLowerBound(key, nil, after: inclusive)
    }

    /// The number of entries with `lower ≤ key` (or `<`) and `key ≤ upper` (or `<`).
    func count(from lower: IndexBound?, to upper: IndexBound?) -> Int {
        let low = lower.map { b in b.key.withUnsafeBytes { rank($0, inclusive: !b.inclusive) } } ?? 0
        let high = upper.map { b in b.key.withUnsafeBytes { rank($0, inclusive: b.inclusive) } } ?? count
        return max(0, high - low)
    }

    /// Visits entries in key order (or reverse) within the bounds; stops when `body` returns false.
    func forEach(from lower: IndexBound?, to upper: IndexBound?, reverse: Bool = false,
                 _ body: (UnsafeRawBufferPointer, UInt64) throws -> Bool) rethrows {
        guard let root else { return }
        let startRank = lower.map { b in b.key.withUnsafeBytes { rank($0, inclusive: !b.inclusive) } } ?? 0
        let endRank = upper.map { b in b.key.withUnsafeBytes { rank($0, inclusive: b.inclusive) } } ?? count
        guard startRank < endRank else { return }
        if reverse {
            var remaining = endRank - startRank
            _ = try Self.visitReverse(root, endBefore: endRank, remaining: &remaining, body)
        } else {
            var remaining = endRank - startRank
            _ = try Self.visit(root, skip: startRank, remaining: &remaining, body)
        }
    }

    /// Visits `remaining` entries after skipping `skip` of them, in order.
    private static func visit(_ node: Node, skip: Int, remaining: inout Int,
                              _ body: (UnsafeRawBufferPointer, UInt64) throws -> Bool) rethrows -> Bool {
        if node.isLeaf {
            var i = skip
            let n = node.primaryKeys.count
            return try node.keyBytes.withUnsafeBytes { bytes in
                while i < n && remaining > 0 {
                    let start = i == 0 ? 0 : Int(node.keyEnds[i - 1])
                    let key = UnsafeRawBufferPointer(rebasing: bytes[start..<Int(node.keyEnds[i])])
                    remaining -= 1
                    if try !body(key, node.primaryKeys[i]) { return false }
                    i += 1
                }
                return true
            }
        }
        var skip = skip
        for c in node.children.indices {
            if remaining <= 0 { return true }
            if skip >= node.counts[c] { skip -= node.counts[c]; continue }
            if try !visit(node.children[c], skip: skip, remaining: &remaining, body) { return false }
            skip = 0
        }
        return true
    }

    /// Visits `remaining` entries backwards from rank `endBefore - 1`.
    private static func visitReverse(_ node: Node, endBefore: Int, remaining: inout Int,
                                     _ body: (UnsafeRawBufferPointer, UInt64) throws -> Bool) rethrows -> Bool {
        if node.isLeaf {
            var i = min(endBefore, node.primaryKeys.count) - 1
            return try node.keyBytes.withUnsafeBytes { bytes in
                while i >= 0 && remaining > 0 {
                    let start = i == 0 ? 0 : Int(node.keyEnds[i - 1])
                    let key = UnsafeRawBufferPointer(rebasing: bytes[start..<Int(node.keyEnds[i])])
                    remaining -= 1
                    if try !body(key, node.primaryKeys[i]) { return false }
                    i -= 1
                }
                return true
            }
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
            total += 64 + 4 * 32
            if node.isLeaf {
                total += node.keyBytes.capacity + node.keyEnds.capacity * 4 + node.primaryKeys.capacity * 8
            } else {
                total += node.children.capacity * 8 + node.counts.capacity * 8 + node.maxPrimaryKeys.capacity * 8
                total += node.maxKeys.reduce(0) { $0 + 32 + $1.capacity }
                node.children.forEach(walk)
            }
        }
        if let root { walk(root) }
        return total
    }

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
    }
    #endif
}

/// One end of an index range: a key, and whether entries equal to it are in the range.
public struct IndexBound: Sendable, Hashable {
    public var key: [UInt8]
    public var inclusive: Bool

    public init(_ key: [UInt8], inclusive: Bool) {
        self.key = key
        self.inclusive = inclusive
    }
}

// As for `RadixMap`: shared nodes are never mutated (copy-on-write on every path), so copies
// of the tree can be read from several threads while the writer's copy changes.
extension OrderedIndex: @unchecked Sendable {}
