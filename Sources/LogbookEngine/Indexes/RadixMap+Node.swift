// The trie's nodes: inner nodes with 64 children, leaves with 64 slots (on the heap, in a
// chunk, or in a checkpoint's mapping), and the leaves a mapping holds.
extension RadixMap {
    final class Node {
        // Exclusivity is guaranteed by construction: a node is mutated only by the writer,
        // only while uniquely referenced; the runtime checks would cost a third of the time.
        @exclusivity(unchecked) var children: [Node?]
        /// A leaf's 64 slots (an inner node has none): on the heap, carved from a `SlotChunk`
        /// by a bulk load (one allocation a leaf fewer, and pages the kernel may make huge),
        /// or in a checkpoint file's mapping (`FileImage`), used in place.
        let slots: UnsafeMutablePointer<Value>
        /// What holds `slots` when they are not on the heap (a `SlotChunk` or a `FileImage`),
        /// kept alive by this leaf; nil when they are on the heap.
        let owner: AnyObject?
        @exclusivity(unchecked) var occupied: Int
        /// A parent of leaves that a checkpoint's mapping holds, not yet made nodes (its
        /// `children` are empty until then): how an open of ten million keys attaches 2,441
        /// parents rather than 156,000 leaves. Never shared by two parents (a copy of the parent
        /// makes nodes of them), and made nodes before the parent's first write.
        @exclusivity(unchecked) var mapped: MappedLeaves?

        init(leaf: Bool, arena: SlotArena? = nil) {
            if leaf {
                children = []
                if let (storage, chunk) = arena?.carve(RadixMap.fanout * MemoryLayout<Value>.stride) {
                    slots = storage.bindMemory(to: Value.self, capacity: RadixMap.fanout)
                    owner = chunk
                } else {
                    slots = .allocate(capacity: RadixMap.fanout)
                    owner = nil
                }
                slots.initialize(repeating: .absent, count: RadixMap.fanout)
            } else {
                children = Array(repeating: nil, count: RadixMap.fanout)
                slots = noSlots.assumingMemoryBound(to: Value.self)
                owner = nil
            }
            occupied = 0
        }

        /// A leaf whose 64 slots, `occupied` of them present, are already written in memory
        /// that `owner` holds (a checkpoint's leaf used in place).
        init(slots: UnsafeMutablePointer<Value>, owner: AnyObject, occupied: Int) {
            children = []
            self.slots = slots
            self.owner = owner
            self.occupied = occupied
        }

        /// A parent of leaves in a checkpoint's mapping, `occupied` of them present in `mapped`.
        init(mapped: MappedLeaves, occupied: Int) {
            children = []
            slots = noSlots.assumingMemoryBound(to: Value.self)
            owner = nil
            self.occupied = occupied
            self.mapped = mapped
        }

        init(copying other: Node) {
            children = other.mapped.map { $0.nodes() } ?? other.children
            if other.isLeaf {
                other.awaitSlots()
                slots = .allocate(capacity: RadixMap.fanout)
                slots.initialize(from: other.slots, count: RadixMap.fanout)
            } else {
                slots = noSlots.assumingMemoryBound(to: Value.self)
            }
            owner = nil
            occupied = other.occupied
        }

        deinit {
            guard isLeaf else { return }
            slots.deinitialize(count: RadixMap.fanout)
            // Carved or mapped slots go back with their owner, when its last leaf is gone.
            if owner == nil { slots.deallocate() }
        }

        /// By the slots' address, not `children.isEmpty`: a mapped parent has no children
        /// yet, and a generic array's emptiness asked in `deinit` looked up its metadata each
        /// time (a quarter of the time to free ten million keys' index).
        @inline(__always)
        var isLeaf: Bool { UnsafeMutableRawPointer(slots) != noSlots }

        /// Whether the slots are in memory that `attachLeaves` was given (a checkpoint's
        /// mapping), not the heap or a `SlotChunk`: such a leaf is copied to the heap before its
        /// first write, uniquely referenced or not (the mapped parent it came from, which a
        /// snapshot may still read, points at the same slots).
        @inline(__always)
        var slotsAreMapped: Bool { owner.map { type(of: $0) != SlotChunk.self } ?? false }

        /// Returns once a leaf's slots may be read: at once, unless they are in a checkpoint
        /// whose slot frames are still being checked (`FileImage.awaitSlots(_:)`).
        @inline(__always)
        func awaitSlots() {
            if let owner, type(of: owner) == FileImage.self {
                unsafeDowncast(owner, to: FileImage.self).awaitSlots(slots)
            }
        }

        /// Leaf `i` of a parent of leaves: its slots (which may be read) and how many are
        /// present.
        @inline(__always)
        func leaf(_ i: Int) -> (slots: UnsafeMutablePointer<Value>, occupied: Int)? {
            if let mapped {
                guard let slots = mapped.slots[i] else { return nil }
                mapped.file?.awaitSlots(slots)
                return (slots, Int(mapped.counts[i]))
            }
            guard let child = children[i] else { return nil }
            child.awaitSlots()
            return (child.slots, child.occupied)
        }

        /// Makes nodes of a mapped parent's leaves; the parent is uniquely referenced.
        @inline(__always)
        func materialize() {
            guard let mapped else { return }
            children = mapped.nodes()
            self.mapped = nil
        }
    }

    /// The leaves of one parent that a checkpoint's mapping holds, used in place: the slots of
    /// each of its 64 leaves (nil where there is none) and how many keys each holds. Written
    /// only while built (`attachLeaves`), then read by any thread.
    final class MappedLeaves {
        let slots: UnsafeMutablePointer<UnsafeMutablePointer<Value>?>
        let counts: UnsafeMutablePointer<UInt8>
        /// The mapping's owner, which each leaf made a node keeps alive in its turn.
        let image: AnyObject
        /// The same, when it is a checkpoint's image: reads wait for its slot check.
        let file: FileImage?

        init(image: AnyObject) {
            self.image = image
            file = image as? FileImage
            slots = .allocate(capacity: RadixMap.fanout)
            slots.initialize(repeating: nil, count: RadixMap.fanout)
            counts = .allocate(capacity: RadixMap.fanout)
            counts.initialize(repeating: 0, count: RadixMap.fanout)
        }

        deinit {
            slots.deallocate()
            counts.deallocate()
        }

        /// The leaves as nodes (over the same slots), for a parent's children.
        func nodes() -> [Node?] {
            (0..<RadixMap.fanout).map { i in
                slots[i].map { Node(slots: $0, owner: image, occupied: Int(counts[i])) }
            }
        }
    }
}
