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
                  let page = space.page(Int(serial >> UInt64(Self.pageBits)), create: false) else { return nil }
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
            var found = space(ks)
            if found == nil {
                guard newValue != nil else { return }
                found = Space()
                keyspaces.append(ks)
                spaces.append(found!)
            }
            guard let page = found!.page(Int(serial >> UInt64(Self.pageBits)), create: newValue != nil) else { return }
            let slot = page + (Int(serial) & (Self.pageSize - 1))
            let old = slot.pointee
            slot.pointee = newValue
            count += (old == nil ? 0 : -1) + (newValue == nil ? 0 : 1)
        }
    }

    /// Registers many objects (marking them registered): the keyspace's pages and the current
    /// page are looked up once per run of keys that share them, and no reference is retained.
    mutating func insertAll(_ objects: [ManagedObject]) {
        objects.withUnsafeBufferPointer { list in
            guard let base = list.baseAddress else { return }
            let raw = UnsafeRawPointer(base)
            var pageNumber = -1
            var keyspace: UInt16 = 0
            var page: UnsafeMutablePointer<Unmanaged<ManagedObject>?>?
            for i in 0..<list.count {
                // The reference as a bare pointer: the array keeps the object alive.
                let object = Unmanaged<ManagedObject>.fromOpaque(raw.load(fromByteOffset: i * MemoryLayout<ManagedObject>.stride, as: UnsafeRawPointer.self))
                let key = object._withUnsafeGuaranteedRef { o in
                    o.flags.insert(.registered)
                    return o.engineKey
                }
                let serial = EngineKey(rawValue: key).id
                let ks = EngineKey(rawValue: key).keyspace
                guard serial < Self.maxPagedSerial else {
                    self[key] = object
                    continue
                }
                let p = Int(serial >> UInt64(Self.pageBits))
                if page == nil || p != pageNumber || ks != keyspace {
                    var found = space(ks)
                    if found == nil {
                        found = Space()
                        keyspaces.append(ks)
                        spaces.append(found!)
                    }
                    page = found!.page(p, create: true)
                    pageNumber = p
                    keyspace = ks
                }
                let slot = page! + (Int(serial) & (Self.pageSize - 1))
                if slot.pointee == nil { count += 1 }
                slot.pointee = object
            }
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
              let page = space.page(Int(serial >> UInt64(Self.pageBits)), create: false) else { return }
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
