import LogbookEngine

extension ManagedObjectContext {
    /// A conflict found at a save: the object and the store's current values (nil: deleted).
    struct FoundConflict {
        let object: ManagedObject
        let current: [FieldValue]?
    }

    /// The objects whose records this save writes or deletes that another save changed since
    /// they were read. Runs under the container's save lock.
    func findConflicts(_ log: RecentWrites) throws -> (conflicts: [FoundConflict], version: UInt64) {
        var candidates: [ManagedObject] = []
        for o in updated.values where o.recordChanged && log.mayHaveChanged(o.engineKey, since: o.baseVersion) {
            candidates.append(o)
        }
        for o in deleted.values where log.mayHaveChanged(o.engineKey, since: o.baseVersion) { candidates.append(o) }
        let snapshot = container.store.snapshot()
        guard !candidates.isEmpty else { return ([], snapshot.version) }
        var found: [FoundConflict] = []
        for o in candidates {
            let current = try decode(snapshot, key: o.engineKey, layout: o.layout)
            let base = o.committed ?? o.slots
            if current == base || (current == nil && o.flags.contains(.deleted)) {
                // Written again with the same values, or deleted on both sides: nothing is lost.
                o.baseVersion = snapshot.version
                continue
            }
            found.append(FoundConflict(object: o, current: current))
        }
        return (found, snapshot.version)
    }

    /// The public description of a conflict.
    func describe(_ c: FoundConflict) -> MergeConflict {
        let o = c.object
        let base = o.committed ?? o.slots
        func values(_ slots: [FieldValue]) -> [String: any Sendable] {
            var out: [String: any Sendable] = [:]
            for (i, s) in slots.enumerated() {
                let value: (any Sendable)?
                if i < o.layout.attributeCount {
                    value = s.value(type: o.layout.entity.attributes[i].type)
                } else if case .object(let k) = s {
                    value = ObjectID(store: o.objectID.store, key: k)
                } else {
                    value = nil
                }
                if let value { out[o.name(ofSlot: i)] = value }
            }
            return out
        }
        var changed: [String] = []
        if let current = c.current {
            for i in base.indices where i < current.count && base[i] != current[i] { changed.append(o.name(ofSlot: i)) }
        }
        return MergeConflict(
            objectID: o.objectID, entityName: o.layout.name, changedKeys: changed, cachedValues: values(base),
            storeValues: c.current.map(values), isDeletedInContext: o.flags.contains(.deleted))
    }

    /// Applies the merge policy to the conflicts (all of them are errors under `.error`).
    func resolve(_ conflicts: [FoundConflict], version: UInt64) throws {
        guard !conflicts.isEmpty else { return }
        if mergePolicy == .error {
            var e = LogbookError(
                .mergeConflict,
                conflicts.count == 1
                    ? "1 object was changed by another save since this context read it"
                    : "\(conflicts.count) objects were changed by other saves since this context read them")
            e.conflicts = conflicts.map(describe)
            e.objectID = conflicts.first?.object.objectID
            throw e
        }
        for c in conflicts {
            let o = c.object
            if o.flags.contains(.deleted) {
                // A deletion is kept under every policy: undoing it would have to undo what its
                // delete rules did to other objects.
                o.baseVersion = version
                continue
            }
            guard let store = c.current else {
                // Deleted by the other save: the deletion wins (the object is not brought back).
                forgetDeletedInStore(o)
                continue
            }
            let base = o.committed ?? o.slots
            let local = o.slots
            var final = local
            for i in local.indices {
                switch mergePolicy {
                case .mergeByPropertyObjectTrump: final[i] = local[i] != base[i] ? local[i] : store[i]
                case .mergeByPropertyStoreTrump: final[i] = store[i] != base[i] ? store[i] : local[i]
                case .overwrite: final[i] = local[i]
                case .rollback, .error: final[i] = store[i]
                }
            }
            o.slots = final
            o.committed = store
            o.baseVersion = version
            try reconcileInverses(o, base: base, local: local, store: store)
        }
    }

    /// After a conflict resolution chose `o`'s to-one values: the inverse side of each to-one
    /// relationship points back to `o` from the chosen object only (the other save may have
    /// linked it to another one, and this context's own change may have been dropped).
    func reconcileInverses(_ o: ManagedObject, base: [FieldValue], local: [FieldValue], store: [FieldValue]) throws {
        let layout = o.layout
        for (n, r) in layout.toOne.enumerated() where layout.relationshipInverse[r] != nil {
            let i = layout.attributeCount + n
            let final = o.slots[i]
            guard !(base[i] == final && local[i] == final && store[i] == final) else { continue }
            var others = Set<UInt64>()
            for s in [base[i], local[i], store[i]] {
                if case .object(let k) = s, s != final { others.insert(k) }
            }
            for k in others.sorted() { try? linkInverse(o, r, k, adding: false) }
            if case .object(let k) = final { try? linkInverse(o, r, k, adding: true) }
        }
    }

    /// An object another save deleted while this context held it: it becomes deleted and
    /// unusable, and this context's pending links to it are dropped.
    func forgetDeletedInStore(_ o: ManagedObject) {
        let layout = o.layout
        if !o.flags.contains(.fault) {
            for (n, r) in layout.toOne.enumerated() where layout.relationshipInverse[r] != nil {
                if case .object(let k) = o.slots[layout.attributeCount + n] { try? linkInverse(o, r, k, adding: false) }
            }
        }
        for r in layout.toMany {
            let k = setKey(o.engineKey, layout, r)
            if layout.relationshipInverse[r] != nil, let adds = setAdds[k] {
                for member in adds.sorted() { try? linkInverse(o, r, member, adding: false) }
            }
            setAdds[k] = nil
            setRemoves[k] = nil
            orderOverrides[k] = nil
        }
        updated[o.engineKey] = nil
        deleted[o.engineKey] = nil
        o.batch?.forget(o)
        o.batch = nil
        o.rawArena = nil
        o.flags = [.deleted, .invalid]
        unregister(o.engineKey)
    }
}
