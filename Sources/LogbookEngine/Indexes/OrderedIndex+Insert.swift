#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

extension OrderedIndex {
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
            if !isKnownUniquelyReferenced(&node.children[last]) {
                node.children[last] = Node(copying: node.children[last])
            }
            node.counts[last] += 1
            node = node.children[last]
        }
        node.appendLeafEntry(probe, pk)
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
            guard node.count > 0, node.compareEntry(node.count - 1, entries.probe(0, block), entries.primaryKeys[0]) < 0
            else { return false }
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
                if !isKnownUniquelyReferenced(&node.children[last]) {
                    node.children[last] = Node(copying: node.children[last])
                }
                node.counts[last] += k
                node = node.children[last]
            }
            for j in i..<(i + k) {
                node.appendLeafEntry(entries.probe(j, block), entries.primaryKeys[j])
            }
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

    static func appendChild(_ child: Node, to parent: Node) {
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
        let c =
            node.compareChildMin(last, probe, pk) <= 0 ? last : max(0, node.lastChild(below: probe, pk, orEqual: true))
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

}
