#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

extension OrderedIndex {
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

}
