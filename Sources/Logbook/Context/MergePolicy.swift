import LogbookEngine

/// How a save resolves a conflict: an object it writes or deletes whose record another save
/// changed (or deleted) since this context read it. Core Data's `NSMergePolicy`, by the same names.
///
/// ```swift
/// context.mergePolicy = .mergeByPropertyObjectTrump
/// try context.save()     // the properties this context changed win; the others take the store's values
/// ```
///
/// Conflicts are found by optimistic locking: each object remembers the version of the store
/// its values were read at, and a save compares the record it is about to replace with those
/// values when another save wrote it since. To-many relationships are stored as sets that saves
/// change by additions and removals, so both sides' changes to them are kept under every policy.
public enum MergePolicy: Sendable, Hashable {
    /// The save fails with a `.mergeConflict` error that lists every conflict
    /// (`LogbookError.conflicts`); nothing is written. The default, as in Core Data.
    case error
    /// Property by property: the properties this context changed keep its values, the others
    /// take the store's (`NSMergeByPropertyObjectTrumpMergePolicy`).
    case mergeByPropertyObjectTrump
    /// Property by property: the properties the other save changed take the store's values,
    /// the others keep this context's (`NSMergeByPropertyStoreTrumpMergePolicy`).
    case mergeByPropertyStoreTrump
    /// This context's version of each conflicting object replaces the store's whole record
    /// (`NSOverwriteMergePolicy`).
    case overwrite
    /// The conflicting objects drop this context's changes to their attributes and to-one
    /// relationships and take the store's values (`NSRollbackMergePolicy`).
    case rollback
}

/// One object a save could not write without undoing another save (Core Data's `NSMergeConflict`).
public struct MergeConflict: Sendable, CustomStringConvertible {
    /// The object in conflict.
    public var objectID: ObjectID
    /// Its entity.
    public var entityName: String
    /// The attributes and to-one relationships whose stored values differ from the values
    /// this context read (empty when the store deleted the object).
    public var changedKeys: [String]
    /// The values this context read, by key (`NSMergeConflict.cachedSnapshot`). To-one
    /// relationships are `ObjectID`s; a missing value is absent.
    public var cachedValues: [String: any Sendable]
    /// The values the store holds now, by key; nil when another save deleted the object
    /// (`NSMergeConflict.persistedSnapshot`).
    public var storeValues: [String: any Sendable]?
    /// Whether this context was deleting the object.
    public var isDeletedInContext: Bool

    /// Whether another save deleted the object.
    public var isDeletedInStore: Bool { storeValues == nil }

    public var description: String {
        if isDeletedInStore { return "\(objectID): deleted by another save" }
        let what = isDeletedInContext ? "deleted here, changed by another save" : "changed by another save"
        return "\(objectID): \(what) (\(changedKeys.joined(separator: ", ")))"
    }
}

/// The keys recent saves replaced or deleted, by version: a save need compare only the
/// records written after its objects were read. Bounded: past `capacity` keys it forgets
/// them all and records the version from which it knows nothing (`horizon`). A write of more
/// than `largeWrite` keys at once (a batch request) is not listed key by key: it moves the
/// horizon to its own version, which costs a later save of objects read before it a
/// comparison of their values with the store's (the conflict check below), never a lost
/// change; objects read after it are not compared.
struct WriteLog {
    private var lastWrite: [UInt64: UInt64] = [:]
    private(set) var horizon: UInt64 = 0
    static let capacity = 1 << 20
    static let largeWrite = 1 << 16

    /// Whether a record read at `version` may have been replaced since.
    func mayHaveChanged(_ key: UInt64, since version: UInt64) -> Bool {
        if version < horizon { return true }
        guard let written = lastWrite[key] else { return false }
        return written > version
    }

    mutating func record(_ keys: some Collection<UInt64>, version: UInt64) {
        if keys.count > Self.largeWrite {
            // Whatever was read at this version or later saw this write.
            lastWrite = [:]
            horizon = max(horizon, version)
            return
        }
        for k in keys { lastWrite[k] = version }
        if lastWrite.count > Self.capacity {
            lastWrite = [:]
            horizon = version + 1
        }
    }
}

extension ManagedObjectContext {
    /// A conflict found at a save: the object and the store's current values (nil: deleted).
    struct FoundConflict {
        let object: ManagedObject
        let current: [Slot]?
    }

    /// The objects whose records this save writes or deletes that another save changed since
    /// they were read. Runs under the container's save lock.
    func findConflicts(_ log: WriteLog) throws -> (conflicts: [FoundConflict], version: UInt64) {
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
        func values(_ slots: [Slot]) -> [String: any Sendable] {
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
    func reconcileInverses(_ o: ManagedObject, base: [Slot], local: [Slot], store: [Slot]) throws {
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

extension ManagedObject {
    /// Whether the save must write the object's record (its attributes or to-one relationships
    /// changed; a change of its to-many sets alone writes only the sets).
    var recordChanged: Bool {
        guard !flags.contains(.fault), let committed else { return false }
        return committed != slots
    }
}
