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
        if !deleted.isEmpty { try unlinkDeletionsInStore(into: &save, buffer: &buffer) }
        // Inserted objects come in runs of one entity: what their records need is looked up
        // once a run (a writer, not an optional one: unwrapping copied it, with two retains,
        // for each of a million objects).
        var objects = inserted.values.makeIterator()
        if let first = objects.next() {
            var writer = RecordWriter(entity: first.layout, store: layout)
            writer.put(first.slots, key: first.engineKey, into: &save.transaction, buffer: &buffer)
            while let object = objects.next() {
                if writer.entity !== object.layout { writer = RecordWriter(entity: object.layout, store: layout) }
                writer.put(object.slots, key: object.engineKey, into: &save.transaction, buffer: &buffer)
            }
        }
        // Changed objects in key order: records read together later (by key) then sit together.
        // Sorted with their objects, unretained (`updated` holds them until the save ends): no
        // lookup by key afterwards.
        var changed: [(key: UInt64, object: Unmanaged<ManagedObject>)] = []
        changed.reserveCapacity(updated.count)
        for (key, object) in updated where object.recordChanged { changed.append((key, .passUnretained(object))) }
        changed.sort { $0.key < $1.key }
        save.written.reserveCapacity(changed.count + deleted.count)
        var changedWriter: RecordWriter?
        for (key, unmanaged) in changed {
            let object = unmanaged.takeUnretainedValue()
            if changedWriter?.entity !== object.layout {
                changedWriter = RecordWriter(entity: object.layout, store: layout)
            }
            changedWriter.unsafelyUnwrapped.put(object.slots, key: key, into: &save.transaction, buffer: &buffer)
            save.written.append(key)
        }
        save.savedUpdates = changed.map(\.object)
        try putDeletionsAndSets(into: &save)
        if !inserted.isEmpty {
            save.transaction.put(StoredSchema.countersKey, value: container.countersRecord())
        }
        for (key, value) in attachedRecords { save.transaction.put(key, value: value) }
        return save
    }

    /// The links the store holds now to the objects this save deletes, undone: the delete
    /// rules ran on what this context had read, and another save may have linked other objects
    /// to them since. Each object the store relates to a deleted one forgets it (it leaves the
    /// object's set, or its to-one value becomes nil: in the object itself when this save
    /// writes it, else in its stored record, written again), so that no record or set is left
    /// naming an object that is gone.
    private func unlinkDeletionsInStore(into save: inout SaveTransaction, buffer: inout [UInt8]) throws {
        let snapshot = container.store.snapshot()
        let layout = storeLayout
        var rewritten: [UInt64: (EntityLayout, [FieldValue])] = [:]
        for object in deleted.values {
            let l = object.layout
            guard let stored = try decode(snapshot, key: object.engineKey, layout: l) else { continue }
            for (r, rel) in l.entity.relationships.enumerated() {
                guard rel.deleteRule != .noAction, let inv = l.relationshipInverse[r] else { continue }
                for other in relatedKeys(inStore: snapshot, object.engineKey, l, r, stored) where deleted[other] == nil
                {
                    guard let otherLayout = self.layout(forKey: other) else { continue }
                    if otherLayout.entity.relationships[inv].isToMany {
                        save.transaction.removeMembers(
                            [object.engineKey],
                            fromSet: layout.setKey(entity: otherLayout.index, relationship: inv, owner: other))
                        continue
                    }
                    let slot = otherLayout.slot(ofToOne: inv)
                    if let o = registered(other),
                        o.flags.contains(.inserted)
                            || (o.flags.contains(.updated) && !o.flags.contains(.fault) && o.recordChanged)
                    {
                        // Written by this save from its values (an object changed and changed
                        // back is not written: the store's record is rewritten below, checker
                        // seed 49098).
                        if o.slots[slot] == .object(object.engineKey) { o.slots[slot] = .null }
                        continue
                    }
                    if rewritten[other] == nil {
                        guard let s = try decode(snapshot, key: other, layout: otherLayout) else { continue }
                        rewritten[other] = (otherLayout, s)
                    }
                    if rewritten[other]!.1[slot] == .object(object.engineKey) { rewritten[other]!.1[slot] = .null }
                }
            }
        }
        for (key, (l, slots)) in rewritten.sorted(by: { $0.key < $1.key }) {
            RecordWriter.put(slots, key: key, entity: l, store: layout, into: &save.transaction, buffer: &buffer)
            save.written.append(key)
            save.unlinked.append(key)
            // A copy this context holds reads the record again.
            if let o = registered(key), !o.flags.contains(.inserted) { turnIntoFault(o) }
        }
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
