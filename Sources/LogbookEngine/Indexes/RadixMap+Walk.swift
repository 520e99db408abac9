// Walks of a RadixMap: entries in key order, from a key, collected, the last key, and the
// memory its nodes take.
extension RadixMap {
    /// Visits the entries of one keyspace in ascending key order, starting at `from` (a full
    /// key); stops when `body` returns false. Returns false if stopped.
    @discardableResult
    func forEach(inKeyspace keyspace: UInt16, from: UInt64 = 0, _ body: (UInt64, Value) throws -> Bool) rethrows -> Bool
    {
        guard let si = spaceIndex(keyspace), let root = spaces[si].root else { return true }
        let base = EngineKey.first(inKeyspace: keyspace).rawValue
        // A start in an earlier keyspace starts at id 0; one in a later keyspace visits nothing.
        let startKey = EngineKey(rawValue: from)
        let start = startKey.keyspace == keyspace ? startKey.id : (startKey.keyspace > keyspace ? UInt64.max : 0)
        if start == UInt64.max { return true }
        return try Self.visit(
            root, prefix: 0, shift: Self.bits * (spaces[si].height - 1), start: start, base: base, body)
    }

    static func visit(
        _ node: Node, prefix: UInt64, shift: Int, start: UInt64, base: UInt64, _ body: (UInt64, Value) throws -> Bool
    ) rethrows -> Bool {
        func visitLeaf(_ slots: UnsafeMutablePointer<Value>, prefix: UInt64) throws -> Bool {
            var i = prefix + 64 <= start ? 64 : (start > prefix ? Int(start - prefix) : 0)
            while i < 64 {
                let v = slots[i]
                if !v.isAbsent, try !body(base | (prefix + UInt64(i)), v) { return false }
                i += 1
            }
            return true
        }
        if shift == 0 {
            node.awaitSlots()
            return try visitLeaf(node.slots, prefix: prefix)
        }
        let span = UInt64(1) << UInt64(shift)
        for i in 0..<64 {
            let childPrefix = prefix + UInt64(i) * span
            if childPrefix + span <= start { continue }
            if shift == bits {
                guard let leaf = node.leaf(i) else { continue }
                if try !visitLeaf(leaf.slots, prefix: childPrefix) { return false }
                continue
            }
            guard let child = node.children[i] else { continue }
            if try !visit(child, prefix: childPrefix, shift: shift - bits, start: start, base: base, body) {
                return false
            }
        }
        return true
    }

    /// Writes the entries of one keyspace with keys in `from...through` (full keys), in
    /// ascending order, into `keys` and `values` (as many as they hold); returns how many. The
    /// loop a scan runs per batch, without a closure or an array append per entry.
    func collect(
        inKeyspace keyspace: UInt16, from: UInt64, through: UInt64, keys: UnsafeMutableBufferPointer<UInt64>,
        values: UnsafeMutableBufferPointer<Value>
    ) -> Int {
        let limit = min(keys.count, values.count)
        guard let si = spaceIndex(keyspace), let root = spaces[si].root, limit > 0 else { return 0 }
        let base = EngineKey.first(inKeyspace: keyspace).rawValue
        let fromKey = EngineKey(rawValue: from)
        let start = fromKey.keyspace == keyspace ? fromKey.id : (fromKey.keyspace > keyspace ? UInt64.max : 0)
        let throughKey = EngineKey(rawValue: through)
        let end = throughKey.keyspace == keyspace ? throughKey.id : (throughKey.keyspace > keyspace ? UInt64.max : 0)
        guard start != .max, start <= end, throughKey.keyspace >= keyspace else { return 0 }
        var added = 0
        func walkLeaf(_ slots: UnsafeMutablePointer<Value>, prefix: UInt64) -> Bool {
            var i = prefix + 64 <= start ? 64 : (start > prefix ? Int(start - prefix) : 0)
            while i < 64 {
                let id = prefix + UInt64(i)
                if id > end { return false }
                let v = slots[i]
                if !v.isAbsent {
                    keys[added] = base | id
                    values[added] = v
                    added += 1
                    if added == limit { return false }
                }
                i += 1
            }
            return true
        }
        func walk(_ node: Node, prefix: UInt64, shift: Int) -> Bool {
            if shift == 0 {
                node.awaitSlots()
                return walkLeaf(node.slots, prefix: prefix)
            }
            let span = UInt64(1) << UInt64(shift)
            for i in 0..<64 {
                let childPrefix = prefix + UInt64(i) * span
                if childPrefix + span <= start { continue }
                if childPrefix > end { return false }
                if shift == Self.bits {
                    guard let leaf = node.leaf(i) else { continue }
                    if !walkLeaf(leaf.slots, prefix: childPrefix) { return false }
                    continue
                }
                guard let child = node.children[i] else { continue }
                if !walk(child, prefix: childPrefix, shift: shift - Self.bits) { return false }
            }
            return true
        }
        _ = walk(root, prefix: 0, shift: Self.bits * (spaces[si].height - 1))
        return added
    }

    /// The largest key of a keyspace, or nil when it holds none: one walk down the rightmost
    /// occupied children.
    func lastKey(inKeyspace keyspace: UInt16) -> UInt64? {
        guard let si = spaceIndex(keyspace), let root = spaces[si].root, spaces[si].count > 0 else { return nil }
        let base = EngineKey.first(inKeyspace: keyspace).rawValue
        func lastOf(_ slots: UnsafeMutablePointer<Value>, prefix: UInt64) -> UInt64? {
            for i in stride(from: 63, through: 0, by: -1) where !slots[i].isAbsent {
                return base | (prefix + UInt64(i))
            }
            return nil
        }
        func last(_ node: Node, prefix: UInt64, shift: Int) -> UInt64? {
            if shift == 0 {
                node.awaitSlots()
                return lastOf(node.slots, prefix: prefix)
            }
            let span = UInt64(1) << UInt64(shift)
            for i in stride(from: 63, through: 0, by: -1) {
                if shift == Self.bits {
                    guard let leaf = node.leaf(i) else { continue }
                    if let found = lastOf(leaf.slots, prefix: prefix + UInt64(i) * span) { return found }
                    continue
                }
                guard let child = node.children[i] else { continue }
                if let found = last(child, prefix: prefix + UInt64(i) * span, shift: shift - Self.bits) { return found }
            }
            return nil
        }
        return last(root, prefix: 0, shift: Self.bits * (spaces[si].height - 1))
    }

    /// Visits every entry of every keyspace, keyspaces in ascending order.
    @discardableResult
    func forEachEntry(_ body: (UInt64, Value) throws -> Bool) rethrows -> Bool {
        for ks in spaces.map(\.id).sorted() {
            if try !forEach(inKeyspace: ks, body) { return false }
        }
        return true
    }

    /// An estimate of the heap bytes the map's nodes take (for statistics).
    func estimatedBytes(valueSize: Int = MemoryLayout<Value>.stride) -> Int {
        var total = 0
        func walk(_ node: Node) {
            if node.isLeaf {
                // The node, and its slots (with the heap's 16 bytes when not in a chunk).
                total += 48 + (node.owner == nil ? 16 : 0) + 64 * valueSize
            } else if let mapped = node.mapped {
                // The parent and its table; each leaf's slots, in the checkpoint's mapping.
                total += 48 + 48 + 64 * 9
                for i in 0..<64 where mapped.slots[i] != nil { total += 64 * valueSize }
            } else {
                total += 48 + 32 + 64 * 8
                for case let child? in node.children { walk(child) }
            }
        }
        for space in spaces { if let root = space.root { walk(root) } }
        return total
    }
}
