import LogbookEngine

/// Objects by engine key: for each keyspace, pages of 1,024 slots indexed by serial number
/// (serials are dense), with a dictionary for serials too large to page.
struct RegistryTable {
    /// The pages of one keyspace: 1,024 entries each, allocated when first used.
    final class Space {
        // Touched only under the registry's lock.
        @exclusivity(unchecked) var pages: [UnsafeMutablePointer<Unmanaged<ManagedObject>?>?] = []

        deinit {
            for case let page? in pages {
                page.deinitialize(count: RegistryTable.pageSize)
                page.deallocate()
            }
        }

        @inline(__always)
        func page(_ p: Int, create: Bool) -> UnsafeMutablePointer<Unmanaged<ManagedObject>?>? {
            if p < pages.count, let page = pages[p] { return page }
            guard create else { return nil }
            if p >= pages.count { pages.append(contentsOf: repeatElement(nil, count: p + 1 - pages.count)) }
            let page = UnsafeMutablePointer<Unmanaged<ManagedObject>?>.allocate(capacity: RegistryTable.pageSize)
            page.initialize(repeating: nil, count: RegistryTable.pageSize)
            pages[p] = page
            return page
        }
    }

    // A few entities: a linear search of their keyspaces beats hashing.
    private var keyspaces: [UInt16] = []
    private var spaces: [Space] = []
    private var overflow: [UInt64: Unmanaged<ManagedObject>] = [:]
    private(set) var count = 0
    static let pageBits = 10
    static let pageSize = 1 << pageBits
    static let maxPagedSerial: UInt64 = 1 << 32

    var isEmpty: Bool { count == 0 }

    @inline(__always)
    private func space(_ ks: UInt16) -> Space? {
        for i in keyspaces.indices where keyspaces[i] == ks { return spaces[i] }
        return nil
    }

    subscript(key: UInt64) -> Unmanaged<ManagedObject>? {
        get {
            let serial = EngineKey(rawValue: key).id
            guard serial < Self.maxPagedSerial else { return overflow[key] }
            guard let space = space(EngineKey(rawValue: key).keyspace),
                let page = space.page(Int(serial >> UInt64(Self.pageBits)), create: false)
            else { return nil }
            return page[Int(serial) & (Self.pageSize - 1)]
        }
        set {
            let serial = EngineKey(rawValue: key).id
            if serial >= Self.maxPagedSerial {
                if let newValue {
                    if overflow.updateValue(newValue, forKey: key) == nil { count += 1 }
                } else if overflow.removeValue(forKey: key) != nil {
                    count -= 1
                }
                return
            }
            let ks = EngineKey(rawValue: key).keyspace
            // Removing from a keyspace with no pages has nothing to do.
            guard let found = newValue == nil ? space(ks) : space(creating: ks) else { return }
            guard let page = found.page(Int(serial >> UInt64(Self.pageBits)), create: newValue != nil) else { return }
            let slot = page + (Int(serial) & (Self.pageSize - 1))
            let old = slot.pointee
            slot.pointee = newValue
            count += (old == nil ? 0 : -1) + (newValue == nil ? 0 : 1)
        }
    }

    /// Where a key with a paged serial lives: its keyspace, page number and slot in the page.
    private struct PagedPosition {
        let keyspace: UInt16
        let page: Int
        let slot: Int

        /// Nil for a serial too large to page (those live in `overflow`).
        init?(_ key: UInt64) {
            let engineKey = EngineKey(rawValue: key)
            guard engineKey.id < RegistryTable.maxPagedSerial else { return nil }
            keyspace = engineKey.keyspace
            page = Int(engineKey.id >> UInt64(RegistryTable.pageBits))
            slot = Int(engineKey.id) & (RegistryTable.pageSize - 1)
        }
    }

    /// The pages of a keyspace, made when first needed.
    private mutating func space(creating keyspace: UInt16) -> Space {
        if let found = space(keyspace) { return found }
        let made = Space()
        keyspaces.append(keyspace)
        spaces.append(made)
        return made
    }

    /// Registers many objects (marking them registered) in three steps per object: its key
    /// (without retaining it), the page it belongs to (looked up again only when the keyspace
    /// or page changes from the previous object's, which in a bulk insert is once per 1,024),
    /// and the slot.
    mutating func insertAll(_ objects: [ManagedObject]) {
        var current: (keyspace: UInt16, page: Int, entries: UnsafeMutablePointer<Unmanaged<ManagedObject>?>)?
        for i in objects.indices {
            let object = Self.unretained(objects, i)
            let key = object._withUnsafeGuaranteedRef { o in
                o.flags.insert(.registered)
                return o.engineKey
            }
            guard let position = PagedPosition(key) else {
                self[key] = object
                continue
            }
            if current == nil || current!.page != position.page || current!.keyspace != position.keyspace {
                current = (
                    position.keyspace, position.page,
                    space(creating: position.keyspace).page(position.page, create: true)!
                )
            }
            let slot = current!.entries + position.slot
            if slot.pointee == nil { count += 1 }
            slot.pointee = object
        }
    }

    /// The `i`th object of `objects` as an unretained reference: read as a bare pointer from
    /// the array's storage (the array keeps the object alive), so that no retain/release pair
    /// is paid per object of a bulk insert.
    @inline(__always)
    private static func unretained(_ objects: [ManagedObject], _ i: Int) -> Unmanaged<ManagedObject> {
        objects.withUnsafeBufferPointer { list in
            let raw = UnsafeRawPointer(list.baseAddress!)
            return Unmanaged<ManagedObject>.fromOpaque(
                raw.load(fromByteOffset: i * MemoryLayout<ManagedObject>.stride, as: UnsafeRawPointer.self))
        }
    }

    /// Removes one entry, with a single walk to it.
    mutating func remove(_ key: UInt64) {
        let serial = EngineKey(rawValue: key).id
        guard serial < Self.maxPagedSerial else {
            if overflow.removeValue(forKey: key) != nil { count -= 1 }
            return
        }
        guard let space = space(EngineKey(rawValue: key).keyspace),
            let page = space.page(Int(serial >> UInt64(Self.pageBits)), create: false)
        else { return }
        let slot = page + (Int(serial) & (Self.pageSize - 1))
        if slot.pointee != nil {
            slot.pointee = nil
            count -= 1
        }
    }

    @discardableResult
    mutating func removeValue(forKey key: UInt64) -> Unmanaged<ManagedObject>? {
        let old = self[key]
        if old != nil { self[key] = nil }
        return old
    }

    mutating func reserveCapacity(_ n: Int) {}

    func all() -> [Unmanaged<ManagedObject>] {
        var result: [Unmanaged<ManagedObject>] = []
        for space in spaces {
            for case let page? in space.pages {
                for i in 0..<Self.pageSize { if let u = page[i] { result.append(u) } }
            }
        }
        result.append(contentsOf: overflow.values)
        return result
    }
}
