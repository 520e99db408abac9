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
    }

    /// Core Data's name for `mergeChanges(_:)`.
    public func mergeChanges(fromContextDidSave changes: ContextChanges) { mergeChanges(changes) }

    /// The registered objects a save changed reload (updated) or go (deleted). Returns what
    /// changed here.
    @discardableResult
    func refreshObjects(_ changes: ContextChanges) -> ContextChanges {
        // A context as of a past version sees no later save.
        if isHistorical { return ContextChanges(version: changes.version) }
        // A context pinned to a query generation moves to the latest one when it merges.
        advancePinnedSnapshot()
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
        return merged
    }

    /// Reloads `o` from `snapshot`: without unsaved changes it becomes a fault that reads the
    /// stored values when next touched; with them, it takes the stored values of what it has
    /// not changed and keeps its changes (they are compared from then on with the new values).
    func mergeStoreValues(into o: ManagedObject, from snapshot: Snapshot) throws {
        if o.flags.contains(.fault) || !(o.flags.contains(.updated) || o.flags.contains(.deleted)) {
            turnIntoFault(o)
            return
        }
        guard let store = try decode(snapshot, key: o.engineKey, layout: o.layout) else {
            forgetDeletedInStore(o)
            return
        }
        let base = o.committed ?? o.slots
        let local = o.slots
        var merged = local
        for i in local.indices where local[i] == base[i] { merged[i] = store[i] }
        o.slots = merged
        o.committed = store
        o.baseVersion = snapshot.version
    }

    /// Makes `o` a fault that reads the store when next touched (its cached bytes and batch
    /// are dropped, so it cannot read an older version).
    func turnIntoFault(_ o: ManagedObject) {
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
