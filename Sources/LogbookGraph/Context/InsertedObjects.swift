/// The inserted objects of a context, in insertion order. An object deleted before the save
/// stays in the list without its `.inserted` flag, and is skipped.
struct InsertedObjects {
    private(set) var list: [ManagedObject] = []
    private(set) var count = 0

    var isEmpty: Bool { count == 0 }
    var values: LazyFilterSequence<[ManagedObject]> { list.lazy.filter { $0.flags.contains(.inserted) } }
    var isEmptyList: Bool { list.isEmpty }

    /// Position by key, built on first lookup and kept up to date after.
    private var index: [UInt64: Int]?

    mutating func append(_ object: ManagedObject) {
        if index != nil { index![object.engineKey] = list.count }
        list.append(object)
        count += 1
    }

    mutating func lookup(_ key: UInt64) -> ManagedObject? {
        if index == nil {
            var built: [UInt64: Int] = [:]
            built.reserveCapacity(list.count)
            for (i, o) in list.enumerated() { built[o.engineKey] = i }
            index = built
        }
        guard let i = index![key] else { return nil }
        let o = list[i]
        return o.flags.contains(.inserted) ? o : nil
    }

    /// Calls `body` with each still-inserted object and whether the list holds its only
    /// reference, then empties the list.
    ///
    /// Returns the objects the list held alone, for the caller to release (on another thread
    /// when there are many): nothing else can reach them, and their deinit touches no context.
    /// The others (someone else holds them, or they were deleted since) are released here, on
    /// the context's queue: one of them may be freed with this release, or later by its other
    /// holder, and its deinit unregisters it from the context, which only this queue may touch.
    mutating func drain(_ body: (ManagedObject, Bool) -> Void) -> [ManagedObject] {
        index = nil
        var unreachable = 0
        for i in list.indices where list[i].flags.contains(.inserted) {
            let unique = isKnownUniquelyReferenced(&list[i])
            body(list[i], unique)
            if unique {
                list.swapAt(unreachable, i)
                unreachable += 1
            }
        }
        list.removeSubrange(unreachable...)
        defer {
            list = []
            count = 0
        }
        return list
    }

    /// One object left the inserted set (its flag was cleared by the caller).
    mutating func removeOne() { count -= 1 }
}
