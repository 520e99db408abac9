import LogbookEngine

extension ManagedObjectContext {
    /// Registered objects by key, unretained: an object leaves when it deinits. `table` is
    /// guarded by `lock` (an object may in principle be released on another thread).
    final class Registry: @unchecked Sendable {
        // @unchecked: `table` is touched only under `lock` (a futex-based lock: cheap when
        // uncontended, which is nearly always; every object's deinit takes it once).
        private let lock = Locked(())
        @exclusivity(unchecked) private var table = RegistryTable()

        func withLock<R>(_ body: (inout RegistryTable) throws -> R) rethrows -> R {
            try lock.withLock { _ in try body(&table) }
        }
    }
}

extension ManagedObjectContext {
    // MARK: Registry

    func register(_ object: ManagedObject) {
        object.flags.insert(.registered)
        registry.withLock { $0[object.engineKey] = Unmanaged.passUnretained(object) }
    }

    func unregister(_ key: UInt64) {
        registry.withLock { $0.remove(key) }
    }

    /// Removes the entry of `key` only when it is `object` (an object that goes leaves its
    /// own entry, never another object's registered since under the same key).
    func unregister(_ key: UInt64, ifItIs object: UnsafeMutableRawPointer) {
        registry.withLock { table in
            if table[key]?.toOpaque() == object { table.remove(key) }
        }
    }

    package func registered(_ key: UInt64) -> ManagedObject? {
        if !inserted.isEmpty, let o = inserted.lookup(key) { return o }
        return registry.withLock { table in
            // Objects are released on their context's queue, where this runs too, so an entry
            // is never an object in the middle of deinit.
            guard let u = table[key] else { return nil }
            let object = u.takeUnretainedValue()
            return object.flags.contains(.invalid) ? nil : object
        }
    }

    /// The registered objects for `keys` (nil where none), with one lock for all of them.
    func registered(keys: [UInt64]) -> [ManagedObject?] {
        var result = [ManagedObject?](repeating: nil, count: keys.count)
        registry.withLock { table in
            guard !table.isEmpty else { return }
            for (i, k) in keys.enumerated() {
                if let u = table[k] {
                    let o = u.takeUnretainedValue()
                    if !o.flags.contains(.invalid) { result[i] = o }
                }
            }
        }
        if !inserted.isEmpty {
            for (i, k) in keys.enumerated() where result[i] == nil { result[i] = inserted.lookup(k) }
        }
        return result
    }

    /// Registers many new objects with one lock.
    func register(all objects: [ManagedObject]) {
        registry.withLock { table in table.insertAll(objects) }
    }

    /// The objects registered in the context (fetched, inserted or faulted in, and still alive).
    public var registeredObjects: [ManagedObject] {
        registry.withLock { $0.all() }.map { $0.takeUnretainedValue() }
    }

}
