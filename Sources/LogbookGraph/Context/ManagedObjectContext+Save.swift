import Dispatch
import Foundation
import LogbookEngine

extension ManagedObjectContext {
    /// Validates every changed object and writes all changes in one transaction.
    ///
    /// Validation failures (a missing required value, a value out of range, a relationship
    /// count out of bounds, a deletion a `.deny` rule refuses…) are all reported at once in one
    /// `.validation` error, and nothing is written. A failed save keeps the changes unsaved.
    ///
    /// The phases, in order: preflight (`preflightSave`: setter errors, derived attributes,
    /// validation); into the parent for a child context; then, under the container's save lock
    /// so that no other save writes between the check and the commit, uniqueness constraints,
    /// conflicts (`resolveConflicts`), links to objects no longer there (`checkLinks`), the transaction (`buildSaveTransaction`,
    /// `Storage/SaveTransaction.swift`) and the commit (`StoreWriter.commit`); last, settling
    /// the objects and telling the other contexts (`settleSave`).
    public func save() throws {
        guard hasChanges || !pendingErrors.isEmpty || !attachedRecords.isEmpty else { return }
        try preflightSave()
        if let parent {
            try pushToParent(parent)
            return
        }
        post(.willSave)
        let (version, savedUpdates, unlinked) = try container.writer.withSaveLock {
            recent -> (UInt64, [Unmanaged<ManagedObject>], [UInt64]) in
            try enforceConstraints()
            try resolveConflicts(recent)
            try checkLinks(container.store.snapshot(), recent: recent)
            var save = try buildSaveTransaction()
            let version = try container.writer.commit(&save.transaction) { try historyRecord() }
            recent.record(save.written, version: version)
            return (version, save.savedUpdates, save.unlinked)
        }
        attachedRecords = [:]
        settleSave(version: version, savedUpdates: savedUpdates, unlinked: unlinked)
    }

    /// What a save checks before it writes anything: a historical context cannot save, errors
    /// property setters kept are thrown, derived attributes are computed, and every changed
    /// object is validated (all failures in one `.validation` error).
    private func preflightSave() throws {
        if isHistorical {
            throw LogbookError(
                .readOnly,
                "this context reads the store as of version \(pinnedSnapshot?.version ?? 0); it cannot save (rollback() drops its changes)"
            )
        }
        if let first = pendingErrors.first {
            var e = first
            if pendingErrors.count > 1 {
                e.message += " (and \(pendingErrors.count - 1) more errors from property setters)"
            }
            throw e
        }
        try deriveAttributes()
        let failures = validate()
        if !failures.isEmpty {
            var e = LogbookError(
                .validation,
                failures.count == 1 ? "1 object failed validation" : "\(failures.count) validation failures")
            e.validationFailures = failures
            throw e
        }
    }

    /// Finds the conflicts of this save and resolves them by the merge policy (under `.error`
    /// the first round throws them all), round after round: resolving one object can change
    /// others (the inverse sides of its to-one relationships), whose records are checked in the
    /// next round. Every round runs under the save lock, so the store cannot change between
    /// rounds: an object already resolved in this save was resolved against the very values
    /// the store still holds, and is not resolved again. Each round resolves at least one object
    /// not resolved before, so the rounds end, and the save never commits over a conflict
    /// found and left unresolved.
    private func resolveConflicts(_ recent: RecentWrites) throws {
        var resolved = Set<UInt64>()
        while true {
            let (found, seen) = try findConflicts(recent)
            let fresh = found.filter { resolved.insert($0.object.engineKey).inserted }
            if fresh.isEmpty { return }
            try resolve(fresh, version: seen)
        }
    }

    /// After the commit of `version`: inserted objects join the registry (or go, when only the
    /// save held them), changed objects take the commit's version, the change sets start
    /// afresh, and the other contexts and observers hear of the save.
    private func settleSave(version: UInt64, savedUpdates: [Unmanaged<ManagedObject>], unlinked: [UInt64]) {
        // The change sets, only when someone will read them.
        let changes: ContextChanges? =
            container.hasListeners(besides: self) || hasObservers
            ? ContextChanges(
                inserted: Set(inserted.values.map(\.objectID)),
                updated: Set(updated.values.map(\.objectID))
                    .union(unlinked.map { ObjectID(store: storeLayout.identity, key: $0) }),
                deleted: Set(deleted.values.map(\.objectID)), version: version)
            : nil
        // Inserted objects that live on (someone holds them) join the registry; the others go.
        let released = inserted.drain { o, unique in
            o.flags.remove(.inserted)
            o.baseVersion = version
            if !unique { register(o) }
        }
        // The objects only the list held go away on another thread: nothing else can reach
        // them (their deinit touches no context), and the caller need not wait for a million frees.
        if released.count > 10_000 {
            let garbage = UncheckedSendable(released)
            DispatchQueue.global(qos: .utility).async { _ = garbage }
        }
        // Only records this save wrote are known to hold these values now.
        for object in savedUpdates { object.takeUnretainedValue().baseVersion = version }
        settleSavedChanges()
        advancePinnedSnapshot()
        if let changes {
            container.didSave(changes, from: self)
            // Its children that merge automatically merge its own save too (Core Data's
            // `automaticallyMergesChangesFromParent`: "changes saved to its … parent context"):
            // what they read of the saved objects is the store's now (checker seed 868579: a
            // grandchild compared with the value it had read before its grandparent changed and
            // saved the object, and its change back to that value never reached the store).
            passToChildren(changes)
            post(.didSave(changes))
        }
    }

    /// The keys the owner of a set key may have: one per entity whose to-many relationship
    /// uses the set's keyspace (several when a sub-entity inherits the relationship).
    func possibleOwners(ofSet setKey: UInt64) -> [UInt64] {
        var owners: [UInt64] = []
        for (owner, _, _) in storeLayout.owners(ofSet: setKey) where owners.last != owner { owners.append(owner) }
        return owners
    }

    /// After a save (to the store or into a parent): changed objects hold their values as
    /// saved, deleted ones become unusable, and the change sets and undo steps start afresh.
    func settleSavedChanges() {
        for o in updated.values {
            o.flags.remove(.updated)
            o.committed = nil
        }
        for o in deleted.values {
            o.resetFlags([.invalid, .deleted])
            unregister(o.engineKey)
        }
        updated = [:]
        deleted = [:]
        pinnedChanges = [:]
        // A large table of set changes is freed on another thread, as the inserted objects are
        // (a hundred thousand relationship sets took a twentieth of a save to free).
        if setAdds.count > 10_000 {
            let garbage = UncheckedSendable(setAdds)
            DispatchQueue.global(qos: .utility).async { _ = garbage }
        }
        setAdds = [:]
        setRemoves = [:]
        orderOverrides = [:]
        undoHistory?.removeAll()
    }

}
