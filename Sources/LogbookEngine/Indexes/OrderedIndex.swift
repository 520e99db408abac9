#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

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

/// Index entries waiting to go into one index: keys as ranges of a block, and primary keys.
struct PendingEntries {
    var keys: [Range<Int>] = []
    var primaryKeys: [UInt64] = []
    var count: Int { keys.count }

    mutating func append(_ key: Range<Int>, _ pk: UInt64) {
        keys.append(key)
        primaryKeys.append(pk)
    }

    mutating func removeAll() {
        keys.removeAll(keepingCapacity: true)
        primaryKeys.removeAll(keepingCapacity: true)
    }

    @inline(__always)
    func probe(_ i: Int, _ block: UnsafeRawBufferPointer) -> IndexKeyProbe {
        IndexKeyProbe(UnsafeRawBufferPointer(rebasing: block[keys[i]]))
    }

    func compare(_ a: Int, _ b: Int, _ block: UnsafeRawBufferPointer) -> Int {
        let c = compareBytes(UnsafeRawBufferPointer(rebasing: block[keys[a]]), UnsafeRawBufferPointer(rebasing: block[keys[b]]))
        if c != 0 { return c }
        return primaryKeys[a] == primaryKeys[b] ? 0 : (primaryKeys[a] < primaryKeys[b] ? -1 : 1)
    }
}

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

/// A persistent B+tree of `(key bytes, primary key)` entries, ordered by key bytes
/// (lexicographically) and then by primary key, with subtree counts so that the number of
/// entries in any key range is found in O(log n) without visiting them.
///
/// Leaves hold fixed arrays of 8-byte key prefixes, lengths and primary keys (about 18 bytes
/// an entry for keys of 8 bytes or less), plus the bytes beyond the eighth of longer keys.
/// Copies share nodes; writes copy the shared nodes on their path.
struct OrderedIndex {
    static var leafCapacity: Int { 128 }
    static var innerCapacity: Int { 64 }

    final class Node {
        let isLeaf: Bool
        // Exclusivity is guaranteed by construction (a node is mutated only by the writer,
        // only while uniquely referenced), so the runtime checks are turned off.
        // Leaf storage: `leafCapacity` slots each, `count` in use.
        @exclusivity(unchecked) var count = 0
        let prefixes: UnsafeMutablePointer<UInt64>
        let lengths: UnsafeMutablePointer<UInt16>
        let primaryKeys: UnsafeMutablePointer<UInt64>
        /// Bytes beyond the eighth of each key, concatenated; `tailEnds` (allocated on the
        /// first long key) gives each entry's end offset.
        @exclusivity(unchecked) var tails: [UInt8] = []
        @exclusivity(unchecked) var tailEnds: UnsafeMutablePointer<UInt32>?
        // Inner storage.
        @exclusivity(unchecked) var children: [Node] = []
        /// Entry count of each child's subtree.
        @exclusivity(unchecked) var counts: [Int] = []
        /// Each child's smallest entry, to route searches (rarely rewritten: ascending keys
        /// never change a child's first entry).
        @exclusivity(unchecked) var minKeys: [StoredKey] = []
        @exclusivity(unchecked) var minPrimaryKeys: [UInt64] = []

        init(leaf: Bool) {
            isLeaf = leaf
            let n = leaf ? OrderedIndex.leafCapacity : 0
            prefixes = .allocate(capacity: n)
            lengths = .allocate(capacity: n)
            primaryKeys = .allocate(capacity: n)
        }

        convenience init(copying other: Node) {
            self.init(leaf: other.isLeaf)
            if isLeaf {
                count = other.count
                prefixes.update(from: other.prefixes, count: count)
                lengths.update(from: other.lengths, count: count)
                primaryKeys.update(from: other.primaryKeys, count: count)
                tails = other.tails
                if let ends = other.tailEnds {
                    tailEnds = .allocate(capacity: OrderedIndex.leafCapacity)
                    tailEnds!.update(from: ends, count: count)
                }
            } else {
                children = other.children
                counts = other.counts
                minKeys = other.minKeys
                minPrimaryKeys = other.minPrimaryKeys
            }
        }

        deinit {
            prefixes.deallocate()
            lengths.deallocate()
            primaryKeys.deallocate()
            tailEnds?.deallocate()
        }

        var entryCount: Int { isLeaf ? count : counts.reduce(0, +) }

        @inline(__always)
        func tailRange(_ i: Int) -> Range<Int> {
            guard let ends = tailEnds else { return 0..<0 }
            return (i == 0 ? 0 : Int(ends[i - 1]))..<Int(ends[i])
        }

        /// Compares the key of leaf entry `i` with a probe (keys only).
        @inline(__always)
        func compareKey(_ i: Int, _ probe: IndexKeyProbe) -> Int {
            let p = prefixes[i]
            if p != probe.prefix { return p < probe.prefix ? -1 : 1 }
            let length = Int(lengths[i])
            if length <= 8 && probe.length <= 8 { return length == probe.length ? 0 : (length < probe.length ? -1 : 1) }
            let r = tailRange(i)
            return tails.withUnsafeBytes { compareBytes(UnsafeRawBufferPointer(rebasing: $0[r]), probe.tail) }
        }

        @inline(__always)
        func compareEntry(_ i: Int, _ probe: IndexKeyProbe, _ pk: UInt64?) -> Int {
            let c = compareKey(i, probe)
            guard c == 0, let pk else { return c }
            return primaryKeys[i] == pk ? 0 : (primaryKeys[i] < pk ? -1 : 1)
        }

        @inline(__always)
        func compareChildMin(_ i: Int, _ probe: IndexKeyProbe, _ pk: UInt64?) -> Int {
            let c = minKeys[i].compare(probe)
            guard c == 0, let pk else { return c }
            return minPrimaryKeys[i] == pk ? 0 : (minPrimaryKeys[i] < pk ? -1 : 1)
        }

        /// First leaf entry not less than (key, pk) (or greater, with `after`).
        func leafLowerBound(_ probe: IndexKeyProbe, _ pk: UInt64?, after: Bool = false) -> Int {
            var lo = 0, hi = count
            while lo < hi {
                let mid = (lo + hi) / 2
                let c = compareEntry(mid, probe, pk)
                if c < 0 || (after && c == 0) { lo = mid + 1 } else { hi = mid }
            }
            return lo
        }

        /// The last child whose smallest entry is below the probe — or at most, with
        /// `orEqual` — or -1 if there is none.
        func lastChild(below probe: IndexKeyProbe, _ pk: UInt64?, orEqual: Bool) -> Int {
            var lo = 0, hi = children.count
            while lo < hi {
                let mid = (lo + hi) / 2
                let c = compareChildMin(mid, probe, pk)
                if c < 0 || (orEqual && c == 0) { lo = mid + 1 } else { hi = mid }
            }
            return lo - 1
        }

        func storedKey(_ i: Int) -> StoredKey {
            let r = tailRange(i)
            return StoredKey(prefix: prefixes[i], length: Int(lengths[i]), tail: r.isEmpty ? [] : Array(tails[r]))
        }

        func firstEntry() -> (StoredKey, UInt64) {
            if isLeaf { return (storedKey(0), primaryKeys[0]) }
            return (minKeys[0], minPrimaryKeys[0])
        }

        /// Calls `body` with the bytes of leaf entry `i`'s key.
        @inline(__always)
        func withKeyBytes<R>(_ i: Int, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
            let length = Int(lengths[i])
            var word = prefixes[i].bigEndian
            if length <= 8 {
                return try withUnsafeBytes(of: &word) { try body(UnsafeRawBufferPointer(rebasing: $0[0..<length])) }
            }
            // The prefix and the tail side by side in a stack buffer (no allocation).
            let tail = tailRange(i)
            return try withUnsafeTemporaryAllocation(byteCount: 8 + tail.count, alignment: 8) { buffer in
                buffer.storeBytes(of: word, toByteOffset: 0, as: UInt64.self)
                tails.withUnsafeBytes { t in
                    buffer.baseAddress!.advanced(by: 8).copyMemory(from: t.baseAddress! + tail.lowerBound, byteCount: tail.count)
                }
                return try body(UnsafeRawBufferPointer(start: buffer.baseAddress!, count: length))
            }
        }

        /// Inserts an entry at position `i` of a leaf that has room.
        func insertLeafEntry(at i: Int, _ probe: IndexKeyProbe, _ pk: UInt64) {
            let n = count
            if i < n {
                overlappingMove(prefixes + i + 1, from: prefixes + i, count: n - i)
                overlappingMove(lengths + i + 1, from: lengths + i, count: n - i)
                overlappingMove(primaryKeys + i + 1, from: primaryKeys + i, count: n - i)
            }
            prefixes[i] = probe.prefix
            lengths[i] = UInt16(probe.length)
            primaryKeys[i] = pk
            if probe.length > 8 || tailEnds != nil {
                if tailEnds == nil {
                    tailEnds = .allocate(capacity: OrderedIndex.leafCapacity)
                    tailEnds!.initialize(repeating: 0, count: OrderedIndex.leafCapacity)
                }
                let ends = tailEnds!
                let at = i == 0 ? 0 : Int(ends[i - 1])
                let extra = probe.tail.count
                tails.insert(contentsOf: probe.tail, at: at)
                if i < n { overlappingMove(ends + i + 1, from: ends + i, count: n - i) }
                ends[i] = UInt32(at + extra)
                if extra > 0 { for j in (i + 1)..<(n + 1) { ends[j] += UInt32(extra) } }
            }
            count = n + 1
        }

        func removeLeafEntry(at i: Int) {
            let n = count
            if let ends = tailEnds {
                let r = tailRange(i)
                tails.removeSubrange(r)
                if i + 1 < n { overlappingMove(ends + i, from: ends + i + 1, count: n - i - 1) }
                if !r.isEmpty { for j in i..<(n - 1) { ends[j] -= UInt32(r.count) } }
            }
            if i + 1 < n {
                overlappingMove(prefixes + i, from: prefixes + i + 1, count: n - i - 1)
                overlappingMove(lengths + i, from: lengths + i + 1, count: n - i - 1)
                overlappingMove(primaryKeys + i, from: primaryKeys + i + 1, count: n - i - 1)
            }
            count = n - 1
        }

        /// Moves entries `from...` of this leaf into a new leaf.
        func splitLeaf(at from: Int) -> Node {
            let right = Node(leaf: true)
            let n = count - from
            right.prefixes.update(from: prefixes + from, count: n)
            right.lengths.update(from: lengths + from, count: n)
            right.primaryKeys.update(from: primaryKeys + from, count: n)
            right.count = n
            if let ends = tailEnds {
                let cut = from == 0 ? 0 : Int(ends[from - 1])
                right.tails = Array(tails[cut...])
                right.tailEnds = .allocate(capacity: OrderedIndex.leafCapacity)
                for j in 0..<n { right.tailEnds![j] = ends[from + j] - UInt32(cut) }
                tails = Array(tails[..<cut])
            }
            count = from
            return right
        }
    }

    private(set) var root: Node?
    private(set) var count = 0

    // MARK: Insert

    /// Inserts (key, pk); returns false if it was already present.
    @discardableResult
    mutating func insert(_ key: UnsafeRawBufferPointer, _ pk: UInt64) -> Bool {
        let probe = IndexKeyProbe(key)
        if appendAtEnd(probe, pk) { return true }
        if root == nil { root = Node(leaf: true) }
        if !isKnownUniquelyReferenced(&root!) { root = Node(copying: root!) }
        var inserted = false
        if let sibling = Self.insert(into: root!, probe, pk, &inserted) {
            let newRoot = Node(leaf: false)
            for node in [root!, sibling] { Self.appendChild(node, to: newRoot) }
            root = newRoot
        }
        if inserted { count += 1 }
        return inserted
    }

    /// The fast path of ascending keys: when (key, pk) comes after every entry and the last
    /// leaf has room, walk the right spine (making it unique), bump its counts and append.
    private mutating func appendAtEnd(_ probe: IndexKeyProbe, _ pk: UInt64) -> Bool {
        guard var node = root else { return false }
        while !node.isLeaf { node = node.children[node.children.count - 1] }
        let n = node.count
        guard n > 0, n < Self.leafCapacity, node.compareEntry(n - 1, probe, pk) < 0 else { return false }
        if !isKnownUniquelyReferenced(&root!) { root = Node(copying: root!) }
        node = root!
        while !node.isLeaf {
            let last = node.children.count - 1
            if !isKnownUniquelyReferenced(&node.children[last]) { node.children[last] = Node(copying: node.children[last]) }
            node.counts[last] += 1
            node = node.children[last]
        }
        node.insertLeafEntry(at: n, probe, pk)
        count += 1
        return true
    }

    /// Appends entries that are in strictly ascending order and all after the last entry,
    /// a leaf at a time: one walk down the right spine per leaf filled, not per entry.
    /// Returns false, changing nothing, when the entries do not qualify.
    mutating func appendAscending(_ entries: PendingEntries, _ block: UnsafeRawBufferPointer) -> Bool {
        let n = entries.count
        guard n > 0 else { return true }
        for j in 1..<max(1, n) where entries.compare(j - 1, j, block) >= 0 { return false }
        if let root {
            var node = root
            while !node.isLeaf { node = node.children[node.children.count - 1] }
            guard node.count > 0, node.compareEntry(node.count - 1, entries.probe(0, block), entries.primaryKeys[0]) < 0 else { return false }
        }
        var i = 0
        while i < n {
            if root == nil || Self.rightmostLeafRoom(root!) == 0 {
                insert(UnsafeRawBufferPointer(rebasing: block[entries.keys[i]]), entries.primaryKeys[i])
                i += 1
                continue
            }
            if !isKnownUniquelyReferenced(&root!) { root = Node(copying: root!) }
            var node = root!
            let k = min(Self.rightmostLeafRoom(node), n - i)
            while !node.isLeaf {
                let last = node.children.count - 1
                if !isKnownUniquelyReferenced(&node.children[last]) { node.children[last] = Node(copying: node.children[last]) }
                node.counts[last] += k
                node = node.children[last]
            }
            for j in i..<(i + k) { node.insertLeafEntry(at: node.count, entries.probe(j, block), entries.primaryKeys[j]) }
            count += k
            i += k
        }
        return true
    }

    private static func rightmostLeafRoom(_ root: Node) -> Int {
        var node = root
        while !node.isLeaf { node = node.children[node.children.count - 1] }
        return leafCapacity - node.count
    }

    private static func appendChild(_ child: Node, to parent: Node) {
        let (k, p) = child.firstEntry()
        parent.children.append(child)
        parent.counts.append(child.entryCount)
        parent.minKeys.append(k)
        parent.minPrimaryKeys.append(p)
    }

    /// Inserts into a uniquely referenced node; returns a new right sibling if the node split.
    private static func insert(into node: Node, _ probe: IndexKeyProbe, _ pk: UInt64, _ inserted: inout Bool) -> Node? {
        if node.isLeaf {
            let n = node.count
            let i = n > 0 && node.compareEntry(n - 1, probe, pk) < 0 ? n : node.leafLowerBound(probe, pk)
            if i < n && node.compareEntry(i, probe, pk) == 0 { return nil }
            inserted = true
            if n < leafCapacity {
                node.insertLeafEntry(at: i, probe, pk)
                return nil
            }
            // Full: split first. Appending at the end (ascending keys) leaves a full left leaf.
            let splitAt = i == n ? n : n / 2
            let right = node.splitLeaf(at: splitAt)
            if i < splitAt || (i == splitAt && splitAt < n) {
                node.insertLeafEntry(at: i, probe, pk)
            } else {
                right.insertLeafEntry(at: i - splitAt, probe, pk)
            }
            return right
        }
        let last = node.children.count - 1
        let c = node.compareChildMin(last, probe, pk) <= 0 ? last : max(0, node.lastChild(below: probe, pk, orEqual: true))
        if !isKnownUniquelyReferenced(&node.children[c]) { node.children[c] = Node(copying: node.children[c]) }
        let child = node.children[c]
        let sibling = insert(into: child, probe, pk, &inserted)
        guard inserted else { return nil }
        node.counts[c] += 1
        if c == 0 && node.compareChildMin(0, probe, pk) > 0 {
            node.minKeys[0] = StoredKey(probe)
            node.minPrimaryKeys[0] = pk
        }
        guard let sibling else { return nil }
        node.counts[c] = child.entryCount
        let (k, p) = sibling.firstEntry()
        node.children.insert(sibling, at: c + 1)
        node.counts.insert(sibling.entryCount, at: c + 1)
        node.minKeys.insert(k, at: c + 1)
        node.minPrimaryKeys.insert(p, at: c + 1)
        guard node.children.count > innerCapacity else { return nil }
        let splitAt = c + 1 == node.children.count - 1 ? node.children.count - 1 : node.children.count / 2
        let right = Node(leaf: false)
        right.children = Array(node.children[splitAt...])
        right.counts = Array(node.counts[splitAt...])
        right.minKeys = Array(node.minKeys[splitAt...])
        right.minPrimaryKeys = Array(node.minPrimaryKeys[splitAt...])
        node.children = Array(node.children[..<splitAt])
        node.counts = Array(node.counts[..<splitAt])
        node.minKeys = Array(node.minKeys[..<splitAt])
        node.minPrimaryKeys = Array(node.minPrimaryKeys[..<splitAt])
        return right
    }

    // MARK: Bulk loading

    /// Builds a tree from entries given in ascending order, filling leaves and inner nodes
    /// completely (as a checkpoint is loaded). O(n), no comparisons.
    struct Builder {
        private var levels: [[Node]] = [[]]
        private var leaf = Node(leaf: true)
        private(set) var count = 0

        init() {}

        mutating func append(_ key: UnsafeRawBufferPointer, _ pk: UInt64) {
            if leaf.count == OrderedIndex.leafCapacity { push(leaf, level: 0); leaf = Node(leaf: true) }
            leaf.insertLeafEntry(at: leaf.count, IndexKeyProbe(key), pk)
            count += 1
        }

        private mutating func push(_ node: Node, level: Int) {
            if levels.count == level { levels.append([]) }
            levels[level].append(node)
            if levels[level].count == OrderedIndex.innerCapacity + 1 {
                // Keep the newest node at this level; wrap the full run below a parent.
                let full = Array(levels[level].prefix(OrderedIndex.innerCapacity))
                levels[level].removeFirst(OrderedIndex.innerCapacity)
                push(Self.parent(of: full), level: level + 1)
            }
        }

        private static func parent(of children: [Node]) -> Node {
            let p = Node(leaf: false)
            for c in children { OrderedIndex.appendChild(c, to: p) }
            return p
        }

        private static func wrap(_ nodes: [Node]) -> [Node] {
            var parents: [Node] = []
            var start = 0
            while start < nodes.count {
                let end = min(nodes.count, start + OrderedIndex.innerCapacity)
                parents.append(parent(of: Array(nodes[start..<end])))
                start = end
            }
            return parents
        }

        consuming func build() -> OrderedIndex {
            var index = OrderedIndex()
            if leaf.count > 0 { push(leaf, level: 0) }
            guard count > 0 else { return index }
            for level in levels.indices {
                let nodes = levels[level]
                if level == levels.count - 1 {
                    var top = nodes
                    while top.count > 1 { top = Self.wrap(top) }
                    index.root = top[0]
                } else {
                    // Put what is left at this level under parents, after the next level's nodes.
                    levels[level + 1].append(contentsOf: Self.wrap(nodes))
                }
            }
            index.count = count
            return index
        }
    }

    // MARK: Remove

    /// Removes (key, pk); returns false if it was not present.
    @discardableResult
    mutating func remove(_ key: UnsafeRawBufferPointer, _ pk: UInt64) -> Bool {
        guard root != nil else { return false }
        if !isKnownUniquelyReferenced(&root!) { root = Node(copying: root!) }
        let removed = Self.remove(from: root!, IndexKeyProbe(key), pk)
        if removed {
            count -= 1
            if count == 0 { root = nil }
            while let r = root, !r.isLeaf, r.children.count == 1 { root = r.children[0] }
        }
        return removed
    }

    private static func remove(from node: Node, _ probe: IndexKeyProbe, _ pk: UInt64) -> Bool {
        if node.isLeaf {
            let i = node.leafLowerBound(probe, pk)
            guard i < node.count, node.compareEntry(i, probe, pk) == 0 else { return false }
            node.removeLeafEntry(at: i)
            return true
        }
        let c = node.lastChild(below: probe, pk, orEqual: true)
        guard c >= 0 else { return false }
        if !isKnownUniquelyReferenced(&node.children[c]) { node.children[c] = Node(copying: node.children[c]) }
        let child = node.children[c]
        guard remove(from: child, probe, pk) else { return false }
        node.counts[c] -= 1
        if node.counts[c] == 0 {
            node.children.remove(at: c)
            node.counts.remove(at: c)
            node.minKeys.remove(at: c)
            node.minPrimaryKeys.remove(at: c)
        } else if node.compareChildMin(c, probe, pk) == 0 {
            let (k, p) = child.firstEntry()
            node.minKeys[c] = k
            node.minPrimaryKeys[c] = p
        }
        return true
    }

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
    func forEach(from lower: IndexBound?, to upper: IndexBound?, reverse: Bool = false,
                 _ body: (UnsafeRawBufferPointer, UInt64) throws -> Bool) rethrows {
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
    func primaryKeys(from lower: IndexBound?, to upper: IndexBound?, reverse: Bool = false, limit: Int? = nil) -> [UInt64] {
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
            Self.visitReverse(root, endBefore: endRank, remaining: &remaining) { _, pk in out.append(pk); return true }
        } else {
            Self.collect(root, skip: startRank, total: total, into: &out)
        }
        return out
    }

    private static func collect(_ node: Node, skip: Int, total: Int, into out: inout [UInt64]) {
        if node.isLeaf {
            let end = min(node.count, skip + (total - out.count))
            if skip < end { out.append(contentsOf: UnsafeBufferPointer(start: node.primaryKeys + skip, count: end - skip)) }
            return
        }
        var skip = skip
        for c in node.children.indices {
            if out.count >= total { return }
            if skip >= node.counts[c] { skip -= node.counts[c]; continue }
            collect(node.children[c], skip: skip, total: total, into: &out)
            skip = 0
        }
    }

    /// Visits `remaining` entries after skipping `skip` of them, in order.
    private static func visit(_ node: Node, skip: Int, remaining: inout Int,
                              _ body: (UnsafeRawBufferPointer, UInt64) throws -> Bool) rethrows -> Bool {
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
                total += 32 * 4 + node.children.capacity * 8 + node.counts.capacity * 8 + node.minPrimaryKeys.capacity * 8
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
    }
    #endif
}

// As for `RadixMap`: shared nodes are never mutated (copy-on-write on every path), so copies
// of the tree can be read from several threads while the writer's copy changes.
extension OrderedIndex: @unchecked Sendable {}

/// Moves `count` trivial values from `source` to `destination`, which may overlap (memmove).
@inline(__always)
func overlappingMove<T: BitwiseCopyable>(_ destination: UnsafeMutablePointer<T>, from source: UnsafeMutablePointer<T>, count: Int) {
    UnsafeMutableRawPointer(destination).copyMemory(from: source, byteCount: count * MemoryLayout<T>.stride)
}

/// A copy with no spare capacity (`Array(slice)` may keep the whole buffer).
func exactCopy<C: Collection>(_ source: C) -> [C.Element] where C.Element: BitwiseCopyable {
    [C.Element](unsafeUninitializedCapacity: source.count) { buffer, count in
        _ = buffer.initialize(from: source)
        count = source.count
    }
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
