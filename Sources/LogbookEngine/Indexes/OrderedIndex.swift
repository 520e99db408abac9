#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

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
        /// Bytes beyond the eighth of each key, concatenated. While every entry's tail has the
        /// same length (`tailWidth`: fixed-width keys, the usual case; 0 when no key is longer
        /// than eight bytes) entry `i`'s tail starts at `i * tailWidth`; once lengths differ,
        /// `tailEnds` (4 bytes an entry) gives each entry's end offset.
        @exclusivity(unchecked) var tails: [UInt8] = []
        @exclusivity(unchecked) var tailEnds: UnsafeMutablePointer<UInt32>?
        @exclusivity(unchecked) var tailWidth = 0
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
            // One allocation holds the three arrays (the two of 8-byte values first, aligned).
            let storage = UnsafeMutableRawPointer.allocate(byteCount: max(1, n * 18), alignment: 8)
            prefixes = storage.bindMemory(to: UInt64.self, capacity: n)
            primaryKeys = (storage + n * 8).bindMemory(to: UInt64.self, capacity: n)
            lengths = (storage + n * 16).bindMemory(to: UInt16.self, capacity: n)
        }

        convenience init(copying other: Node) {
            self.init(leaf: other.isLeaf)
            if isLeaf {
                count = other.count
                prefixes.update(from: other.prefixes, count: count)
                lengths.update(from: other.lengths, count: count)
                primaryKeys.update(from: other.primaryKeys, count: count)
                tails = other.tails
                tailWidth = other.tailWidth
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
            UnsafeMutableRawPointer(prefixes).deallocate()  // the storage of all three
            tailEnds?.deallocate()
        }

        var entryCount: Int { isLeaf ? count : counts.reduce(0, +) }

        @inline(__always)
        func tailRange(_ i: Int) -> Range<Int> {
            guard let ends = tailEnds else { return (i * tailWidth)..<((i + 1) * tailWidth) }
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
            var lo = 0
            var hi = count
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
            var lo = 0
            var hi = children.count
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
                    buffer.baseAddress!.advanced(by: 8).copyMemory(
                        from: t.baseAddress! + tail.lowerBound, byteCount: tail.count)
                }
                return try body(UnsafeRawBufferPointer(start: buffer.baseAddress!, count: length))
            }
        }

        /// Writes entry `i`'s prefix, length and primary key (not its tail).
        @inline(__always)
        private func setEntry(_ i: Int, _ probe: IndexKeyProbe, _ pk: UInt64) {
            prefixes[i] = probe.prefix
            lengths[i] = UInt16(probe.length)
            primaryKeys[i] = pk
        }

        /// Makes room for an entry whose tail is `length` bytes among the `count` there: an
        /// empty leaf takes its width; a tail of another length than the others' gives the
        /// leaf its `tailEnds` (each entry's end, from the common width so far).
        @inline(__always)
        private func admitTail(_ length: Int) {
            guard tailEnds == nil, length != tailWidth else { return }
            if count == 0 {
                tailWidth = length
                return
            }
            tailEnds = Self.tailEnds(width: tailWidth, count: count)
        }

        /// Tail ends for the first `count` entries of a leaf whose tails are all `width` bytes
        /// (the rest zero): for a leaf, or a bulk load, whose tails stop having one length.
        static func tailEnds(width: Int, count: Int) -> UnsafeMutablePointer<UInt32> {
            let ends = UnsafeMutablePointer<UInt32>.allocate(capacity: OrderedIndex.leafCapacity)
            for j in 0..<OrderedIndex.leafCapacity {
                (ends + j).initialize(to: UInt32(j < count ? (j + 1) * width : 0))
            }
            return ends
        }

        /// Appends an entry after the last of a leaf that has room: a bulk load's step, with
        /// no moves, and the tails (mostly a byte or a few) copied without a generic append.
        @inline(__always)
        func appendLeafEntry(_ probe: IndexKeyProbe, _ pk: UInt64) {
            let i = count
            let tail = probe.tail
            admitTail(tail.count)
            setEntry(i, probe, pk)
            if !tail.isEmpty {
                // Room for a leaf of tails as long as this one (exact for fixed-width keys).
                if tails.isEmpty { tails.reserveCapacity(OrderedIndex.leafCapacity * tail.count) }
                if tail.count <= 16 {
                    for j in 0..<tail.count { tails.append(tail[j]) }
                } else {
                    tails.append(contentsOf: tail)
                }
            }
            if let ends = tailEnds { ends[i] = UInt32(tails.count) }
            count = i + 1
        }

        /// Inserts an entry at position `i` of a leaf that has room.
        func insertLeafEntry(at i: Int, _ probe: IndexKeyProbe, _ pk: UInt64) {
            let n = count
            let extra = probe.tail.count
            admitTail(extra)  // before the moves: it reads the entries where they are
            if i < n {
                overlappingMove(prefixes + i + 1, from: prefixes + i, count: n - i)
                overlappingMove(lengths + i + 1, from: lengths + i, count: n - i)
                overlappingMove(primaryKeys + i + 1, from: primaryKeys + i, count: n - i)
            }
            setEntry(i, probe, pk)
            if let ends = tailEnds {
                let at = i == 0 ? 0 : Int(ends[i - 1])
                // Appending (as a bulk load does) is the common case and needs no move.
                if i == n { tails.append(contentsOf: probe.tail) } else { tails.insert(contentsOf: probe.tail, at: at) }
                if i < n { overlappingMove(ends + i + 1, from: ends + i, count: n - i) }
                ends[i] = UInt32(at + extra)
                if extra > 0 { for j in (i + 1)..<(n + 1) { ends[j] += UInt32(extra) } }
            } else if extra > 0 {
                if i == n {
                    tails.append(contentsOf: probe.tail)
                } else {
                    tails.insert(contentsOf: probe.tail, at: i * extra)
                }
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
            } else if tailWidth > 0 {
                tails.removeSubrange(tailRange(i))
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
            } else if tailWidth > 0 {
                let cut = from * tailWidth
                right.tailWidth = tailWidth
                right.tails = Array(tails[cut...])
                tails = Array(tails[..<cut])
            }
            count = from
            return right
        }
    }

    // Set by the insert, remove and bulk-load facets (OrderedIndex+*.swift).
    var root: Node?
    var count = 0

}

// As for `RadixMap`: shared nodes are never mutated (copy-on-write on every path), so copies
// of the tree can be read from several threads while the writer's copy changes.
extension OrderedIndex: @unchecked Sendable {}
