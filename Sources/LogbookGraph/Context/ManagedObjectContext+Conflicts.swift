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
        o.resetFlags([.deleted, .invalid])
        unregister(o.engineKey)
    }
}

extension ManagedObjectContext {
    /// A link this save would write to an object that is not there: another save deleted it
    /// from the store, or this save deletes it.
    struct DanglingLink {
        /// The object whose to-one relationship or set holds the link.
        let source: UInt64
        /// The relationship's name.
        let relationship: String
        /// The object linked to.
        let target: UInt64
    }

    /// The links this save would write to objects that are not there. Under `.error` they are
    /// a `.mergeConflict` (nothing is written); under the other policies the links are dropped,
    /// as merging the deletion would have dropped them (Core Data reports a dangling reference
    /// at the save instead, and saves nothing). Runs under the save lock, after the conflicts.
    func checkLinks(_ snapshot: Snapshot, recent: RecentWrites) throws {
        // Nothing deleted since the container opened, here or by another save: no link can
        // lead to an object that is gone.
        if recent.isEmpty && deleted.isEmpty { return }
        var absent = Set<UInt64>()
        func exists(_ k: UInt64) -> Bool {
            if !deleted.isEmpty && deleted[k] != nil { return false }
            // Only an object some save wrote (or deleted) since the container opened can have
            // been deleted under this context: the others need no look-up (a save of a hundred
            // thousand new links, all to objects of the same save, checks none of them).
            guard recent.mayHaveChanged(k, since: 0) else { return true }
            if absent.contains(k) { return false }
            let found = snapshot.contains(k) || inserted.lookup(k) != nil
            if !found { absent.insert(k) }
            return found
        }
        var dangling: [DanglingLink] = []
        func checkToOne(_ o: ManagedObject, changedOnly: Bool) {
            let layout = o.layout
            for (n, r) in layout.toOne.enumerated() {
                let i = layout.attributeCount + n
                guard case .object(let k) = o.slots[i] else { continue }
                if changedOnly, let c = o.committed, c[i] == o.slots[i] { continue }
                if !exists(k) {
                    dangling.append(
                        DanglingLink(source: o.engineKey, relationship: layout.entity.relationships[r].name, target: k))
                }
            }
        }
        for o in inserted.values where !o.layout.toOne.isEmpty { checkToOne(o, changedOnly: false) }
        for o in updated.values where !o.layout.toOne.isEmpty && o.recordChanged { checkToOne(o, changedOnly: true) }
        var danglingSets: [(set: UInt64, member: UInt64?)] = []
        for (k, members) in setAdds where !members.isEmpty {
            let owners = possibleOwners(ofSet: k)
            // The sets of objects this save deletes go with them.
            if owners.contains(where: { deleted[$0] != nil }) { continue }
            guard let owner = owners.first(where: exists) else {
                let name =
                    storeLayout.owners(ofSet: k).first.map { model.entities[$0.1].relationships[$0.2].name } ?? ""
                for m in members {
                    dangling.append(DanglingLink(source: m, relationship: name, target: owners.first ?? 0))
                }
                danglingSets.append((k, nil))
                continue
            }
            for m in members where !exists(m) {
                let name =
                    storeLayout.owners(ofSet: k).first.map { model.entities[$0.1].relationships[$0.2].name } ?? ""
                dangling.append(DanglingLink(source: owner, relationship: name, target: m))
                danglingSets.append((k, m))
            }
        }
        guard !dangling.isEmpty else { return }
        if mergePolicy == .error { throw danglingError(dangling) }
        dropDangling(dangling, sets: danglingSets)
    }

    /// The `.mergeConflict` of links to objects that are not there.
    private func danglingError(_ dangling: [DanglingLink]) -> LogbookError {
        var e = goneObjectsConflict(
            Set(dangling.map(\.target)).sorted(), "1 link is to an object another save deleted",
            "links are to objects other saves deleted")
        e.objectID = ObjectID(store: storeLayout.identity, key: dangling[0].source)
        e.key = dangling[0].relationship
        return e
    }

    /// A `.mergeConflict` naming objects that are no longer there (another save deleted them,
    /// or this one does), each a conflict with no store values; `many` follows the count.
    func goneObjectsConflict(_ keys: [UInt64], _ one: String, _ many: String) -> LogbookError {
        var e = LogbookError(.mergeConflict, keys.count == 1 ? one : "\(keys.count) \(many)")
        e.conflicts = keys.map { k in
            MergeConflict(
                objectID: ObjectID(store: storeLayout.identity, key: k), entityName: layout(forKey: k)?.name ?? "",
                changedKeys: [], cachedValues: [:], storeValues: nil, isDeletedInContext: deleted[k] != nil)
        }
        e.objectID = e.conflicts.first?.objectID
        return e
    }

    /// Links to objects that are not there, dropped: to-one values become nil, set additions
    /// go, and the objects another save deleted are forgotten here.
    private func dropDangling(_ dangling: [DanglingLink], sets: [(set: UInt64, member: UInt64?)]) {
        // Dropped: to-one values become nil, set additions go.
        let gone = Set(dangling.map(\.target))
        for o in Array(inserted.values) + Array(updated.values) {
            for n in o.layout.toOne.indices {
                let i = o.layout.attributeCount + n
                if case .object(let k) = o.slots[i], gone.contains(k) {
                    if o.flags.contains(.updated) || o.flags.contains(.inserted) { o.slots[i] = .null }
                }
            }
        }
        for (k, member) in sets {
            if let member { _ = setAdds[k]?.remove(member) } else { setAdds[k] = nil }
        }
        for k in gone where deleted[k] == nil {
            if let o = registered(k), !o.flags.contains(.inserted) { forgetDeletedInStore(o) }
        }
    }
}
