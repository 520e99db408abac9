import Foundation
import LogbookEngine

extension ManagedObjectContext {
    /// One constraint clash found at a save.
    struct Clash {
        let object: ManagedObject
        let slots: [Int]
        var stored: [UInt64] = []
        var inSave: [ManagedObject] = []
    }

    /// Checks the uniqueness constraints of what the save writes, against the store (through
    /// each constraint's index) and within the save. Under `.error` a clash is a
    /// `.constraintConflict` error; under the other policies an inserted object that clashes
    /// with one stored object of its entity becomes that object (an upsert, as Core Data does),
    /// its values merged by the policy. Runs under the save lock.
    func enforceConstraints() throws {
        guard storeLayout.constraintIndexes.contains(where: { !$0.isEmpty }) else { return }
        let snapshot = container.store.snapshot()
        var candidates: [ManagedObject] = []
        for o in inserted.values where !storeLayout.constraintIndexes[o.layout.index].isEmpty { candidates.append(o) }
        for o in updated.values where o.recordChanged && !storeLayout.constraintIndexes[o.layout.index].isEmpty {
            candidates.append(o)
        }
        guard !candidates.isEmpty else { return }
        var seen: [IndexKey: ManagedObject] = [:]
        var clashes: [Clash] = []
        for o in candidates {
            for c in storeLayout.constraintIndexes[o.layout.index]
            where !c.slots.contains(where: { o.slots[$0].isNull }) {
                let entry = storeLayout.constraintKey(o.slots, c.slots, entity: o.layout, index: c.index)
                var clash = Clash(object: o, slots: c.slots)
                if let other = seen[entry], other !== o, sameValues(other, other.slots, as: o, c.slots) {
                    clash.inSave.append(other)
                } else {
                    seen[entry] = o
                }
                let bound = IndexBound(entry.bytes, inclusive: true)
                for k in try snapshot.primaryKeys(index: c.index, from: bound, to: bound) where k != o.engineKey {
                    // Objects this save deletes, or moves to other values, free theirs.
                    if deleted[k] != nil { continue }
                    if let moving = updated[k], moving.recordChanged { continue }
                    guard let l = layout(forKey: k), let s = try decode(snapshot, key: k, layout: l),
                        sameValues(o, o.slots, as: l, s, c.slots)
                    else { continue }
                    clash.stored.append(k)
                }
                if !clash.stored.isEmpty || !clash.inSave.isEmpty { clashes.append(clash) }
            }
        }
        guard !clashes.isEmpty else { return }
        if mergePolicy != .error, try mergeDuplicates(clashes) { return try enforceConstraints() }
        let upsertable =
            mergePolicy != .error
            && clashes.allSatisfy { c in
                c.inSave.isEmpty && c.stored.count == 1 && c.object.flags.contains(.inserted)
                    && layout(forKey: c.stored[0]) === c.object.layout
                    && !(registered(c.stored[0])?.hasChanges ?? false)
            }
            && Set(clashes.map { ObjectIdentifier($0.object) }).count == clashes.count
        guard upsertable else {
            var e = LogbookError(
                .constraintConflict,
                clashes.count == 1
                    ? "1 object has the values of a uniqueness constraint another object has"
                    : "\(clashes.count) objects have the values of uniqueness constraints other objects have")
            e.constraintConflicts = clashes.map(describe)
            e.objectID = clashes.first?.object.objectID
            throw e
        }
        for c in clashes {
            let k = c.stored[0]
            guard let store = try decode(snapshot, key: k, layout: c.object.layout) else { continue }
            try upsert(c.object, into: k, store: store, version: snapshot.version)
        }
    }

    /// Under a policy that resolves conflicts: inserted objects of one save that share
    /// constraint values become one object (Core Data's in-memory `NSConstraintConflict`), and
    /// an inserted object that clashes with a stored object this context holds with changes of
    /// its own is merged into that object. Returns whether any was merged (the constraints are
    /// then checked again).
    private func mergeDuplicates(_ clashes: [Clash]) throws -> Bool {
        let inSave = clashes.filter { c in
            !c.inSave.isEmpty && c.object.flags.contains(.inserted)
                && c.inSave.allSatisfy { $0.flags.contains(.inserted) && $0.layout === c.object.layout }
        }
        if !inSave.isEmpty {
            for c in inSave where c.object.flags.contains(.inserted) {
                if let survivor = c.inSave.first(where: { $0.flags.contains(.inserted) }) {
                    try mergeInserted(c.object, into: survivor)
                }
            }
            return true
        }
        var merged = false
        for c in clashes where c.inSave.isEmpty && c.stored.count == 1 && c.object.flags.contains(.inserted) {
            if let held = registered(c.stored[0]), held.hasChanges, !held.flags.contains(.deleted),
                held.layout === c.object.layout
            {
                try mergeInserted(c.object, into: held)
                merged = true
            }
        }
        return merged
    }

    /// Whether `a` (with `aSlots`) and `b`'s values agree on a constraint given by `a`'s slots.
    private func sameValues(_ a: ManagedObject, _ aSlots: [FieldValue], as b: ManagedObject, _ slots: [Int]) -> Bool {
        sameValues(a, aSlots, as: b.layout, b.slots, slots)
    }

    private func sameValues(
        _ a: ManagedObject, _ aSlots: [FieldValue], as l: EntityLayout, _ bSlots: [FieldValue], _ slots: [Int]
    )
        -> Bool
    {
        slots.allSatisfy { s in
            guard let t = l.slotByName[a.layout.slotNames[s]] else { return false }
            return aSlots[s] == bSlots[t]
        }
    }

    private func describe(_ c: Clash) -> ConstraintConflict {
        let o = c.object
        var values: [String: any Sendable] = [:]
        for s in c.slots {
            if s < o.layout.attributeCount {
                if let v = o.slots[s].value(type: o.layout.entity.attributes[s].type) {
                    values[o.layout.slotNames[s]] = v
                }
            } else if case .object(let k) = o.slots[s] {
                values[o.layout.slotNames[s]] = ObjectID(store: storeLayout.identity, key: k)
            }
        }
        return ConstraintConflict(
            objectID: o.objectID, entityName: o.layout.name, keys: c.slots.map { o.layout.slotNames[$0] },
            values: values,
            conflictingObjectIDs: c.stored.map { ObjectID(store: storeLayout.identity, key: $0) }
                + c.inSave.map(\.objectID),
            isWithinSave: c.stored.isEmpty)
    }

    /// An inserted object that shares a uniqueness constraint's values with another object
    /// inserted earlier in the same save is merged into it: the survivor keeps its identity,
    /// takes the values the policy chooses (the later object's under the policies that let
    /// this context's changes win, the earlier's under the others), and every pending
    /// reference to the later object and its relationships moves to the survivor.
    func mergeInserted(_ later: ManagedObject, into survivor: ManagedObject) throws {
        let old = later.engineKey
        let before = survivor.slots
        remapPendingReferences(from: later, to: survivor)
        let laterSlots = later.slots
        var final = before
        for i in before.indices {
            switch mergePolicy {
            case .mergeByPropertyObjectTrump: final[i] = laterSlots[i].isNull ? before[i] : laterSlots[i]
            case .overwrite: final[i] = laterSlots[i]
            case .mergeByPropertyStoreTrump, .rollback, .error: final[i] = before[i].isNull ? laterSlots[i] : before[i]
            }
        }
        survivor.slots = final
        later.resetFlags([.invalid])
        inserted.removeOne()
        unregister(old)
        try reconcileInverses(survivor, base: before, local: laterSlots, store: before)
    }

    /// Every pending reference to `from` (to-one values, set members, orders) made a reference
    /// to `to`, and the sets `from` owns merged into those of `to`.
    func remapPendingReferences(from: ManagedObject, to: ManagedObject) {
        let old = from.engineKey
        let k = to.engineKey
        func remap(_ s: FieldValue) -> FieldValue {
            if case .object(let key) = s, key == old { return .object(k) }
            return s
        }
        func remap(_ key: UInt64) -> UInt64 { key == old ? k : key }
        for p in Array(inserted.values) + Array(updated.values) where p !== from {
            p.slots = p.slots.map(remap)
            p.committed = p.committed?.map(remap)
        }
        from.slots = from.slots.map(remap)
        var ownedSets: [UInt64: UInt64] = [:]
        for r in from.layout.toMany { ownedSets[setKey(old, from.layout, r)] = setKey(k, to.layout, r) }
        var adds: [UInt64: PendingMembers] = [:]
        for (key, value) in setAdds {
            let target = ownedSets[key] ?? key
            let members = PendingMembers(value.map(remap))
            if let existing = adds[target] {
                adds[target] = PendingMembers(Array(existing) + Array(members))
            } else {
                adds[target] = members
            }
        }
        setAdds = adds
        var removes: [UInt64: Set<UInt64>] = [:]
        for (key, value) in setRemoves { removes[ownedSets[key] ?? key, default: []].formUnion(value.map(remap)) }
        setRemoves = removes
        var orders: [UInt64: [UInt64]] = [:]
        for (key, value) in orderOverrides {
            let target = ownedSets[key] ?? key
            let members = value.map(remap)
            if let existing = orders[target] {
                var seen = Set(existing)
                orders[target] = existing + members.filter { seen.insert($0).inserted }
            } else {
                var seen = Set<UInt64>()
                orders[target] = members.filter { seen.insert($0).inserted }
            }
        }
        orderOverrides = orders
    }

    /// An inserted object becomes the stored object `k` with the same constraint values: it
    /// takes `k`'s identity (every pending reference to it follows), and its values are merged
    /// with the stored ones by the merge policy.
    func upsert(_ o: ManagedObject, into k: UInt64, store: [FieldValue], version: UInt64) throws {
        let old = o.engineKey
        if let x = registered(k), x !== o {
            // An unchanged instance of the stored object gives way to the one being saved.
            x.resetFlags([.invalid])
            unregister(k)
        }
        func remap(_ s: FieldValue) -> FieldValue {
            if case .object(let key) = s, key == old { return .object(k) }
            return s
        }
        func remap(_ key: UInt64) -> UInt64 { key == old ? k : key }
        for p in Array(inserted.values) + Array(updated.values) {
            p.slots = p.slots.map(remap)
            p.committed = p.committed?.map(remap)
        }
        // Pending set changes and orders: the sets the object owned, and its membership elsewhere.
        var ownedSets: [UInt64: UInt64] = [:]
        for r in o.layout.toMany { ownedSets[setKey(old, o.layout, r)] = setKey(k, o.layout, r) }
        // The stored object's own pending changes (a child's save may have brought some)
        // join the ones moved onto it (checker seed 55697: they were overwritten).
        func rekey<V>(_ table: [UInt64: V], members: (V) -> V, join: (V, V) -> V) -> [UInt64: V] {
            var out: [UInt64: V] = [:]
            for (key, value) in table {
                let target = ownedSets[key] ?? key
                let moved = members(value)
                out[target] = out[target].map { join($0, moved) } ?? moved
            }
            return out
        }
        setAdds = rekey(
            setAdds, members: { PendingMembers($0.map(remap)) }, join: { PendingMembers(Array($0) + Array($1)) })
        setRemoves = rekey(setRemoves, members: { Set($0.map(remap)) }, join: { $0.union($1) })
        orderOverrides = rekey(
            orderOverrides, members: { $0.map(remap) },
            join: { a, b in
                var seen = Set(a)
                return a + b.filter { seen.insert($0).inserted }
            })
        let local = o.slots
        var final = local
        for i in local.indices {
            switch mergePolicy {
            case .mergeByPropertyObjectTrump: final[i] = local[i].isNull ? store[i] : local[i]
            case .overwrite: final[i] = local[i]
            case .mergeByPropertyStoreTrump: final[i] = store[i].isNull ? local[i] : store[i]
            case .rollback, .error: final[i] = store[i]
            }
        }
        o.flags.remove(.inserted)
        inserted.removeOne()
        // The object takes the stored object's key: an entry under its own key (a redone
        // insertion registers one) must not outlive it (checker seed 20816).
        if o.flags.contains(.registered) { unregister(o.engineKey, ifItIs: Unmanaged.passUnretained(o).toOpaque()) }
        o.engineKey = k
        o.slots = final
        o.committed = store
        o.baseVersion = version
        o.flags.insert(.updated)
        updated[k] = o
        register(o)
        try reconcileInverses(o, base: store, local: local, store: store)
    }
}
