import Dispatch
import Foundation
import LogbookEngine

// Merging other saves into a context, and refreshing objects from the store.
extension ManagedObjectContext {
    /// Brings a save of another context into this one (Core Data's
    /// `mergeChanges(fromContextDidSave:)`): registered objects the save updated take the new
    /// values of every attribute and relationship they have not changed here, and keep their
    /// own changes; unchanged ones become faults that read the new values; deleted ones become
    /// deleted and unusable.
    public func mergeChanges(_ changes: ContextChanges) {
        let merged = refreshObjects(changes)
        for observer in changeObservers { observer(changes) }
        if !merged.isEmpty { post(.objectsDidChange(merged)) }
        passToChildren(changes)
    }

    /// Children that merge automatically take `changes` from this context (after its merge, or
    /// after a batch request it ran merged its results into it).
    func passToChildren(_ changes: ContextChanges) {
        for child in container.children(of: self)
        where child.automaticallyMergesChangesFromOtherContexts && child.concurrencyType != .confinement {
            child.perform { child.mergeChanges(changes) }
        }
    }

    /// Core Data's name for `mergeChanges(_:)`.
    public func mergeChanges(fromContextDidSave changes: ContextChanges) { mergeChanges(changes) }

    /// Merges a save made in another container or process on the same store into `contexts`,
    /// each on its own queue (Core Data's `mergeChanges(fromRemoteContextSave:into:)`): each
    /// root context reads that process's commits first, then merges as `mergeChanges(_:)` does.
    ///
    /// ```swift
    /// // `changes` came from another process (for example from its history, by token).
    /// ManagedObjectContext.mergeChanges(fromRemoteContextSave: changes, into: [container.viewContext])
    /// ```
    public static func mergeChanges(
        fromRemoteContextSave changes: ContextChanges, into contexts: [ManagedObjectContext]
    ) {
        for context in contexts { context.performAndWait { context.mergeChanges(changes) } }
    }

    /// The registered objects a save changed reload (updated) or go (deleted). Returns what
    /// changed here.
    @discardableResult
    func refreshObjects(_ changes: ContextChanges) -> ContextChanges {
        // A context as of a past version sees no later save.
        if isHistorical { return ContextChanges(version: changes.version) }
        // A context pinned to a query generation moves to the latest one when it merges.
        advancePinnedSnapshot()
        // The save may be another process's (`mergeChanges(fromRemoteContextSave:)`): its
        // commits are read first. A failure to read them leaves the objects as they were.
        if !changes.updated.isEmpty || !changes.inserted.isEmpty { try? catchUpWithOtherWriters() }
        var merged = ContextChanges(version: changes.version)
        var snapshot: Snapshot?
        for id in changes.updated.union(changes.inserted) {
            guard let o = registered(id.key), !o.flags.contains(.inserted) else { continue }
            if snapshot == nil { snapshot = container.store.snapshot() }
            do {
                try mergeStoreValues(into: o, from: snapshot!)
                merged.refreshed.insert(id)
            } catch {
                // The record is gone or unreadable: the object becomes a fault, and reading
                // it reports the problem.
                turnIntoFault(o)
            }
        }
        for id in changes.deleted {
            guard let o = registered(id.key) else { continue }
            forgetDeletedInStore(o)
            merged.invalidated.insert(id)
            merged.deleted.insert(id)
        }
        if !changes.deleted.isEmpty { unlinkPending(toDeleted: Set(changes.deleted.map(\.key))) }
        return merged
    }

    /// Reloads `o` from `snapshot`: without unsaved changes it becomes a fault that reads the
    /// stored values when next touched; with them, it takes the stored values of what it has
    /// not changed and keeps its changes (they are compared from then on with the new values).
    ///
    /// `pinning`: a merge of another save's changes keeps a change that an ancestor's unsaved
    /// value happens to equal (`pinnedChanges`); a refresh the app asks for
    /// (`refresh(_:mergeChanges: true)`, `refreshAllObjects()`) takes the parent's value for
    /// such a change, as Core Data compares with the snapshot it reloads (checker seed 21294).
    func mergeStoreValues(into o: ManagedObject, from snapshot: Snapshot, pinning: Bool = true) throws {
        if !pinning { pinnedChanges[o.engineKey] = nil }
        if o.flags.contains(.fault) || !(o.flags.contains(.updated) || o.flags.contains(.deleted)) {
            turnIntoFault(o)
            return
        }
        // A child's "store" is its parent's view: the parent's unsaved values where it has
        // them, else the store's.
        let parentView = try parent.flatMap { try parentState(of: o.engineKey, parent: $0) }
        let stored: [FieldValue]?
        if let parentView {
            // An ancestor's unsaved deletion is not final (it may still reset or roll back):
            // this context's changes stay, over the store's values (checker seed 441589's
            // shape, with the merge arriving late: the child lost the grandchild's change).
            stored = try parentView.slots ?? decode(snapshot, key: o.engineKey, layout: o.layout)
        } else {
            stored = try decode(snapshot, key: o.engineKey, layout: o.layout)
        }
        guard let store = stored else {
            forgetDeletedInStore(o)
            return
        }
        let base = o.committed ?? o.slots
        let local = o.slots
        var merged = local
        let pinned = pinnedChanges[o.engineKey] ?? []
        for i in local.indices where local[i] == base[i] && !pinned.contains(i) { merged[i] = store[i] }
        o.slots = merged
        o.committed = store
        if pinning && parentView?.slots != nil {
            // A change made here that an ancestor's unsaved value happens to equal stays a
            // change (`pinnedChanges`; checker seed 663777: a grandchild's name was lost). One
            // that the store's value equals is settled, as in a context without a parent
            // (seed 636107: pinned, it undid a later save's change).
            let saved = try decode(snapshot, key: o.engineKey, layout: o.layout)
            for i in local.indices where local[i] != base[i] && store[i] == local[i] && saved?[i] != local[i] {
                pinnedChanges[o.engineKey, default: []].insert(i)
            }
        }
        o.baseVersion = snapshot.version
        // A to-one value changed here and by the other save: this context's value stays, so the
        // object leaves the set of the destination the other save gave it (the inverse of a
        // to-one and its value travel together).
        let layout = o.layout
        for (n, r) in layout.toOne.enumerated() where layout.relationshipInverse[r] != nil {
            let i = layout.attributeCount + n
            guard local[i] != base[i], store[i] != base[i] else { continue }
            if store[i] == local[i] {
                // The other save made the same change: the pending inverse changes are in the
                // store now, and go.
                forgetPendingInverse(o, r, local[i], added: true)
                forgetPendingInverse(o, r, base[i], added: false)
            } else {
                // The other save took the object out of the old destination's set already: the
                // pending removal from it is in the store now, and goes (kept, it cancelled a
                // later addition back to that set as "no change": checker seed 5032047).
                forgetPendingInverse(o, r, base[i], added: false)
                if case .object(let k) = store[i] { try linkInverse(o, r, k, adding: false) }
            }
        }
    }

    /// Makes `o` a fault that reads the store when next touched (its cached bytes and batch
    /// are dropped, so it cannot read an older version).
    func turnIntoFault(_ o: ManagedObject) {
        pinnedChanges[o.engineKey] = nil
        o.batch?.forget(o)
        o.batch = nil
        o.rawArena = nil
        o.committed = nil
        if o.flags.contains(.updated) {
            o.flags.remove(.updated)
            updated[o.engineKey] = nil
        }
        o.flags.insert(.fault)
    }
}

extension ManagedObjectContext {
    /// The unsaved links of this context to objects another save deleted, dropped as the
    /// deletion's nullify rule would drop them (Core Data's merge deletes the objects in the
    /// merging context): to-one values become nil, set additions naming them go, and the sets
    /// they owned lose their pending changes and orders.
    func unlinkPending(toDeleted keys: Set<UInt64>) {
        guard !setAdds.isEmpty || !updated.isEmpty || !inserted.isEmpty || !orderOverrides.isEmpty else { return }
        for o in Array(inserted.values) + Array(updated.values) where !o.flags.contains(.fault) {
            let layout = o.layout
            for n in layout.toOne.indices {
                let i = layout.attributeCount + n
                if case .object(let k) = o.slots[i], keys.contains(k) { o.slots[i] = .null }
            }
        }
        for k in keys {
            guard let layout = self.layout(forKey: k) else { continue }
            for r in layout.toMany {
                let owned = setKey(k, layout, r)
                setAdds[owned] = nil
                setRemoves[owned] = nil
                orderOverrides[owned] = nil
            }
        }
        for (k, members) in setAdds where members.contains(where: keys.contains) {
            var kept = members
            for m in members where keys.contains(m) { _ = kept.remove(m) }
            setAdds[k] = kept.isEmpty ? nil : kept
        }
        for (k, order) in orderOverrides where order.contains(where: keys.contains) {
            orderOverrides[k] = order.filter { !keys.contains($0) }
        }
    }
}

extension ManagedObjectContext {
    /// Forgets a pending change of the inverse set of `o`'s to-one relationship `r` (the
    /// addition of `o` to `target`'s set, or its removal), without recording the opposite.
    func forgetPendingInverse(_ o: ManagedObject, _ r: Int, _ target: FieldValue, added: Bool) {
        guard case .object(let k) = target, let inv = o.layout.relationshipInverse[r] else { return }
        let declared = model.layouts[o.layout.relationshipDestination[r]]
        let destination = declared.inTree ? (layout(forKey: k) ?? declared) : declared
        guard destination.entity.relationships[inv].isToMany else { return }
        let set = setKey(k, destination, inv)
        if added {
            if setAdds[set]?.remove(o.engineKey) != nil, setAdds[set]!.isEmpty { setAdds[set] = nil }
        } else {
            if setRemoves[set]?.remove(o.engineKey) != nil, setRemoves[set]!.isEmpty { setRemoves[set] = nil }
        }
    }
}
