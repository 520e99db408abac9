import Foundation
import LogbookEngine

extension ManagedObjectContext {
    // MARK: Changing values

    func setSlot(_ object: ManagedObject, _ slot: Int, _ value: FieldValue) {
        if object.flags.contains(.inserted) && undoHistory == nil {
            // A new object: nothing to track but the value.
            object.slots[slot] = value
            return
        }
        guard object.slots[slot] != value else { return }
        willChange(object)
        if !object.flags.contains(.inserted) {
            if object.committed == nil { object.committed = object.slots }
            if !object.flags.contains(.updated) {
                object.flags.insert(.updated)
                updated[object.engineKey] = object
            }
        }
        object.slots[slot] = value
    }

    /// Marks a registered object changed because one of its to-many relationships changed.
    func touch(_ object: ManagedObject) {
        willChange(object)
        if !object.flags.contains(.inserted) && !object.flags.contains(.updated) {
            if object.committed == nil && !object.flags.contains(.fault) { object.committed = object.slots }
            object.flags.insert(.updated)
            updated[object.engineKey] = object
        }
    }

    func checkRelated(_ owner: ManagedObject, _ r: Int, _ other: ManagedObject) throws {
        // The description is read only for an error (a copy of it on every check cost more
        // than the check).
        var rel: RelationshipDescription { owner.layout.entity.relationships[r] }
        guard other.token === token, !other.flags.contains(.invalid) else {
            throw LogbookError(
                .invalidRelationship,
                other.objectID.store != storeLayout.identity
                    ? "\(rel.name) cannot point to an object of another store"
                    : "\(rel.name) cannot point to an object of another context; use existingObject(with:) to get it here",
                entity: owner.layout.name, key: rel.name, objectID: owner.objectID)
        }
        guard model.layouts[owner.layout.relationshipDestination[r]].descendants.contains(other.layout.index) else {
            throw LogbookError(
                .invalidRelationship, "\(rel.name) points to \(rel.destination) objects, not \(other.layout.name)",
                entity: owner.layout.name, key: rel.name, objectID: owner.objectID)
        }
    }

    func setKey(_ owner: UInt64, _ layout: EntityLayout, _ r: Int) -> UInt64 {
        storeLayout.setKey(entity: layout.index, relationship: r, owner: owner)
    }

    /// The members of a to-many relationship: the store's, plus unsaved additions, minus removals.
    func relatedKeys(_ owner: UInt64, _ layout: EntityLayout, _ r: Int) -> Set<UInt64> {
        let k = setKey(owner, layout, r)
        var members: Set<UInt64>
        if let parent {
            members = parent.performAndWait { parent.relatedKeys(owner, layout, r) }
        } else {
            members = Set(readSnapshot().members(ofSet: k))
        }
        if let removes = setRemoves[k] { members.subtract(removes) }
        if let adds = setAdds[k] { members.formUnion(adds) }
        return members
    }

    /// The number of related objects: the stored set's count, corrected by unsaved changes.
    func relatedCount(_ owner: UInt64, _ layout: EntityLayout, _ r: Int) -> Int {
        let k = setKey(owner, layout, r)
        if parent == nil && setRemoves[k] == nil && setAdds[k] == nil { return readSnapshot().memberCount(ofSet: k) }
        return relatedKeys(owner, layout, r).count
    }

    /// The related objects, ordered by key. Objects the context does not hold yet come back as
    /// faults that load together (from one snapshot) when the first of them is touched, so
    /// counting or walking a relationship reads no record it does not need.
    /// How many members of a to-many relationship load together when one of them is touched.
    static let relationshipFaultBatch = 256

    func relatedObjects(_ owner: ManagedObject, relationship r: Int) throws -> [ManagedObject] {
        let keys = relatedKeys(owner.engineKey, owner.layout, r).sorted()
        let declared = model.layouts[owner.layout.relationshipDestination[r]]
        var batch: FaultBatch?
        var result: [ManagedObject] = []
        result.reserveCapacity(keys.count)
        var snapshot: Snapshot?
        for key in keys {
            if let o = registered(key) {
                result.append(o)
                continue
            }
            // Members load together in batches of `relationshipFaultBatch`, not all at once:
            // touching one member of a hundred thousand reads its batch, not every record.
            if batch == nil || batch!.count >= Self.relationshipFaultBatch {
                if snapshot == nil { snapshot = readSnapshot() }
                batch = makeFaultBatch(snapshot!)
            }
            // A member may be of a sub-entity of the declared destination.
            let destination = declared.inTree ? (layout(forKey: key) ?? declared) : declared
            let o = destination.managedClass.init(
                ManagedObject.Bootstrap(
                    binding: binding(destination), key: key, slots: [], fault: true))
            batch!.append(o)
            register(o)
            result.append(o)
        }
        return result
    }

    /// `ownerObject`, when the caller has it, saves looking the owner up by key; `memberIsNew`
    /// says the member was inserted in this context (no stored set can hold it).
    func addMember(
        _ member: UInt64, owner: UInt64, _ layout: EntityLayout, _ r: Int, ownerObject: ManagedObject? = nil,
        memberIsNew: Bool = false
    ) {
        addMember(
            member, toSet: setKey(owner, layout, r), owner: ownerObject ?? registered(owner), memberIsNew: memberIsNew)
    }

    /// `addMember` for a set whose key the caller has; `owner` is its owner when registered.
    ///
    /// A set's unsaved changes are net changes against what the context saw when it made
    /// them (Core Data compares with the object's snapshot): adding back a member this
    /// context removed, or adding one the set held already, records no addition, and
    /// removing a member this context added records no removal (`removeMember`). A save then
    /// writes no membership the context did not change, and a member added and removed again
    /// here stays as another context saved it (its to-one inverse, unchanged here, agrees).
    private func addMember(_ member: UInt64, toSet k: UInt64, owner: ManagedObject?, memberIsNew: Bool = false) {
        if let owner { touch(owner) }
        if !setRemoves.isEmpty, setRemoves[k]?.remove(member) != nil {
            if setRemoves[k]!.isEmpty { setRemoves[k] = nil }
            if !orderOverrides.isEmpty { orderMemberAdded(member, setKey: k) }
            return
        }
        if !memberIsNew && !(owner?.flags.contains(.inserted) ?? false) && baseSurelyHasMember(member, ofSet: k) {
            return
        }
        setAdds[k, default: []].insert(member)
        if !orderOverrides.isEmpty { orderMemberAdded(member, setKey: k) }
    }

    /// Whether the set `k` holds `member` in what this context reads, without its own
    /// changes: the store's snapshot, or the parent's view for a child.
    func baseHasMember(_ member: UInt64, ofSet k: UInt64) -> Bool {
        guard let parent else { return readSnapshot().isMember(member, ofSet: k) }
        return parent.performAndWait { parent.viewHasMember(member, ofSet: k) }
    }

    /// `baseHasMember` for a removal: a root context also asks the store's latest state (a
    /// context pinned to an older generation, or resolving a conflict at a save, removes what
    /// the store holds now: checker seed 70946).
    func baseMayHaveMember(_ member: UInt64, ofSet k: UInt64) -> Bool {
        if baseHasMember(member, ofSet: k) { return true }
        return parent == nil && container.store.snapshot().isMember(member, ofSet: k)
    }

    /// `baseHasMember` for an addition: a root context also asks the store's latest state (a
    /// context pinned to an older generation, or resolving a conflict at a save, adds what the
    /// store lacks now: checker seed 12026780, where an `.overwrite` put back a to-one that
    /// another save had cleared, and its pinned view still held the member).
    func baseSurelyHasMember(_ member: UInt64, ofSet k: UInt64) -> Bool {
        guard baseHasMember(member, ofSet: k) else { return false }
        return parent != nil || pinnedSnapshot == nil || container.store.snapshot().isMember(member, ofSet: k)
    }

    /// Whether the set `k` holds `member` in this context's view (with its changes).
    func viewHasMember(_ member: UInt64, ofSet k: UInt64) -> Bool {
        if setAdds[k]?.contains(member) == true { return true }
        if setRemoves[k]?.contains(member) == true { return false }
        return baseHasMember(member, ofSet: k)
    }

    /// `addMember` for a member that may be there already: false (and nothing done) when it
    /// is; the set's changes are looked up once. Only for a set of an inserted owner (nothing
    /// stored).
    private func addNewMember(_ member: UInt64, toSet k: UInt64, owner: ManagedObject) -> Bool {
        guard setAdds[k, default: []].insert(member) else { return false }
        if !setRemoves.isEmpty, setRemoves[k]?.remove(member) != nil, setRemoves[k]!.isEmpty { setRemoves[k] = nil }
        if !orderOverrides.isEmpty { orderMemberAdded(member, setKey: k) }
        touch(owner)
        return true
    }

    func removeMember(_ member: UInt64, owner: UInt64, _ layout: EntityLayout, _ r: Int) {
        removeMember(member, fromSet: setKey(owner, layout, r), owner: registered(owner))
    }

    /// Removes `member` from the set `k` as an unsaved change: a member this context added is
    /// simply no longer added (see `addMember`).
    private func removeMember(_ member: UInt64, fromSet k: UInt64, owner: ManagedObject?) {
        if setAdds[k]?.remove(member) != nil {
            if setAdds[k]!.isEmpty { setAdds[k] = nil }
        } else if !(owner?.flags.contains(.inserted) ?? false) && baseMayHaveMember(member, ofSet: k) {
            // Only a member the set holds beneath is removed (see `removeMember(_:fromSet:)`).
            setRemoves[k, default: []].insert(member)
        }
        if !orderOverrides.isEmpty { orderMemberRemoved(member, setKey: k) }
        if let owner { touch(owner) }
    }

    /// The inverse side: `other`'s relationship `inverse` gains or loses `owner`. `otherObject`
    /// is the object of `otherKey` when the caller has it.
    func linkInverse(
        _ owner: ManagedObject, _ r: Int, _ otherKey: UInt64, adding: Bool, otherObject: ManagedObject? = nil
    ) throws {
        guard let inv = owner.layout.relationshipInverse[r] else { return }
        // The other object's own entity (it may be a sub-entity of the declared destination):
        // inherited relationships keep their index, their slots do not.
        let declared = model.layouts[owner.layout.relationshipDestination[r]]
        let destLayout = declared.inTree ? (otherObject?.layout ?? layout(forKey: otherKey) ?? declared) : declared
        if destLayout.entity.relationships[inv].isToMany {
            if adding {
                addMember(
                    owner.engineKey, owner: otherKey, destLayout, inv, ownerObject: otherObject,
                    memberIsNew: owner.flags.contains(.inserted))
            } else {
                removeMember(owner.engineKey, owner: otherKey, destLayout, inv)
            }
        } else {
            let other: ManagedObject
            do {
                other = try object(forKey: otherKey)
                try fulfill(other)
            } catch let error as LogbookError where error.code == .objectNotFound && !adding {
                // An object deleted where this context reads from (its parent, or the store
                // since it was related here) has no link left to take away (checker seed 19330).
                return
            }
            let slot = destLayout.slot(ofToOne: inv)
            // (A one-to-one relationship has no set: both of its sides are records.)
            // (A new object is never stale: no look-up for it, the common case of a bulk insert.)
            if parent == nil && !other.flags.contains(.inserted) && owner.layout.entity.relationships[r].isToMany
                && other.committed.map({ $0[slot] == other.slots[slot] }) ?? true
                && (other.slots[slot] == .object(owner.engineKey))
                    != baseHasMember(other.engineKey, ofSet: setKey(owner.engineKey, owner.layout, r))
            {
                // `other`'s to-one, which this context has not changed, disagrees with the store's
                // set of `owner`: another save moved it since this context read it (a set is read
                // from the store at each access, a record once). Its record is read again first,
                // so that the change is made from where it is now — leaving the set it is in, or
                // clearing a to-one that names `owner` — and its save is checked against that
                // (found by the contention test across processes: a member in two sets, its
                // to-one naming one of them; a member taken out of a set, its to-one still
                // naming the owner).
                // (One deleted from the store meanwhile is left as it is: the save finds the link
                // to it, a conflict under `.error`, dropped under the other policies.)
                let snapshot = readSnapshot()
                if snapshot.contains(other.engineKey) {
                    try mergeStoreValues(into: other, from: snapshot, pinning: false)
                    // (Without changes of its own it became a fault.)
                    try fulfill(other)
                }
            }
            if adding {
                // `other` pointed elsewhere before: that object loses it.
                if case .object(let previous) = other.slots[slot], previous != owner.engineKey {
                    try unlinkForward(previousOwner: previous, destLayout: destLayout, inverse: inv, other: other)
                }
                setSlot(other, slot, .object(owner.engineKey))
            } else if case .object(let k) = other.slots[slot], k == owner.engineKey {
                setSlot(other, slot, .null)
            }
        }
    }

    /// `other` (whose to-one `inverse` pointed at `previousOwner`) is being re-linked: remove
    /// `other` from `previousOwner`'s forward relationship.
    private func unlinkForward(previousOwner: UInt64, destLayout: EntityLayout, inverse: Int, other: ManagedObject)
        throws
    {
        guard let forward = destLayout.relationshipInverse[inverse] else { return }
        let declared = model.layouts[destLayout.relationshipDestination[inverse]]
        let ownerLayout = declared.inTree ? (layout(forKey: previousOwner) ?? declared) : declared
        if ownerLayout.entity.relationships[forward].isToMany {
            removeMember(other.engineKey, owner: previousOwner, ownerLayout, forward)
        } else {
            let prev = try object(forKey: previousOwner)
            try fulfill(prev)
            let s = ownerLayout.slot(ofToOne: forward)
            if case .object(let k) = prev.slots[s], k == other.engineKey { setSlot(prev, s, .null) }
        }
    }

    func setToOne(_ owner: ManagedObject, relationship r: Int, to target: ManagedObject?) throws {
        if let target { try checkRelated(owner, r, target) }
        let slot = owner.layout.slot(ofToOne: r)
        let old: UInt64? = if case .object(let k) = owner.slots[slot] { k } else { nil }
        let new = target?.engineKey
        guard old != new else { return }
        if let old { try linkInverse(owner, r, old, adding: false) }
        setSlot(owner, slot, new.map { .object($0) } ?? .null)
        if let new { try linkInverse(owner, r, new, adding: true) }
    }

    func addRelated(_ owner: ManagedObject, relationship r: Int, _ objects: [ManagedObject]) throws {
        for o in objects { try checkRelated(owner, r, o) }
        if owner.flags.contains(.inserted) {
            // A new object has nothing stored: its members are the ones added since, looked
            // up as they grow (a copy held here would make each addition copy them).
            let layout = storeLayout
            let k = layout.setKey(entity: owner.layout.index, relationship: r, owner: owner.engineKey)
            if let inv = owner.layout.relationshipInverse[r] {
                let declared = model.layouts[owner.layout.relationshipDestination[r]]
                if !declared.inTree, declared.entity.relationships[inv].isToMany,
                    let inverseKeyspace = layout.setKeyspace[declared.index][inv]
                {
                    // The usual graph: a to-many inverse on an entity without sub-entities. What
                    // `linkInverse` looks up for each member is looked up once here, and the
                    // owner's set once for all of them (up to 64).
                    if objects.count <= 64 && setRemoves.isEmpty && orderOverrides.isEmpty {
                        let added = setAdds[k, default: []].insert(keysOf: objects)
                        guard added != 0 else { return }
                        touch(owner)
                        for (i, o) in objects.enumerated() where added & (1 << UInt64(i)) != 0 {
                            let inverseKey = EngineKey(rawValue: o.engineKey).inKeyspace(inverseKeyspace).rawValue
                            addMember(owner.engineKey, toSet: inverseKey, owner: o, memberIsNew: true)
                        }
                        return
                    }
                    for o in objects where addNewMember(o.engineKey, toSet: k, owner: owner) {
                        let inverseKey = EngineKey(rawValue: o.engineKey).inKeyspace(inverseKeyspace).rawValue
                        addMember(owner.engineKey, toSet: inverseKey, owner: o, memberIsNew: true)
                    }
                    return
                }
            }
            for o in objects where addNewMember(o.engineKey, toSet: k, owner: owner) {
                try linkInverse(owner, r, o.engineKey, adding: true, otherObject: o)
            }
            return
        }
        let current = relatedKeys(owner.engineKey, owner.layout, r)
        for o in objects where !current.contains(o.engineKey) {
            addMember(
                o.engineKey, owner: owner.engineKey, owner.layout, r, ownerObject: owner,
                memberIsNew: o.flags.contains(.inserted))
            try linkInverse(owner, r, o.engineKey, adding: true, otherObject: o)
        }
    }

    func removeRelated(_ owner: ManagedObject, relationship r: Int, _ objects: [ManagedObject]) throws {
        let current = relatedKeys(owner.engineKey, owner.layout, r)
        for o in objects where current.contains(o.engineKey) {
            removeMember(o.engineKey, owner: owner.engineKey, owner.layout, r)
            try linkInverse(owner, r, o.engineKey, adding: false)
        }
    }

    func replaceRelated(_ owner: ManagedObject, relationship r: Int, with objects: [ManagedObject]) throws {
        for o in objects { try checkRelated(owner, r, o) }
        let wanted = Set(objects.map(\.engineKey))
        let current = relatedKeys(owner.engineKey, owner.layout, r)
        let gone = try current.subtracting(wanted).map { try object(forKey: $0) }
        try removeRelated(owner, relationship: r, gone)
        try addRelated(owner, relationship: r, objects.filter { !current.contains($0.engineKey) })
    }

}
