/// A value that can live in a `RadixMap` slot, with a distinguished "absent" value so that
/// leaves are plain arrays without optionals.
protocol RadixSlot {
    static var absent: Self { get }
    var isAbsent: Bool { get }
}

extension UInt64: RadixSlot {
    static var absent: UInt64 { 0 }
    var isAbsent: Bool { self == 0 }
}

/// What an inner node's `slots` points to: it has none, and never reads or frees this (one
/// allocation fewer per inner node). `nonisolated(unsafe)`: never written, never read.
nonisolated(unsafe) let noSlots = UnsafeMutableRawPointer.allocate(byteCount: 16, alignment: 16)

/// A persistent map from 64-bit keys to values: a copy is O(1) and shares all nodes; a write
/// copies only the nodes on its path that are shared (copy-on-write through
/// `isKnownUniquelyReferenced`). Snapshots are copies.
///
/// Keys are split into a 16-bit keyspace (high bits) and a 48-bit id. Each keyspace is a radix
/// trie of fan-out 64 whose height grows with its largest id, so dense ids (as the object layer
/// allocates them) cost about 8 bytes of leaf per key, and each keyspace keeps its own count.
struct RadixMap<Value: RadixSlot> {
    static var bits: Int { 6 }
    static var fanout: Int { 64 }

    struct Space {
        var id: UInt16
        var root: Node?
        /// Number of levels; the trie holds ids below 64^height.
        var height: Int
        var count: Int
    }

    private(set) var spaces: [Space] = []

    /// A bulk load of at least this many keys puts its leaves in chunks (half a chunk's
    /// worth of 8-byte slots, densely filled).
    static var chunkedLoadKeys: Int { SlotChunk.size / 16 }

    var count: Int { spaces.reduce(0) { $0 + $1.count } }

    func count(inKeyspace keyspace: UInt16) -> Int {
        spaceIndex(keyspace).map { spaces[$0].count } ?? 0
    }

    var keyspaces: [UInt16] { spaces.filter { $0.count > 0 }.map(\.id) }

    @inline(__always)
    func spaceIndex(_ id: UInt16) -> Int? {
        // Few keyspaces (one per entity or relationship): a linear scan beats hashing.
        for i in spaces.indices where spaces[i].id == id { return i }
        return nil
    }

    @inline(__always)
    static func split(_ key: UInt64) -> (UInt16, UInt64) {
        (EngineKey(rawValue: key).keyspace, EngineKey(rawValue: key).id)
    }

    subscript(key: UInt64) -> Value? {
        guard let slots = leafSlots(for: key) else { return nil }
        let value = slots[Int(key & 63)]
        return value.isAbsent ? nil : value
    }

    /// The slots of the leaf that holds `key`'s slot, or nil when there is none.
    @inline(__always)
    func leafSlots(for key: UInt64) -> UnsafeMutablePointer<Value>? {
        let (ks, id) = Self.split(key)
        guard let si = spaceIndex(ks) else { return nil }
        let height = spaces[si].height
        guard var node = spaces[si].root, id >> UInt64(Self.bits * height) == 0 || height >= 8 else { return nil }
        var shift = Self.bits * (height - 1)
        if shift == 0 {
            node.awaitSlots()
            return node.slots
        }
        while shift > Self.bits {
            guard let child = node.children[Int((id >> UInt64(shift)) & 63)] else { return nil }
            node = child
            shift -= Self.bits
        }
        return node.leaf(Int((id >> UInt64(Self.bits)) & 63))?.slots
    }

    /// The leaf that holds `key`'s slot: its slots, what holds them (nil for the heap, a
    /// `SlotChunk`, or the checkpoint's `FileImage` for a leaf used in place) and how many are
    /// present. For tests and checks.
    func leafInfo(for key: UInt64) -> (slots: UnsafeMutablePointer<Value>, owner: AnyObject?, occupied: Int)? {
        let (ks, id) = Self.split(key)
        guard let si = spaceIndex(ks), var node = spaces[si].root else { return nil }
        guard id >> UInt64(Self.bits * spaces[si].height) == 0 || spaces[si].height >= 8 else { return nil }
        var shift = Self.bits * (spaces[si].height - 1)
        while shift > 0 {
            let i = Int((id >> UInt64(shift)) & 63)
            if shift == Self.bits, let mapped = node.mapped {
                guard let slots = mapped.slots[i] else { return nil }
                mapped.file?.awaitSlots(slots)
                return (slots, mapped.image, Int(mapped.counts[i]))
            }
            guard let child = node.children[i] else { return nil }
            node = child
            shift -= Self.bits
        }
        node.awaitSlots()
        return (node.slots, node.owner, node.occupied)
    }

    /// The values of many keys (absent ones as `.absent`), in the keys' order. Keys that share a
    /// leaf one after the other (ascending ids, as fetches ask) share one walk down the trie.
    func values(forKeys keys: ArraySlice<UInt64>) -> [Value] {
        // An empty array is the shared empty storage, whose count the initializer would write
        // (a write the thread sanitizer reports when two threads make one at once).
        guard !keys.isEmpty else { return [] }
        return [Value](unsafeUninitializedCapacity: keys.count) { out, made in
            var prefix = UInt64.max
            var leaf: UnsafeMutablePointer<Value>?
            for (i, key) in keys.enumerated() {
                if key >> Self.bits != prefix {
                    prefix = key >> Self.bits
                    leaf = leafSlots(for: key)
                }
                (out.baseAddress! + i).initialize(to: leaf?[Int(key & 63)] ?? .absent)
                made = i + 1
            }
        }
    }

    /// Sets `value` for `key` (which must not be absent); returns the previous value.
    @discardableResult
    mutating func set(_ key: UInt64, _ value: Value) -> Value? {
        modify(key) { slot in
            let old = slot
            slot = value
            return old.isAbsent ? nil : old
        }
    }

    @discardableResult
    mutating func remove(_ key: UInt64) -> Value? {
        let (ks, id) = Self.split(key)
        guard let si = spaceIndex(ks), spaces[si].root != nil else { return nil }
        guard spaces[si].height >= 8 || id >> UInt64(Self.bits * spaces[si].height) == 0 else { return nil }
        guard self[key] != nil else { return nil }
        return modify(key) { slot in
            let old = slot
            slot = .absent
            return old
        }
    }

    /// Calls `body` with the slot of `key` (absent if none), creating the path, and keeps the
    /// per-node and per-keyspace counts in step with what `body` leaves in the slot.
    mutating func modify<R>(_ key: UInt64, _ body: (inout Value) -> R) -> R {
        let (ks, id) = Self.split(key)
        let si = spaceIndexCreating(ks)
        return spaces.withUnsafeMutableBufferPointer { buffer in
            Self.modify(&buffer[si], id: id, body)
        }
    }

    /// The index of a keyspace's space, appending an empty one if there is none.
    private mutating func spaceIndexCreating(_ ks: UInt16) -> Int {
        if let found = spaceIndex(ks) { return found }
        spaces.append(Space(id: ks, root: nil, height: 1, count: 0))
        return spaces.count - 1
    }

    /// Grows the space until `id` fits, and makes its root uniquely referenced.
    private static func prepareRoot(_ space: inout Space, for id: UInt64, arena: SlotArena? = nil) {
        while space.height < 8 && id >> UInt64(bits * space.height) != 0 {
            if let old = space.root {
                let parent = Node(leaf: false)
                parent.children[0] = old
                parent.occupied = 1
                space.root = parent
            }
            space.height += 1
        }
        if space.root == nil { space.root = Node(leaf: space.height == 1, arena: arena) }
        if !isKnownUniquelyReferenced(&space.root!) || space.root!.slotsAreMapped {
            space.root = Node(copying: space.root!)
        }
    }

    private static func modify<R>(_ space: inout Space, id: UInt64, _ body: (inout Value) -> R) -> R {
        prepareRoot(&space, for: id)
        var delta = 0
        let result = modifyNode(space.root!, id: id, shift: bits * (space.height - 1), delta: &delta, body)
        space.count += delta
        if space.count == 0 {
            space.root = nil
            space.height = 1
        }
        return result
    }

    /// `node` is uniquely referenced by the caller's path.
    private static func modifyNode<R>(
        _ node: Node, id: UInt64, shift: Int, delta: inout Int, _ body: (inout Value) -> R
    ) -> R {
        if shift == 0 {
            let i = Int(id & 63)
            let wasAbsent = node.slots[i].isAbsent
            let result = body(&node.slots[i])
            let isAbsent = node.slots[i].isAbsent
            if wasAbsent != isAbsent {
                delta = isAbsent ? -1 : 1
                node.occupied += delta
            }
            return result
        }
        let i = Int((id >> UInt64(shift)) & 63)
        let child = uniqueChild(of: node, at: i, leaf: shift == bits)
        let result = modifyNode(child, id: id, shift: shift - bits, delta: &delta, body)
        if child.occupied == 0 {
            node.children[i] = nil
            node.occupied -= 1
        }
        return result
    }

    /// Child `i` of a uniquely referenced node, created if missing, copied if shared.
    @inline(__always)
    private static func uniqueChild(of node: Node, at i: Int, leaf: Bool, arena: SlotArena? = nil) -> Node {
        node.materialize()
        if node.children[i] == nil {
            node.children[i] = Node(leaf: leaf, arena: arena)
            node.occupied += 1
        } else if !isKnownUniquelyReferenced(&node.children[i]!) || (leaf && node.children[i]!.slotsAreMapped) {
            node.children[i] = Node(copying: node.children[i]!)
        }
        return node.children[i]!
    }

    /// The leaf that holds `key`'s slot, made uniquely referenced along its whole path (so the
    /// caller may write its slots until the map is next copied). The caller keeps counts in
    /// step with `addCount` and `Node.occupied`, and may only make slots non-absent.
    /// A new leaf's slots come from `arena` when one is given.
    mutating func uniqueLeaf(for key: UInt64, arena: SlotArena? = nil) -> Node {
        let (ks, id) = Self.split(key)
        let si = spaceIndexCreating(ks)
        return spaces.withUnsafeMutableBufferPointer { buffer in
            let bits = Self.bits
            Self.prepareRoot(&buffer[si], for: id, arena: arena)
            var node = buffer[si].root!
            var shift = bits * (buffer[si].height - 1)
            while shift > 0 {
                node = Self.uniqueChild(
                    of: node, at: Int((id >> UInt64(shift)) & 63), leaf: shift == bits, arena: arena)
                shift -= bits
            }
            return node
        }
    }

    mutating func addCount(keyspace: UInt16, _ delta: Int) {
        if let si = spaceIndex(keyspace) { spaces[si].count += delta }
    }

    /// The leaf a run of `modifyAdding` calls last changed: the next key of the same leaf is
    /// changed without a descent from the root.
    ///
    /// Valid only while nothing else changes or copies the map; a caller that changes it any
    /// other way starts a new cursor (`LeafCursor()`).
    struct LeafCursor {
        fileprivate var keyspace: UInt16 = 0
        fileprivate var prefix: UInt64 = .max
        fileprivate var leaf: Node?

        init() {}
    }

    /// `modify` for a change that leaves the key's value present (a set that gains members):
    /// keys that share a leaf with the key before them, through the same `cursor`, are changed
    /// in that leaf directly. Keys in ascending order make one descent a leaf.
    mutating func modifyAdding(_ key: UInt64, cursor: inout LeafCursor, _ body: (inout Value) -> Void) {
        let (ks, id) = Self.split(key)
        let prefix = id >> UInt64(Self.bits)
        let leaf: Node
        if let known = cursor.leaf, cursor.prefix == prefix, cursor.keyspace == ks {
            leaf = known
        } else {
            leaf = uniqueLeaf(for: key)
            cursor = LeafCursor()
            cursor.keyspace = ks
            cursor.prefix = prefix
            cursor.leaf = leaf
        }
        let i = Int(id & UInt64(Self.fanout - 1))
        let wasAbsent = leaf.slots[i].isAbsent
        body(&leaf.slots[i])
        precondition(!leaf.slots[i].isAbsent, "modifyAdding leaves the value present")
        if wasAbsent {
            leaf.occupied += 1
            addCount(keyspace: ks, 1)
        }
    }

    /// Puts the values of `count` keys of one keyspace, which `next` gives (called with 0, 1, …)
    /// in strictly ascending order of id, a leaf at a time: one descent for each run of
    /// neighbours, and no check of the leaf's uniqueness per key. A key already present has its
    /// value replaced. This is how a checkpoint's primary index is loaded.
    mutating func fillAscending(
        _ count: Int, keyspace: UInt16, _ next: (Int) throws -> (id: UInt64, value: Value)
    ) rethrows {
        guard count > 0 else { return }
        // The leaves of a large load share chunks (`SlotChunk`); a small one's stay on the heap,
        // where a chunk's 2 MiB page would outweigh them.
        let arena = count >= Self.chunkedLoadKeys ? SlotArena() : nil
        var (id, value) = try next(0)
        var n = 1
        while true {
            let leaf = uniqueLeaf(for: EngineKey(keyspace: keyspace, id: id).rawValue, arena: arena)
            let prefix = id >> 6
            var added = 0
            let slots = leaf.slots
            var more = true
            while true {
                let i = Int(id & 63)
                if slots[i].isAbsent { added += 1 }
                slots[i] = value
                guard n < count else {
                    more = false
                    break
                }
                (id, value) = try next(n)
                n += 1
                if id >> 6 != prefix { break }
            }
            leaf.occupied += added
            addCount(keyspace: keyspace, added)
            if !more { return }
        }
    }

    /// Sets many keys, reusing the leaf of the previous key when the next falls in it (as
    /// ascending keys do), so that a run of 64 neighbours costs one descent.
    /// `previous` is called with the position, key and old value of each key that had one.
    mutating func setMany(
        _ count: Int, key: (Int) -> UInt64, value: (Int) -> Value, previous: (Int, UInt64, Value) throws -> Void
    ) rethrows {
        var leaf: Node?
        var leafPrefix: UInt64 = .max
        var added = 0
        var addedKeyspace: UInt16 = 0
        for n in 0..<count {
            let k = key(n)
            if k >> 6 != leafPrefix || leaf == nil {
                if added != 0 {
                    addCount(keyspace: addedKeyspace, added)
                    added = 0
                }
                leaf = uniqueLeaf(for: k)
                leafPrefix = k >> 6
                addedKeyspace = EngineKey(rawValue: k).keyspace
            }
            let i = Int(k & 63)
            // In place (the leaf is unique here): no uniqueness check of its array per key.
            let slots = leaf!.slots
            let old = slots[i]
            slots[i] = value(n)
            if old.isAbsent {
                leaf!.occupied += 1
                added += 1
            } else {
                try previous(n, k, old)
            }
        }
        if added != 0 { addCount(keyspace: addedKeyspace, added) }
    }

}

// Nodes are mutated only through a path on which every node is uniquely referenced
// (`isKnownUniquelyReferenced`), so a node reachable from more than one map value (a snapshot
// and the writer) is never mutated again: sharing copies between threads is safe.
extension RadixMap: @unchecked Sendable {}

extension RadixMap where Value == UInt64 {
    /// Visits the leaves of one keyspace in ascending order: each leaf's number (its ids
    /// divided by 64), its 64 slots and how many of them are present. How a checkpoint
    /// writes the leaves it keeps whole.
    func forEachLeaf(inKeyspace keyspace: UInt16, _ body: (UInt64, UnsafePointer<UInt64>, Int) throws -> Void) rethrows
    {
        guard let si = spaceIndex(keyspace), let root = spaces[si].root else { return }
        func visit(_ node: Node, prefix: UInt64, shift: Int) throws {
            if shift == 0 {
                node.awaitSlots()
                try body(prefix >> UInt64(Self.bits), node.slots, node.occupied)
                return
            }
            let span = UInt64(1) << UInt64(shift)
            for i in 0..<64 {
                if shift == Self.bits {
                    guard let leaf = node.leaf(i) else { continue }
                    try body((prefix + UInt64(i) * span) >> UInt64(Self.bits), leaf.slots, leaf.occupied)
                    continue
                }
                guard let child = node.children[i] else { continue }
                try visit(child, prefix: prefix + UInt64(i) * span, shift: shift - Self.bits)
            }
        }
        try visit(root, prefix: 0, shift: Self.bits * (spaces[si].height - 1))
    }

    /// Puts whole leaves into the map: leaf `numbers[k]` of `keyspace` (ids `number * 64` up
    /// to `number * 64 + 63`, ascending), `counts[k]` of its slots present, whose slots `next`
    /// gives (called once a leaf, in order) in memory `owner` holds. No leaf may be in the map
    /// yet. How a checkpoint's leaves are used in place at open. The parent of a run of
    /// leaves is found once, not once a leaf, and in a trie of three levels or more it is a
    /// mapped parent (`MappedLeaves`): the leaves become nodes only when the parent is first
    /// written (an open of ten million keys attaches 2,441 parents, not 156,000 leaf nodes).
    mutating func attachLeaves(
        keyspace: UInt16, owner: AnyObject, numbers: [UInt64], counts: [UInt8],
        slots next: () -> UnsafeMutablePointer<Value>
    ) {
        precondition(numbers.count == counts.count)
        let si = spaceIndexCreating(keyspace)
        // The node above the last leaf attached, its table when it is a mapped parent, and the
        // leaf numbers it holds (number >> 6). Unretained: the map holds it, and no descent
        // replaces it while it is used (a descent happens only to find the next parent, which
        // replaces this one here). A retain and a release of it for each leaf were a fifth of
        // an open of a million keys.
        var parent: Unmanaged<Node>?
        var table: Unmanaged<MappedLeaves>?
        var parentPrefix = UInt64.max
        var total = 0
        defer { spaces[si].count += total }
        func place(_ slots: UnsafeMutablePointer<Value>, _ occupied: Int, at i: Int, in node: Node) {
            if let mapped = node.mapped {
                precondition(mapped.slots[i] == nil, "a checkpoint leaf attached twice")
                mapped.slots[i] = slots
                mapped.counts[i] = UInt8(occupied)
            } else {
                precondition(node.children[i] == nil, "a checkpoint leaf attached twice")
                node.children[i] = Node(slots: slots, owner: owner, occupied: occupied)
            }
            node.occupied += 1
        }
        // The trie as high as the last leaf needs from the start: the first leaves' parent is
        // then a mapped parent too, not a node made before the trie grew above it.
        if let last = numbers.last {
            spaces.withUnsafeMutableBufferPointer { Self.prepareRoot(&$0[si], for: last << UInt64(Self.bits) | 63) }
        }
        numbers.withUnsafeBufferPointer { numbers in
            counts.withUnsafeBufferPointer { counts in
                for k in 0..<numbers.count {
                    let number = numbers[k]
                    let occupied = Int(counts[k])
                    let slots = next()
                    total += occupied
                    if let parent, number >> UInt64(Self.bits) == parentPrefix {
                        let i = Int(number & 63)
                        if let table {
                            table._withUnsafeGuaranteedRef { table in
                                precondition(table.slots[i] == nil, "a checkpoint leaf attached twice")
                                table.slots[i] = slots
                                table.counts[i] = UInt8(occupied)
                            }
                            parent._withUnsafeGuaranteedRef { $0.occupied += 1 }
                        } else {
                            parent._withUnsafeGuaranteedRef { place(slots, occupied, at: i, in: $0) }
                        }
                        continue
                    }
                    let id = number << UInt64(Self.bits)
                    let above = spaces.withUnsafeMutableBufferPointer { buffer -> Node? in
                        let bits = Self.bits
                        Self.prepareRoot(&buffer[si], for: id | 63)
                        if buffer[si].height == 1 {
                            precondition(buffer[si].count + total == occupied, "a checkpoint leaf attached twice")
                            buffer[si].root = Node(slots: slots, owner: owner, occupied: occupied)
                            return nil
                        }
                        var node = buffer[si].root!
                        var shift = bits * (buffer[si].height - 1)
                        // Down to the node above the leaves' parent (in a trie of two levels, the
                        // root is that parent, a node as any other).
                        while shift > 2 * bits {
                            node = Self.uniqueChild(of: node, at: Int((id >> UInt64(shift)) & 63), leaf: false)
                            shift -= bits
                        }
                        let i = Int((id >> UInt64(bits)) & 63)
                        if shift == 2 * bits {
                            let j = Int((id >> UInt64(shift)) & 63)
                            if node.children[j] == nil {
                                node.children[j] = Node(mapped: MappedLeaves(image: owner), occupied: 0)
                                node.occupied += 1
                                node = node.children[j]!
                            } else {
                                node = Self.uniqueChild(of: node, at: j, leaf: false)
                            }
                        }
                        place(slots, occupied, at: i, in: node)
                        return node
                    }
                    parent = above.map { Unmanaged.passUnretained($0) }
                    table = above?.mapped.map { Unmanaged.passUnretained($0) }
                    parentPrefix = number >> UInt64(Self.bits)
                }
            }
        }
    }

    /// Sets `new` where the current value is still `expected`; other keys (changed or removed
    /// since) stay as they are. Entries may come in any order; one walk down the trie for each
    /// run of entries in the same leaf (ascending keys make one run per leaf).
    mutating func replaceMany(_ entries: [(key: UInt64, expected: UInt64, new: UInt64)]) {
        var n = 0
        while n < entries.count {
            let prefix = entries[n].key >> Self.bits
            var end = n + 1
            while end < entries.count && entries[end].key >> Self.bits == prefix { end += 1 }
            // Only existing leaves are made unique (a missing one means the keys are gone).
            if leafSlots(for: entries[n].key) != nil {
                let leaf = uniqueLeaf(for: entries[n].key)
                // In place (the leaf is unique here): no uniqueness check of its array per key.
                let slots = leaf.slots
                for e in entries[n..<end] {
                    let i = Int(e.key & 63)
                    if slots[i] == e.expected { slots[i] = e.new }
                }
            }
            n = end
        }
    }
}
