import Foundation
import LogbookEngine

extension ManagedObjectContext {
    // MARK: Delete

    /// Marks an object deleted (`isDeleted` becomes true) and applies the delete rules of its
    /// relationships: nullify, cascade, deny (checked at save), no action. `save()` removes it.
    public func delete(_ object: ManagedObject) {
        guard !object.flags.contains(.deleted), !object.flags.contains(.invalid), object.contextRef === self else {
            return
        }
        do {
            try undoable { try deleteWithRules(object) }
        } catch let error as LogbookError where error.code == .objectNotFound && object.flags.contains(.fault) {
            // A fault of an object that is no longer there (another save, or the parent,
            // deleted it): what the deletion asks is done already (checker seed 55824).
            forgetDeletedInStore(object)
        } catch let error as LogbookError {
            recordError(error)
        } catch {
            recordError(LogbookError(.store, "\(error)"))
        }
    }

    func deleteWithRules(_ object: ManagedObject) throws {
        guard !object.flags.contains(.deleted) else { return }
        try fulfill(object)
        willChange(object)
        object.flags.insert(.deleted)
        let key = object.engineKey
        let wasInserted = object.flags.contains(.inserted)
        if wasInserted {
            object.flags.remove(.inserted)
            inserted.removeOne()
        } else {
            if object.committed == nil { object.committed = object.slots }
            updated[key] = nil
            object.flags.remove(.updated)
            deleted[key] = object
        }
        for (r, rel) in object.layout.entity.relationships.enumerated() {
            let related: [UInt64]
            if rel.isToMany {
                related = Array(relatedKeys(key, object.layout, r))
            } else if case .object(let k) = object.slots[object.layout.slot(ofToOne: r)] {
                related = [k]
            } else {
                related = []
            }
            switch rel.deleteRule {
            case .nullify:
                for k in related { try linkInverse(object, r, k, adding: false) }
            case .cascade:
                for k in related {
                    try linkInverse(object, r, k, adding: false)
                    let other = try self.object(forKey: k)
                    try deleteWithRules(other)
                }
            case .deny, .noAction:
                break
            }
        }
        // An object that was never saved leaves no set of its own behind: its sets' pending
        // members would be written for an owner the store never holds, and found by the next
        // object given its key after a reopen (checker seed 1018655).
        if wasInserted {
            for r in object.layout.toMany {
                let owned = setKey(key, object.layout, r)
                setAdds[owned] = nil
                setRemoves[owned] = nil
                orderOverrides[owned] = nil
            }
        }
    }

    // MARK: Rollback and reset

    /// Forgets every unsaved change: inserted objects go away, changed ones get their saved
    /// values back, deleted ones come back.
    public func rollback() {
        let dropped = hasObservers ? Array(inserted.values) : []
        let refreshed = hasObservers ? Array(updated.values) + Array(deleted.values) : []
        for o in inserted.values {
            o.resetFlags([.invalid])
            unregister(o.engineKey)
        }
        for o in Array(updated.values) + Array(deleted.values) {
            if let c = o.committed { o.slots = c }
            o.committed = nil
            o.flags.subtract([.updated, .deleted])
        }
        clearChanges()
        if hasObservers {
            var changes = ContextChanges()
            changes.refreshed = Set(refreshed.map(\.objectID))
            changes.invalidated = Set(dropped.map(\.objectID))
            if !changes.isEmpty { post(.objectsDidChange(changes)) }
        }
    }

    /// Forgets the change sets (the objects were dealt with by the caller).
    private func clearChanges() {
        inserted = InsertedObjects()
        updated = [:]
        deleted = [:]
        setAdds = [:]
        setRemoves = [:]
        orderOverrides = [:]
        pinnedChanges = [:]
        pendingErrors = []
        undoHistory?.removeAll()
    }

    /// Forgets everything: unsaved changes, and every registered object, which can no longer
    /// be used (reading it by key is an `.objectInvalidated` error).
    public func reset() {
        for o in registeredObjects { o.resetFlags([.invalid]) }
        for o in inserted.values { o.resetFlags([.invalid]) }
        registry.withLock { $0 = RegistryTable() }
        clearChanges()
        advancePinnedSnapshot()
        var changes = ContextChanges()
        changes.invalidatedAll = true
        post(.objectsDidChange(changes))
    }

    /// Reloads an object from the store (Core Data's `refresh(_:mergeChanges:)`).
    ///
    /// With `mergeChanges` false the object drops its unsaved changes (a deletion included)
    /// and becomes a fault that reads the store's current values when next touched. With
    /// `true` an object without changes does the same, and one with changes takes the store's
    /// current values and applies its own changes over them.
    public func refresh(_ object: ManagedObject, mergeChanges: Bool) {
        guard !object.flags.contains(.inserted), !object.flags.contains(.invalid), object.contextRef === self else {
            return
        }
        var changes = ContextChanges()
        changes.refreshed = [object.objectID]
        if mergeChanges && object.hasChanges {
            do { try mergeStoreValues(into: object, from: readSnapshot(), pinning: false) } catch {
                turnIntoFault(object)
            }
        } else {
            if object.flags.contains(.deleted) {
                object.flags.remove(.deleted)
                deleted[object.engineKey] = nil
            }
            // The other side of every relationship change dropped here goes back too.
            try? dropPendingLinks(of: object)
            turnIntoFault(object)
        }
        post(.objectsDidChange(changes))
    }

    /// Refreshes every registered object, merging its changes (Core Data's
    /// `refreshAllObjects()`): unchanged objects become faults that read the latest values.
    public func refreshAllObjects() {
        advancePinnedSnapshot()
        let snapshot = readSnapshot()
        var changes = ContextChanges()
        for o in registeredObjects where !o.flags.contains(.inserted) && !o.flags.contains(.invalid) {
            do { try mergeStoreValues(into: o, from: snapshot, pinning: false) } catch { turnIntoFault(o) }
            changes.refreshed.insert(o.objectID)
        }
        if !changes.isEmpty { post(.objectsDidChange(changes)) }
    }
}

extension ManagedObjectContext {
    /// Undoes the unsaved relationship changes of `object` on both sides: each to-one value it
    /// changed goes back to the saved one (the old destination gets it back, the new one loses
    /// it), and each member added to or removed from its sets goes back (a member's to-one
    /// value, or its own set, with it). Its sets' pending changes and orders are dropped.
    func dropPendingLinks(of object: ManagedObject) throws {
        let layout = object.layout
        if !object.flags.contains(.fault) {
            for r in layout.toOne where layout.relationshipInverse[r] != nil { try revertToOne(object, r) }
        }
        for r in layout.toMany {
            let k = setKey(object.engineKey, layout, r)
            let added = setAdds[k].map(Array.init) ?? []
            let removed = setRemoves[k].map(Array.init) ?? []
            if let inv = layout.relationshipInverse[r], !added.isEmpty || !removed.isEmpty {
                let declared = model.layouts[layout.relationshipDestination[r]]
                for m in added + removed {
                    let destination = declared.inTree ? (self.layout(forKey: m) ?? declared) : declared
                    if destination.entity.relationships[inv].isToMany {
                        // Many-to-many: the member's set goes back.
                        try linkInverse(object, r, m, adding: removed.contains(m))
                    } else if let member = registered(m), !member.flags.contains(.fault) {
                        try revertToOne(member, inv)
                    }
                }
            }
            setAdds[k] = nil
            setRemoves[k] = nil
            orderOverrides[k] = nil
        }
    }

    /// Sets `object`'s to-one relationship `r` back to its saved value, and its inverse with it.
    func revertToOne(_ object: ManagedObject, _ r: Int) throws {
        let slot = object.layout.slot(ofToOne: r)
        let current = object.slots[slot]
        let saved = object.committed?[slot] ?? (object.flags.contains(.inserted) ? .null : current)
        guard current != saved else { return }
        if case .object(let k) = current { try linkInverse(object, r, k, adding: false) }
        object.slots[slot] = saved
        if case .object(let k) = saved { try linkInverse(object, r, k, adding: true) }
    }
}
