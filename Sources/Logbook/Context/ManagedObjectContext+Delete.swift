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
        if object.flags.contains(.inserted) {
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
    }

    // MARK: Rollback and reset

    /// Forgets every unsaved change: inserted objects go away, changed ones get their saved
    /// values back, deleted ones come back.
    public func rollback() {
        for o in inserted.values {
            o.flags = [.invalid]
            unregister(o.engineKey)
        }
        for o in Array(updated.values) + Array(deleted.values) {
            if let c = o.committed { o.slots = c }
            o.committed = nil
            o.flags.subtract([.updated, .deleted])
        }
        clearChanges()
    }

    /// Forgets the change sets (the objects were dealt with by the caller).
    private func clearChanges() {
        inserted = InsertedObjects()
        updated = [:]
        deleted = [:]
        setAdds = [:]
        setRemoves = [:]
        pendingErrors = []
        undoHistory?.removeAll()
    }

    /// Forgets everything: unsaved changes, and every registered object, which can no longer
    /// be used (reading it by key is an `.objectInvalidated` error).
    public func reset() {
        for o in registeredObjects { o.flags = [.invalid] }
        for o in inserted.values { o.flags = [.invalid] }
        registry.withLock { $0 = RegistryTable() }
        clearChanges()
    }

    /// Reloads an object's values from the store, dropping its unsaved changes if `mergeChanges` is false.
    public func refresh(_ object: ManagedObject, mergeChanges: Bool) {
        guard !object.flags.contains(.inserted), object.contextRef === self else { return }
        if !mergeChanges || !object.hasChanges {
            object.flags.insert(.fault)
            object.flags.subtract([.updated])
            object.committed = nil
            updated[object.engineKey] = nil
        }
    }
}
