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
            leaf.insertLeafEntry(at: leaf.count, IndexKeyProbe(key), pk)
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

}
