import LogbookEngine

extension ManagedObjectContext {
    /// The save's transaction (under the save lock, after the conflicts are resolved): the
    /// records of inserted and changed objects with their index keys, deletions with their
    /// sets and orders, the to-many set changes, the orders of ordered relationships, and the
    /// entity counters when objects were inserted. The history record is added at the commit.
    func buildSaveTransaction() throws -> SaveTransaction {
        var save = SaveTransaction()
        var buffer: [UInt8] = []
        buffer.reserveCapacity(256)
        let layout = storeLayout
        // Inserted objects come in runs of one entity: what their records need is looked up
        // once a run.
        var writer: RecordWriter?
        for object in inserted.values {
            if writer?.entity !== object.layout { writer = RecordWriter(entity: object.layout, store: layout) }
            writer.unsafelyUnwrapped.put(
                object.slots, key: object.engineKey, into: &save.transaction, buffer: &buffer)
        }
        // Changed objects in key order: records read together later (by key) then sit together.
        // Sorted with their objects, unretained (`updated` holds them until the save ends): no
        // lookup by key afterwards.
        var changed: [(key: UInt64, object: Unmanaged<ManagedObject>)] = []
        changed.reserveCapacity(updated.count)
        for (key, object) in updated where object.recordChanged { changed.append((key, .passUnretained(object))) }
        changed.sort { $0.key < $1.key }
        save.written.reserveCapacity(changed.count + deleted.count)
        for (key, unmanaged) in changed {
            let object = unmanaged.takeUnretainedValue()
            if writer?.entity !== object.layout { writer = RecordWriter(entity: object.layout, store: layout) }
            writer.unsafelyUnwrapped.put(object.slots, key: key, into: &save.transaction, buffer: &buffer)
            save.written.append(key)
        }
        save.savedUpdates = changed.map(\.object)
        try putDeletionsAndSets(into: &save)
        if !inserted.isEmpty {
            save.transaction.put(StoredSchema.countersKey, value: container.countersRecord())
        }
        return save
    }

    /// Deleted objects (their sets and orders go with them; their pending set changes are
    /// skipped), the to-many set changes, and the orders of ordered relationships.
    private func putDeletionsAndSets(into save: inout SaveTransaction) throws {
        let layout = storeLayout
        var deletedSets = Set<UInt64>()
        for object in deleted.values {
            save.transaction.delete(object.engineKey)
            save.written.append(object.engineKey)
            for r in object.layout.toMany {
                let k = layout.setKey(entity: object.layout.index, relationship: r, owner: object.engineKey)
                save.transaction.replaceMembers(EmptyCollection(), ofSet: k)
                deletedSets.insert(k)
            }
        }
        for (k, members) in setRemoves where deletedSets.isEmpty || !deletedSets.contains(k) {
            save.transaction.removeMembers(members, fromSet: k)
        }
        for (k, members) in setAdds where deletedSets.isEmpty || !deletedSets.contains(k) {
            members.withAscending { save.transaction.addMembers($0, toSet: k) }
        }
        try writeOrders(into: &save.transaction, skipping: deletedSets)
        // The orders of deleted owners go with their sets.
        guard !deleted.isEmpty else { return }
        let orderSnapshot = container.store.snapshot()
        for object in deleted.values {
            for r in object.layout.toMany {
                if let k = layout.orderKey(entity: object.layout.index, relationship: r, owner: object.engineKey) {
                    try deleteOrder(k, snapshot: orderSnapshot, into: &save.transaction)
                }
            }
        }
    }
}
