#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

extension OrderedIndex {
    // MARK: Bulk loading

    /// Builds a tree from entries given in ascending order, filling leaves and inner nodes
    /// completely (as a checkpoint is loaded). O(n), no comparisons.
    struct Builder {
        private var levels: [[Node]] = [[]]
        private var leaf = Node(leaf: true)
        private(set) var count = 0

        init() {}

        mutating func append(_ key: UnsafeRawBufferPointer, _ pk: UInt64) {
            if leaf.count == OrderedIndex.leafCapacity {
                push(leaf, level: 0)
                leaf = Node(leaf: true)
            }
            leaf.appendLeafEntry(IndexKeyProbe(key), pk)
            count += 1
        }

        /// Appends a whole leaf, whose entries follow everything appended so far (a
        /// parallel build's leaves, in order). Every leaf but the last should be full.
        mutating func append(leaf node: Node) {
            precondition(leaf.count == 0, "whole leaves and single entries are not mixed")
            push(node, level: 0)
            count += node.count
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

    /// Fills full leaves from entries given in ascending order, one entry at a time, with
    /// nothing but stores: the inner loop of a parallel checkpoint load. A key is given as its
    /// first eight bytes, already packed big-endian (`IndexKeyProbe.prefix`), its length, and
    /// the bytes after the eighth; tails gather in a scratch buffer and become the leaf's
    /// `tails` in one copy when the leaf is full. Call `finish()` once, at the end: it returns
    /// the leaves and frees the scratch buffer.
    struct LeafFiller {
        private var leaf = Node(leaf: true)
        // The current leaf's storage and fill, held here so that an entry costs only stores.
        private var count = 0
        private var prefixes: UnsafeMutablePointer<UInt64>
        private var lengths: UnsafeMutablePointer<UInt16>
        private var primaryKeys: UnsafeMutablePointer<UInt64>
        private var tailEnds: UnsafeMutablePointer<UInt32>?
        /// The tail length of the leaf's first entry: every entry's while `tailEnds` is nil.
        private var width = 0
        private var used = 0
        private let scratch = UnsafeMutableRawPointer.allocate(
            byteCount: OrderedIndex.leafCapacity * JournalFormat.maxIndexKeyLength, alignment: 8)
        private var leaves: [Node] = []

        init(expectedEntries: Int) {
            leaves.reserveCapacity(expectedEntries / OrderedIndex.leafCapacity + 1)
            prefixes = leaf.prefixes
            lengths = leaf.lengths
            primaryKeys = leaf.primaryKeys
        }

        @inline(always)
        mutating func append(prefix: UInt64, length: Int, tail: UnsafeRawPointer, _ pk: UInt64) {
            if count == OrderedIndex.leafCapacity { flush() }
            let i = count
            prefixes[i] = prefix
            lengths[i] = UInt16(truncatingIfNeeded: length)
            primaryKeys[i] = pk
            let extra = max(0, length - 8)
            if i == 0 {
                width = extra
            } else if tailEnds == nil && extra != width {
                // The first tail of another length: each entry's end from here on, those
                // before from the common width.
                tailEnds = Node.tailEnds(width: width, count: i)
            }
            if extra > 0 {
                if extra <= 16 {
                    for j in 0..<extra {
                        (scratch + used + j).storeBytes(
                            of: tail.load(fromByteOffset: j, as: UInt8.self), as: UInt8.self)
                    }
                } else {
                    (scratch + used).copyMemory(from: tail, byteCount: extra)
                }
                used += extra
            }
            if let ends = tailEnds { ends[i] = UInt32(truncatingIfNeeded: used) }
            count = i + 1
        }

        private mutating func flush() {
            leaf.count = count
            if let tailEnds {
                leaf.tailEnds = tailEnds
            } else {
                // Every tail of one width (fixed-width keys): each at `i * width`, no ends.
                leaf.tailWidth = width
            }
            if used > 0 { leaf.tails = Array(UnsafeRawBufferPointer(start: scratch, count: used)) }
            leaves.append(leaf)
            leaf = Node(leaf: true)
            prefixes = leaf.prefixes
            lengths = leaf.lengths
            primaryKeys = leaf.primaryKeys
            tailEnds = nil
            count = 0
            used = 0
            width = 0
        }

        mutating func finish() -> [Node] {
            if count > 0 { flush() }
            scratch.deallocate()
            return leaves
        }
    }
}
