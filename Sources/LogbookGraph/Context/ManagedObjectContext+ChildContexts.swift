import Foundation
import LogbookEngine

extension ManagedObjectContext {
    /// A new context whose saves go into this one instead of the store (Core Data's child
    /// context: `parent`). Its fetches and faults see this context's unsaved changes; saving it
    /// pushes its changes here, where they stay unsaved until this context saves. An edit
    /// sheet with Cancel is a child context per edit, saved or dropped:
    ///
    /// ```swift
    /// let sheet = container.viewContext.newChildContext(concurrencyType: .mainQueue)
    /// let person = try sheet.existingObject(with: personID)
    /// try person.setValue("Tony", forKey: "firstName")
    /// try sheet.save()                        // into the view context (Cancel: just drop `sheet`)
    /// try container.viewContext.save()        // into the store
    /// ```
    ///
    /// Objects inserted in a child keep their IDs when they reach the parent and the store:
    /// Logbook's object IDs are permanent from the start. A child reads its parent's unsaved
    /// state on the parent's queue (`performAndWait`), so the parent's queue must not be
    /// blocked waiting for the child.
    public func newChildContext(concurrencyType: ConcurrencyType = .privateQueue) -> ManagedObjectContext {
        let child = ManagedObjectContext(container: container, concurrencyType: concurrencyType, parent: self)
        child.name = name.map { "\($0).child" }
        child.mergePolicy = mergePolicy
        container.adopt(child)
        return child
    }

    /// Makes the IDs of the objects permanent (Core Data's `obtainPermanentIDs(for:)`).
    /// Logbook assigns permanent IDs at insertion, so there is nothing to do; it is here so
    /// that code written for Core Data runs unchanged.
    public func obtainPermanentIDs(for objects: [ManagedObject]) throws {}

    // MARK: Reading through the parent

    /// The unsaved state of `key` in this context and its ancestors: nil when none of them
    /// holds a change (read the store), `slots` nil when one deleted the object.
    func pendingState(of key: UInt64) throws -> (slots: [FieldValue]?, version: UInt64)? {
        if deleted[key] != nil { return (nil, 0) }
        if let o = registered(key), !o.flags.contains(.fault),
            o.flags.contains(.inserted) || o.flags.contains(.updated)
        {
            return (o.slots, o.baseVersion)
        }
        if let parent { return try parentState(of: key, parent: parent) }
        return nil
    }

    func parentState(of key: UInt64, parent: ManagedObjectContext) throws -> (slots: [FieldValue]?, version: UInt64)? {
        try parent.performAndWait { try parent.pendingState(of: key) }
    }

    /// The unsaved objects of an entity in this context and its ancestors: values of the
    /// inserted and changed ones, keys of the deleted ones.
    struct PendingOverlay {
        var changed: [UInt64: [FieldValue]] = [:]
        var deleted: Set<UInt64> = []
    }

    // MARK: Saving into the parent

    /// What a child's save hands its parent.
    struct ChildChanges {
        var inserted: [(key: UInt64, entity: Int, slots: [FieldValue])] = []
        var updated: [(key: UInt64, changes: [(slot: Int, value: FieldValue)])] = []
        var deleted: [UInt64] = []
        var setAdds: [UInt64: PendingMembers] = [:]
        var setRemoves: [UInt64: Set<UInt64>] = [:]
        var orders: [UInt64: [UInt64]] = [:]
        /// The child's merge policy: what becomes of a change to an object the store no longer holds.
        var policy: MergePolicy = .error
    }

    /// A child's save: its changes become the parent's unsaved changes (property by property,
    /// so the parent's own changes to other properties stay), and this context starts afresh.
    func pushToParent(_ parent: ManagedObjectContext) throws {
        post(.willSave)
        var changes = ChildChanges()
        for o in inserted.values { changes.inserted.append((o.engineKey, o.layout.index, o.slots)) }
        for (k, o) in updated where !o.flags.contains(.fault) {
            let base = o.committed ?? o.slots
            let pinned = pinnedChanges[k] ?? []
            let diff = o.slots.indices.filter { o.slots[$0] != base[$0] || pinned.contains($0) }.map {
                ($0, o.slots[$0])
            }
            if !diff.isEmpty { changes.updated.append((k, diff)) }
        }
        changes.deleted = Array(deleted.keys)
        changes.setAdds = setAdds
        changes.setRemoves = setRemoves
        changes.orders = orderOverrides
        changes.policy = mergePolicy
        let handed = UncheckedSendable(changes)
        try parent.performAndWait { try parent.apply(childChanges: handed.value) }

        let saved = ContextChanges(
            inserted: Set(inserted.values.map(\.objectID)), updated: Set(updated.values.map(\.objectID)),
            deleted: Set(deleted.values.map(\.objectID)))
        _ = inserted.drain { o, _ in
            o.flags.remove(.inserted)
            register(o)
        }
        settleSavedChanges()
        for observer in changeObservers { observer(saved) }
        post(.didSave(saved))
    }

    /// The object of `key` for a child's change: as this context sees it, or, when an ancestor
    /// deleted it (unsaved there), as the store holds it. Nil when it is gone for good (deleted
    /// here, or not in the store).
    func objectForChildChange(_ key: UInt64) -> ManagedObject? {
        if deleted[key] != nil { return nil }
        if let o = try? object(forKey: key), (try? fulfill(o)) != nil { return o }
        guard parent != nil, let entity = storeLayout.entityByKeyspace[EngineKey(rawValue: key).keyspace] else {
            return nil
        }
        let layout = model.layouts[entity]
        let snapshot = readSnapshot()
        guard let slots = try? decode(snapshot, key: key, layout: layout) else { return nil }
        if let o = registered(key) {
            guard o.flags.contains(.fault), !o.flags.contains(.invalid) else { return nil }
            o.batch?.forget(o)
            o.batch = nil
            o.slots = slots
            o.baseVersion = snapshot.version
            o.flags.remove(.fault)
            return o
        }
        return materialize(key: key, layout: layout, slots: slots, version: snapshot.version)
    }

    /// On the parent's queue: a child's saved changes become unsaved changes here.
    func apply(childChanges given: ChildChanges) throws {
        var c = given
        // A change to an object another save deleted from the store (or this context deleted)
        // is a conflict: an error under `.error`, else the deletion wins and the change is
        // dropped (as at a save). An ancestor's deletion is not final — it may still roll back
        // or reset — so the change is kept here, on the object as the store holds it, and that
        // ancestor decides when this context saves into it (checker seed 441589: a grandchild's
        // change was dropped for a deletion its grandparent then reset, and lost).
        // (Held here: the registry keeps objects weakly, until a change keeps them.)
        var held: [UInt64: ManagedObject] = [:]
        let gone = c.updated.map(\.key).filter { key in
            guard let o = objectForChildChange(key) else { return true }
            held[key] = o
            return false
        }

        if !gone.isEmpty {
            if c.policy == .error {
                throw goneObjectsConflict(
                    gone, "1 object was deleted by another save since this context read it",
                    "objects were deleted by other saves since this context read them")
            }
            let dropped = Set(gone)
            c.updated.removeAll { dropped.contains($0.key) }
        }
        try dropLinksToMissing(&c)
        // The sets of objects the child deleted: additions to them are of no use, and would set
        // their members' to-one sides back to the deleted owner before the delete rules run
        // here (checker seed 224377: an item a grandchild linked to a folder its parent then
        // deleted lost the folder the grandchild moved it to).
        let deletedKeys = Set(c.deleted)
        if !deletedKeys.isEmpty {
            func ownedByDeleted(_ k: UInt64) -> Bool { possibleOwners(ofSet: k).contains(where: deletedKeys.contains) }
            c.setAdds = c.setAdds.filter { !ownedByDeleted($0.key) }
            c.orders = c.orders.filter { !ownedByDeleted($0.key) }
        }
        var report = ContextChanges()
        for (key, entity, slots) in c.inserted {
            let layout = model.layouts[entity]
            if let o = registered(key) {
                // Already here (a grandchild's insert that came through): take the values.
                for i in slots.indices { setSlot(o, i, slots[i]) }
                continue
            }
            let o = layout.managedClass.init(
                ManagedObject.Bootstrap(binding: binding(layout), key: key, slots: slots, fault: false))
            willChange(o)
            o.flags.insert(.inserted)
            inserted.append(o)
            report.inserted.insert(o.objectID)
        }
        for (key, slotChanges) in c.updated {
            let o = try held[key] ?? object(forKey: key)
            try fulfill(o)
            for (i, value) in slotChanges {
                // A to-one value this context changed otherwise since the child read it: the
                // destination it has here loses the object (the child's sets bring the new one).
                if i >= o.layout.attributeCount, o.slots[i] != value, case .object(let old) = o.slots[i] {
                    let r = o.layout.toOne[i - o.layout.attributeCount]
                    if o.layout.relationshipInverse[r] != nil { try linkInverse(o, r, old, adding: false) }
                }
                setSlot(o, i, value)
                // The new destination's set holds the object here too. The child's sets bring
                // it when the child saw it missing; not when the child saw it there and this
                // context has since dropped it (checker seed 455706: a refresh without merging
                // here took the item out of the folder's owned objects, then the child's save set
                // the item's owner back to the folder, which no longer held it).
                if i >= o.layout.attributeCount, case .object(let new) = value {
                    let r = o.layout.toOne[i - o.layout.attributeCount]
                    if let inv = o.layout.relationshipInverse[r],
                        model.layouts[o.layout.relationshipDestination[r]].entity.relationships[inv].isToMany
                    {
                        try linkInverse(o, r, new, adding: true)
                    }
                }
            }
            report.updated.insert(o.objectID)
        }
        for (k, members) in c.setRemoves { for m in members { removeMember(m, fromSet: k) } }
        for (k, members) in c.setAdds { for m in members { addMember(m, toSet: k) } }
        try linkToOneSides(adds: c.setAdds, removes: c.setRemoves)
        for (k, keys) in c.orders {
            // The child's order, member by member over this context's own pending order.
            if let mine = orderOverrides[k] {
                orderOverrides[k] = Self.reconcileOrder(keys, with: mine, members: Set(keys).union(mine))
            } else {
                orderOverrides[k] = keys
            }
        }
        for key in c.deleted {
            // As for a change: an object an ancestor deleted (unsaved there) is taken as the
            // store holds it, so that the child's deletion stays here when that ancestor resets
            // or rolls back (checker seed 1024374: it was dropped, and the object stayed).
            guard let o = objectForChildChange(key) ?? (try? object(forKey: key)) else { continue }
            // The delete rules run again here: this context may link the object to others the
            // child never read (the child's own nullify and cascade came with its changes).
            do { try deleteWithRules(o) } catch let error as LogbookError
                where error.code == .objectNotFound && o.flags.contains(.fault)
            {
                // A fault of an object that is no longer there (another save deleted it, and
                // this context dropped what it had of it): the deletion is done already, as
                // `delete(_:)` takes it (checker seed 2018715: the child's save failed).
                forgetDeletedInStore(o)
                continue
            } catch { try markDeleted(o) }
            report.deleted.insert(o.objectID)
        }
        post(.objectsDidChange(report))
    }

    /// The to-one side of each member a child's save added to a set (or removed from one) whose
    /// inverse is to-one: here too it points at the set's owner (or no longer does). The child
    /// may have read the member's value before this context changed it, and then its save
    /// carries no change of that value, only of the set (checker seed 81315: the parent's
    /// unlinked item came back into the folder's items with its folder left nil).
    func linkToOneSides(adds: [UInt64: PendingMembers], removes: [UInt64: Set<UInt64>]) throws {
        /// The owner of set `k` here, its entity and the to-one inverse of the set's relationship.
        func side(_ k: UInt64) -> (owner: UInt64, layout: EntityLayout, r: Int, inverse: Int)? {
            for (owner, e, r) in storeLayout.owners(ofSet: k) {
                let layout = model.layouts[e]
                guard let inv = layout.relationshipInverse[r],
                    !model.layouts[layout.relationshipDestination[r]].entity.relationships[inv].isToMany,
                    exists(owner)
                else { continue }
                return (owner, layout, r, inv)
            }
            return nil
        }
        func member(_ key: UInt64) -> ManagedObject? {
            guard let o = try? object(forKey: key), (try? fulfill(o)) != nil, !o.flags.contains(.invalid) else {
                return nil
            }
            return o
        }
        for (k, members) in adds {
            guard let (owner, layout, r, inv) = side(k) else { continue }
            for m in members {
                guard let o = member(m) else { continue }
                let slot = o.layout.slot(ofToOne: inv)
                if case .object(let previous) = o.slots[slot] {
                    if previous == owner { continue }
                    removeMember(m, owner: previous, self.layout(forKey: previous) ?? layout, r)
                }
                setSlot(o, slot, .object(owner))
            }
        }
        for (k, members) in removes {
            guard let (owner, _, _, inv) = side(k) else { continue }
            for m in members where !viewHasMember(m, ofSet: k) {
                guard let o = member(m) else { continue }
                let slot = o.layout.slot(ofToOne: inv)
                if o.slots[slot] == .object(owner) { setSlot(o, slot, .null) }
            }
        }
    }

    /// Adds `member` to the set `k` as an unsaved change (the owner, if here, is changed): a
    /// net change, as `addMember(_:owner:_:_:)` records it.
    func addMember(_ member: UInt64, toSet k: UInt64) {
        for owner in possibleOwners(ofSet: k) { if let o = registered(owner) { touch(o) } }
        if setRemoves[k]?.remove(member) != nil {
            if setRemoves[k]!.isEmpty { setRemoves[k] = nil }
            return
        }
        if baseHasMember(member, ofSet: k) { return }
        setAdds[k, default: []].insert(member)
    }

    func removeMember(_ member: UInt64, fromSet k: UInt64) {
        if setAdds[k]?.remove(member) != nil {
            if setAdds[k]!.isEmpty { setAdds[k] = nil }
        } else if baseMayHaveMember(member, ofSet: k) {
            // Only a member the set holds beneath is removed: removing one that is not there
            // (twice, through both sides of a link) records nothing that a later addition
            // would take for a removal to cancel (checker seed 90327).
            setRemoves[k, default: []].insert(member)
        }
        for owner in possibleOwners(ofSet: k) { if let o = registered(owner) { touch(o) } }
    }

    /// Marks an object deleted without applying delete rules (a child applied them already).
    /// Links a child's save makes to objects this context no longer has (deleted here, or
    /// inserted here and deleted since): a conflict under the child's `.error` policy, else
    /// dropped, as at a save to the store.
    func dropLinksToMissing(_ c: inout ChildChanges) throws {
        let inserted = Set(c.inserted.map(\.key))
        var known: [UInt64: Bool] = [:]
        func present(_ k: UInt64) -> Bool {
            if inserted.contains(k) { return true }
            if let p = known[k] { return p }
            // An ancestor's deletion is not final (see `objectForChildChange`): an object it
            // deleted that the store holds is still there for a child's links.
            let p = deleted[k] == nil && (exists(k) || (parent != nil && readSnapshot().contains(k)))
            known[k] = p
            return p
        }
        var missing = Set<UInt64>()
        for (_, slotChanges) in c.updated {
            for (_, value) in slotChanges { if case .object(let k) = value, !present(k) { missing.insert(k) } }
        }
        for (_, _, slots) in c.inserted {
            for value in slots { if case .object(let k) = value, !present(k) { missing.insert(k) } }
        }
        for (k, members) in c.setAdds {
            for m in members where !present(m) { missing.insert(m) }
            let owners = possibleOwners(ofSet: k)
            if !owners.contains(where: present) { missing.formUnion(owners.prefix(1)) }
        }
        guard !missing.isEmpty else { return }
        if c.policy == .error {
            throw goneObjectsConflict(
                missing.sorted(), "the changes link to 1 object that is no longer there",
                "objects the changes link to are no longer there")
        }
        for n in c.updated.indices {
            c.updated[n].changes = c.updated[n].changes.map { change in
                if case .object(let k) = change.value, missing.contains(k) { return (change.slot, .null) }
                return change
            }
        }
        for n in c.inserted.indices {
            c.inserted[n].slots = c.inserted[n].slots.map { value in
                if case .object(let k) = value, missing.contains(k) { return .null }
                return value
            }
        }
        var adds: [UInt64: PendingMembers] = [:]
        for (k, members) in c.setAdds {
            let owners = possibleOwners(ofSet: k)
            guard owners.contains(where: { !missing.contains($0) && present($0) }) else { continue }
            adds[k] = PendingMembers(members.filter { !missing.contains($0) })
        }
        c.setAdds = adds
    }

    /// Whether the object of `key` exists as this context sees it: inserted here or in an
    /// ancestor and not deleted since, or in the store and deleted by none of them.
    func exists(_ key: UInt64) -> Bool {
        if deleted[key] != nil { return false }
        if let o = registered(key), o.flags.contains(.inserted) { return true }
        if let o = registered(key), o.flags.contains(.invalid) { return false }
        if let parent { return parent.performAndWait { parent.exists(key) } }
        return readSnapshot().contains(key)
    }

    func markDeleted(_ object: ManagedObject) throws {
        guard !object.flags.contains(.deleted) else { return }
        try fulfill(object)
        willChange(object)
        object.flags.insert(.deleted)
        if object.flags.contains(.inserted) {
            object.flags.remove(.inserted)
            inserted.removeOne()
        } else {
            if object.committed == nil { object.committed = object.slots }
            updated[object.engineKey] = nil
            object.flags.remove(.updated)
            deleted[object.engineKey] = object
        }
    }
}
