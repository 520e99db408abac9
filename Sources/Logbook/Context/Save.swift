import Dispatch
import Foundation
import LogbookEngine

/// What a save (or a merge, a refresh, a reset) changed, by object ID: handed to the other
/// contexts to merge, and to observers (Core Data's `NSManagedObjectContextDidSave` user info).
///
/// A client can make one to merge changes made outside contexts, for example the object IDs a
/// batch request returned:
///
/// ```swift
/// let result = try context.execute(update)                       // resultType: .objectIDs
/// viewContext.mergeChanges(ContextChanges(updated: Set(result.objectIDs)))
/// ```
public struct ContextChanges: Sendable {
    /// Objects inserted.
    public var inserted: Set<ObjectID>
    /// Objects whose values or relationships changed.
    public var updated: Set<ObjectID>
    /// Objects deleted.
    public var deleted: Set<ObjectID>
    /// Objects a merge or a refresh reloaded from the store (`NSRefreshedObjectsKey`).
    public var refreshed: Set<ObjectID> = []
    /// Objects that can no longer be used (`NSInvalidatedObjectsKey`).
    public var invalidated: Set<ObjectID> = []
    /// Every object of the context was invalidated (a reset: `NSInvalidatedAllObjectsKey`).
    public var invalidatedAll = false
    /// The store version the save committed (0 when not from a save).
    public var version: UInt64

    /// Changes by object ID, for `mergeChanges(_:)` and observers.
    public init(
        inserted: Set<ObjectID> = [], updated: Set<ObjectID> = [], deleted: Set<ObjectID> = [], version: UInt64 = 0
    ) {
        self.inserted = inserted
        self.updated = updated
        self.deleted = deleted
        self.version = version
    }

    /// Whether nothing changed.
    public var isEmpty: Bool {
        inserted.isEmpty && updated.isEmpty && deleted.isEmpty && refreshed.isEmpty && invalidated.isEmpty
            && !invalidatedAll
    }
}

extension ManagedObjectContext {
    /// Validates every changed object and writes all changes in one transaction.
    ///
    /// Validation failures (a missing required value, a value out of range, a relationship
    /// count out of bounds, a deletion a `.deny` rule refuses…) are all reported at once in one
    /// `.validation` error, and nothing is written. A failed save keeps the changes unsaved.
    public func save() throws {
        guard hasChanges || !pendingErrors.isEmpty else { return }
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
        if let parent {
            try pushToParent(parent)
            return
        }
        post(.willSave)
        // Conflict check, transaction and commit under the container's save lock: no other
        // save can write between the check and the commit.
        // The changed objects this save writes, for their new base version once it commits.
        var savedUpdates: [Unmanaged<ManagedObject>] = []
        let version = try container.withSaveLock { log -> UInt64 in
            try enforceConstraints()
            var round = 0
            while true {
                let (conflicts, seen) = try findConflicts(log)
                if conflicts.isEmpty { break }
                // Resolving can change more objects (inverse sides): check those too.
                try resolve(conflicts, version: seen)
                round += 1
                if round > 8 { break }
            }
            var transaction = Transaction()
            var buffer: [UInt8] = []
            buffer.reserveCapacity(256)
            let layout = storeLayout
            // Inserted objects come in runs of one entity: what its records need is looked up
            // once a run.
            var plan = RecordPlan(entity: nil, layout: layout)
            for object in inserted.values {
                if plan.entity !== object.layout { plan = RecordPlan(entity: object.layout, layout: layout) }
                plan.encode(object.slots, key: object.engineKey, into: &transaction, buffer: &buffer, layout: layout)
            }
            var written: [UInt64] = []
            // Changed objects in key order: records read together later (by key) then sit together.
            // Sorted with their objects, unretained (`updated` holds them until the save ends): no
            // lookup by key afterwards.
            var changed: [(key: UInt64, object: Unmanaged<ManagedObject>)] = []
            changed.reserveCapacity(updated.count)
            for (key, object) in updated where object.recordChanged { changed.append((key, .passUnretained(object))) }
            changed.sort { $0.key < $1.key }
            written.reserveCapacity(changed.count + deleted.count)
            for (key, object) in changed {
                encode(object.takeUnretainedValue(), into: &transaction, buffer: &buffer, layout: layout)
                written.append(key)
            }
            savedUpdates = changed.map(\.object)
            // The sets of deleted objects go with them (their pending changes are skipped).
            var deletedSets = Set<UInt64>()
            for object in deleted.values {
                transaction.delete(object.engineKey)
                written.append(object.engineKey)
                for r in object.layout.toMany {
                    let k = layout.setKey(entity: object.layout.index, relationship: r, owner: object.engineKey)
                    transaction.replaceMembers(EmptyCollection(), ofSet: k)
                    deletedSets.insert(k)
                }
            }
            for (k, members) in setRemoves where deletedSets.isEmpty || !deletedSets.contains(k) {
                transaction.removeMembers(members, fromSet: k)
            }
            for (k, members) in setAdds where deletedSets.isEmpty || !deletedSets.contains(k) {
                members.withAscending { transaction.addMembers($0, toSet: k) }
            }
            try writeOrders(into: &transaction, skipping: deletedSets)
            // The orders of deleted owners go with their sets.
            let orderSnapshot = deleted.isEmpty ? nil : container.store.snapshot()
            for object in deleted.values {
                for r in object.layout.toMany {
                    if let k = layout.orderKey(entity: object.layout.index, relationship: r, owner: object.engineKey) {
                        try deleteOrder(k, snapshot: orderSnapshot!, into: &transaction)
                    }
                }
            }
            if !inserted.isEmpty {
                transaction.put(StoredSchema.countersKey, value: container.countersRecord())
            }
            let version = try commitUnderSaveLock(&transaction) { try historyRecord() }
            log.record(written, version: version)
            return version
        }
        // The change sets, only when someone will read them.
        let changes: ContextChanges? =
            container.hasListeners(besides: self) || hasObservers
            ? ContextChanges(
                inserted: Set(inserted.values.map(\.objectID)), updated: Set(updated.values.map(\.objectID)),
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

    func encode(_ object: ManagedObject, into t: inout Transaction, buffer: inout [UInt8], layout: StoreLayout) {
        Self.encode(
            object.slots, key: object.engineKey, entity: object.layout, into: &t, buffer: &buffer, layout: layout)
    }

    /// Puts a record and its index keys into a transaction.
    static func encode(
        _ given: [Slot], key: UInt64, entity: EntityLayout, into t: inout Transaction, buffer: inout [UInt8],
        layout: StoreLayout
    ) {
        var slots = given
        // Transient attributes are never stored.
        for i in entity.transientSlots { slots[i] = .null }
        let indexed = layout.indexedSlots[entity.index]
        if indexed.count <= 1, layout.constraintIndexes[entity.index].isEmpty,
            layout.compoundIndexes[entity.index].isEmpty, let size = RecordCodec.encodedSize(slots, layout: entity)
        {
            // The common case: the record written straight into the transaction.
            let indexKey = indexed.first.map {
                StoreLayout.indexKey(slots[$0.slot], slot: $0.slot, entity: entity, index: $0.index)
            }
            t.put(key, valueCount: size, indexKey: indexKey) { out in
                RecordCodec.write(slots, layout: entity, to: out)
            }
            return
        }
        RecordCodec.encode(slots, layout: entity, into: &buffer)
        t.put(key, value: buffer, indexKeys: layout.indexKeys(slots, entity: entity))
    }

    /// What writing one entity's records needs, looked up once for a run of them: the store
    /// layout's per-entity tables and the index's attribute type were looked up (and their
    /// arrays and the type's payload retained and released) for every record.
    struct RecordPlan {
        let entity: EntityLayout?
        /// No transient attribute, at most one index, on one attribute, and no constraint or
        /// compound index: the record is written straight into the transaction.
        let direct: Bool
        let index: (slot: Int, id: IndexID, type: AttributeType)?

        init(entity: EntityLayout?, layout: StoreLayout) {
            self.entity = entity
            guard let entity else {
                direct = false
                index = nil
                return
            }
            let indexed = layout.indexedSlots[entity.index]
            direct =
                entity.transientSlots.isEmpty && indexed.count <= 1 && layout.constraintIndexes[entity.index].isEmpty
                && layout.compoundIndexes[entity.index].isEmpty
            index = indexed.first.map {
                ($0.slot, $0.index, $0.slot < entity.attributeCount ? entity.entity.attributes[$0.slot].type : .int64)
            }
        }

        /// `ManagedObjectContext.encode(_:key:entity:into:buffer:layout:)`, with what this plan
        /// looked up.
        func encode(_ slots: [Slot], key: UInt64, into t: inout Transaction, buffer: inout [UInt8], layout: StoreLayout)
        {
            guard direct, let entity, let size = RecordCodec.encodedSize(slots, layout: entity) else {
                ManagedObjectContext.encode(slots, key: key, entity: entity!, into: &t, buffer: &buffer, layout: layout)
                return
            }
            let indexKey = index.map { RecordCodec.indexKey(slots[$0.slot], type: $0.type, index: $0.id) }
            t.put(key, valueCount: size, indexKey: indexKey) { out in
                RecordCodec.write(slots, layout: entity, to: out)
            }
        }
    }

    /// After a save (to the store or into a parent): changed objects hold their values as
    /// saved, deleted ones become unusable, and the change sets and undo steps start afresh.
    func settleSavedChanges() {
        for o in updated.values {
            o.flags.remove(.updated)
            o.committed = nil
        }
        for o in deleted.values {
            o.flags = [.invalid, .deleted]
            unregister(o.engineKey)
        }
        updated = [:]
        deleted = [:]
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

    /// Computes the derived attributes of what the save writes.
    func deriveAttributes() throws {
        guard model.layouts.contains(where: { !$0.derivedSlots.isEmpty }) else { return }
        let objects = Array(inserted.values) + updated.values.filter { !$0.flags.contains(.fault) }
        for o in objects where !o.layout.derivedSlots.isEmpty {
            for (slot, expression) in o.layout.derivedSlots {
                let type = o.layout.entity.attributes[slot].type
                let value: Slot
                do { value = try Slot(computed: try expression.evaluate(with: o), type: type) } catch let m
                    as Slot.Mismatch
                {
                    throw LogbookError(
                        .typeMismatch, "the derivation \(expression) gives \(m.got), not \(m.expected)",
                        entity: o.layout.name, key: o.layout.slotNames[slot], objectID: o.objectID)
                }
                if o.slots[slot] != value { setSlot(o, slot, value) }
            }
        }
    }

    /// Every reason the changed objects cannot be saved.
    func validate() -> [ValidationFailure] {
        var failures: [ValidationFailure] = []
        func fail(_ o: ManagedObject, _ key: String, _ reason: String) {
            failures.append(ValidationFailure(objectID: o.objectID, entity: o.layout.name, key: key, reason: reason))
        }
        for object in inserted.values { check(object) }
        for object in updated.values where !object.flags.contains(.fault) { check(object) }
        func check(_ object: ManagedObject) {
            let layout = object.layout
            for i in layout.requiredSlots where object.slots[i].isNull {
                fail(object, layout.slotNames[i], "a value is required")
            }
            if !layout.ruleSlots.isEmpty { layout.checkRules(object.slots) { fail(object, $0, $1) } }
            if layout.hasRelationshipRules { checkRelationships(object) }
        }
        func checkRelationships(_ object: ManagedObject) {
            for (r, rel) in object.layout.entity.relationships.enumerated() {
                if rel.isToMany {
                    if rel.minCount > 0 || rel.maxCount < .max {
                        let n = relatedKeys(object.engineKey, object.layout, r).count
                        if n < rel.minCount || n > rel.maxCount {
                            fail(object, rel.name, "\(n) related objects; \(rel.minCount)...\(rel.maxCount) allowed")
                        }
                    }
                } else if !rel.isOptional, object.slots[object.layout.slot(ofToOne: r)].isNull {
                    fail(object, rel.name, "a related object is required")
                }
            }
        }
        for object in deleted.values {
            for (r, rel) in object.layout.entity.relationships.enumerated() where rel.deleteRule == .deny {
                let related: Int
                if rel.isToMany {
                    related = relatedKeys(object.engineKey, object.layout, r).count
                } else {
                    related = object.slots[object.layout.slot(ofToOne: r)].isNull ? 0 : 1
                }
                if related > 0 {
                    fail(
                        object, rel.name,
                        "the delete rule is deny and \(related) related object\(related == 1 ? " is" : "s are") still there"
                    )
                }
            }
        }
        return failures
    }

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

extension EntityLayout {
    /// Calls `fail(key, reason)` for each validation rule an attribute's value breaks.
    func checkRules(_ slots: [Slot], _ fail: (String, String) -> Void) {
        for i in ruleSlots {
            let a = entity.attributes[i]
            let slot = slots[i]
            if slot.isNull { continue }
            for rule in a.rules {
                switch rule {
                case .range(let range):
                    if let n = slot.number, !range.contains(n) {
                        fail(a.name, "\(n) is outside \(range.lowerBound)...\(range.upperBound)")
                    }
                    if case .double(let d) = slot, a.type == .date, !range.contains(d) {
                        fail(a.name, "the date is outside the allowed range")
                    }
                case .length(let range):
                    var n: Int?
                    if case .string(let s) = slot { n = s.count }
                    if case .data(let d) = slot { n = d.count }
                    if let n, !range.contains(n) {
                        fail(a.name, "length \(n) is outside \(range.lowerBound)...\(range.upperBound)")
                    }
                case .pattern(let pattern):
                    if case .string(let s) = slot {
                        let ok =
                            (try? NSRegularExpression(pattern: "^(?:\(pattern))$"))
                            .map { $0.firstMatch(in: s, range: NSRange(s.startIndex..., in: s)) != nil } ?? false
                        if !ok { fail(a.name, "\"\(s)\" does not match \(pattern)") }
                    }
                case .custom(let check):
                    if let reason = check(slot.value(type: a.type)) { fail(a.name, reason) }
                }
            }
        }
    }
}
