import Foundation
import LogbookEngine

/// The attribute values of one record of a batch insert.
///
/// ```swift
/// row.set("Item \(i)", forKey: "name")           // typed: no boxing, the fast way
/// row["done"] = false                             // any value, checked like setValue(_:forKey:)
/// ```
public struct BatchInsertRow {
    let layout: EntityLayout
    var slots: [Slot]
    var error: LogbookError?

    init(layout: EntityLayout) {
        self.layout = layout
        self.slots = layout.defaultSlots
    }

    /// Sets an attribute from a typed value. A wrong key or type fails the whole request.
    public mutating func set<V: AttributeValue>(_ value: V, forKey key: String) {
        guard let slot = layout.slot(named: key), slot < layout.attributeCount else { return unknown(key) }
        let type = layout.entity.attributes[slot].type
        guard let stored = value.storedValue(type: type) else {
            return fail(
                LogbookError(
                    .typeMismatch, "\(key) is \(type); \(V.self) \(value) does not fit", entity: layout.name, key: key))
        }
        slots[slot] = stored.slot
    }

    /// An attribute's value, by key (nil for none); setting checks the type as
    /// `setValue(_:forKey:)` does (transformable values go through their transformer).
    public subscript(key: String) -> Any? {
        get {
            guard let slot = layout.slot(named: key), slot < layout.attributeCount else { return nil }
            return slots[slot].value(type: layout.entity.attributes[slot].type)
        }
        set {
            guard let slot = layout.slot(named: key), slot < layout.attributeCount else { return unknown(key) }
            let type = layout.entity.attributes[slot].type
            do {
                slots[slot] = try Slot(newValue, type: type, transformers: AttributeTransformers.registry)
            } catch let m as Slot.Mismatch {
                fail(
                    LogbookError(
                        .typeMismatch, "\(key) is \(m.expected); \(m.got) does not fit", entity: layout.name, key: key))
            } catch let e as LogbookError {
                fail(e)
            } catch {
                fail(LogbookError(.transformFailed, "\(key): \(error)", entity: layout.name, key: key))
            }
        }
    }

    private mutating func unknown(_ key: String) {
        fail(
            LogbookError(
                .unknownKey, "\(layout.name) has no attribute named \(key) (a batch insert sets attributes only)",
                entity: layout.name, key: key))
    }

    private mutating func fail(_ e: LogbookError) { if error == nil { error = e } }
}

/// Inserts records straight into the store, without managed objects (Core Data's
/// `NSBatchInsertRequest`): one transaction, validated like a save, nothing written if any
/// record fails.
///
/// ```swift
/// let request = BatchInsertRequest(entityName: "Item", count: 1_000_000) { i, row in
///     row.set("Item \(i + 1)", forKey: "name")
///     row.set(Date(), forKey: "createdAt")
/// }
/// let result = try context.execute(request)      // result.count == 1_000_000
/// ```
///
/// Attributes only (relationships are set through objects). Records get new object IDs, as
/// inserted objects do; ask for them with `resultType = .objectIDs`.
public struct BatchInsertRequest {
    /// The entity whose objects are inserted.
    public let entityName: String
    /// What `execute` returns: the count, the object IDs, or nothing.
    public var resultType: BatchResultType = .count
    let count: Int
    let fill: (Int, inout BatchInsertRow) throws -> Void

    /// `count` records, each filled by `fill(index, &row)` (index from 0); attributes not set
    /// keep their default values.
    public init(entityName: String, count: Int, fill: @escaping (Int, inout BatchInsertRow) throws -> Void) {
        self.entityName = entityName
        self.count = count
        self.fill = fill
    }

    /// One record per dictionary of attribute values.
    public init(entityName: String, objects: [[String: Any]]) {
        self.init(entityName: entityName, count: objects.count) { i, row in
            for (key, value) in objects[i] { row[key] = value }
        }
    }
}

/// Changes attributes of every object that matches a predicate straight in the store, without
/// loading objects (Core Data's `NSBatchUpdateRequest`): one transaction, validated, nothing
/// written if any record fails. Indexes follow the new values; the context that runs it, and
/// every context that merges changes automatically, refreshes the objects it holds (they turn
/// into faults and read the new values; unsaved changes stay).
///
/// The result counts (and names) every object the request matched, as Core Data's does, and
/// so do the change notifications and the persistent history; but a record the update leaves
/// byte for byte as it was (`done` already true) is not written again: the journal grows by
/// the records changed only, and an update that changes nothing commits no version (unless
/// history is tracked: its history entry is then the version's only record). The same values
/// are read either way; conflicts are found by comparing values, so a context's later save of
/// such an object is not a conflict (in Core Data it is: its UPDATE bumps every matched row's
/// optimistic-locking version).
///
/// ```swift
/// var request = BatchUpdateRequest(entityName: "Item")
/// request.predicate = try FetchPredicate(format: "done == NO")
/// request.propertiesToUpdate = ["done": true]
/// let updated = try context.execute(request).count
/// ```
public struct BatchUpdateRequest {
    /// The entity whose objects are updated.
    public let entityName: String
    /// Only the objects that satisfy it (all when nil).
    public var predicate: FetchPredicate?
    /// Attribute keys and their new values (`nil`, through `Optional<T>.none`, removes a value).
    public var propertiesToUpdate: [String: Any?] = [:]
    /// What `execute` returns: the count, the object IDs, or nothing.
    public var resultType: BatchResultType = .count

    /// A request that updates objects of the entity named `entityName`.
    public init(entityName: String) { self.entityName = entityName }
}

/// What a batch request returns.
public enum BatchResultType: Sendable {
    /// The number of objects inserted, deleted, or matched by an update (a record an update
    /// leaves as it was is counted, though not written again).
    case count
    /// Also their object IDs.
    case objectIDs
}

/// The outcome of a batch request.
public struct BatchResult: Sendable {
    /// Records inserted or updated.
    public var count: Int
    /// Their IDs, when the request's `resultType` is `.objectIDs` (else empty).
    public var objectIDs: [ObjectID]
}

extension ManagedObjectContext {
    /// Runs a batch insert in one transaction; see `BatchInsertRequest`.
    public func execute(_ request: BatchInsertRequest) throws -> BatchResult {
        let layout = try insertable(model.layout(named: request.entityName))
        guard request.count > 0 else { return BatchResult(count: 0, objectIDs: []) }
        let keys = container.reserveKeys(entity: layout.index, count: UInt64(request.count))
        var transaction = Transaction()
        var buffer: [UInt8] = []
        var row = BatchInsertRow(layout: layout)
        var failures: [ValidationFailure] = []
        let store = storeLayout
        let hasRules = !layout.ruleSlots.isEmpty
        // With uniqueness constraints, rows are upserted: collected first, written under the lock.
        let constrained = !store.constraintIndexes[layout.index].isEmpty
        var rows: [[Slot]] = []
        let defaults = layout.defaultSlots
        for i in 0..<request.count {
            // Reset in place: assigning `defaults` would share it and copy it at the first set.
            for s in defaults.indices { row.slots[s] = defaults[s] }
            try request.fill(i, &row)
            if let e = row.error { throw e }
            let key = keys.lowerBound + UInt64(i)
            for s in layout.requiredSlots where s < layout.attributeCount && row.slots[s].isNull {
                failures.append(
                    ValidationFailure(
                        objectID: ObjectID(store: store.identity, key: key), entity: layout.name,
                        key: layout.slotNames[s], reason: "a value is required"))
            }
            if hasRules {
                layout.checkRules(row.slots) { k, reason in
                    failures.append(
                        ValidationFailure(
                            objectID: ObjectID(store: store.identity, key: key), entity: layout.name, key: k,
                            reason: reason))
                }
            }
            if !failures.isEmpty { continue }
            if constrained {
                rows.append(row.slots)
                continue
            }
            Self.encode(row.slots, key: key, entity: layout, into: &transaction, buffer: &buffer, layout: store)
        }
        if !failures.isEmpty { throw Self.validationError(failures) }
        if constrained { return try upsertRows(rows, keys: keys, layout: layout, resultType: request.resultType) }
        transaction.put(StoredSchema.countersKey, value: container.countersRecord())
        let version = try container.withSaveLock { _ in
            try commitUnderSaveLock(&transaction) { batchHistoryRecord(inserted: Array(keys)) }
        }
        let ids = request.resultType == .objectIDs ? keys.map { ObjectID(store: store.identity, key: $0) } : []
        if container.hasListeners(besides: self) || !changeObservers.isEmpty {
            let all = ids.isEmpty ? keys.map { ObjectID(store: store.identity, key: $0) } : ids
            container.didSave(
                ContextChanges(inserted: Set(all), updated: [], deleted: [], version: version), from: self)
        }
        return BatchResult(count: request.count, objectIDs: ids)
    }

    /// Runs a batch update in one transaction; see `BatchUpdateRequest`.
    public func execute(_ request: BatchUpdateRequest) throws -> BatchResult {
        let layout = try model.layout(named: request.entityName)
        var changes: [(slot: Int, value: Slot)] = []
        var computed: [(slot: Int, expression: FetchExpression)] = []
        for (key, value) in request.propertiesToUpdate.sorted(by: { $0.key < $1.key }) {
            guard let slot = layout.slot(named: key), slot < layout.attributeCount else {
                throw LogbookError(
                    .unknownKey, "\(layout.name) has no attribute named \(key) (a batch update sets attributes only)",
                    entity: layout.name, key: key)
            }
            if let expression = value as? FetchExpression {
                // Computed for each record, on its current values (checked there).
                computed.append((slot, expression))
                continue
            }
            let a = layout.entity.attributes[slot]
            let new: Slot
            do { new = try Slot(value ?? nil, type: a.type, transformers: AttributeTransformers.registry) } catch let m
                as Slot.Mismatch
            {
                throw LogbookError(
                    .typeMismatch, "\(key) is \(m.expected); \(m.got) does not fit", entity: layout.name, key: key)
            }
            if new.isNull && !a.isOptional {
                throw LogbookError(
                    .validation, "\(key) requires a value; a batch update cannot remove it", entity: layout.name,
                    key: key)
            }
            var failure: String?
            layout.checkRules(
                Array(repeating: .null, count: slot) + [new]
                    + Array(repeating: .null, count: max(0, layout.slotNames.count - slot - 1))
            ) { _, reason in
                failure = failure ?? reason
            }
            if let failure { throw LogbookError(.validation, "\(key): \(failure)", entity: layout.name, key: key) }
            changes.append((slot, new))
        }
        var fetch = FetchRequest<ManagedObject>(entityName: request.entityName)
        fetch.predicate = request.predicate
        // The entity and its sub-entities (whose records hold the inherited attributes at the
        // same slots), each with its own plan.
        let parts = try spans(fetch, layout).map { l -> (EntityLayout, FetchPlan) in
            var f = fetch
            f.entityName = l.name
            return (l, try plan(f, layout: l))
        }
        // Read and written under the save lock: no save comes between (its values would be lost).
        let store = storeLayout
        let propertyNames = Set(changes.map(\.slot) + computed.map(\.slot)).map { layout.slotNames[$0] }.sorted()
        let (version, updatedKeys) = try container.withSaveLock { log -> (UInt64, [UInt64]) in
            let snapshot = container.store.snapshot()
            var transaction = Transaction()
            var buffer: [UInt8] = []
            var updatedKeys: [UInt64] = []
            var evaluator = PredicateEvaluator(format: request.predicate?.format ?? "")
            for (layout, plan) in parts {
                let keys = try candidateKeys(plan, layout: layout, snapshot: snapshot, stopAfter: nil)
                let destinations = layout.toOne.map { store.keyspace[layout.relationshipDestination[$0]] }
                let attributeCount = layout.attributeCount
                if plan.residual == nil && computed.isEmpty {
                    // Constant values on records the plan selects whole: the stored bytes are
                    // changed in place, the other values never decoded.
                    try spliceUpdate(
                        keys, changes: changes, layout: layout, snapshot: snapshot, into: &transaction,
                        updated: &updatedKeys)
                    continue
                }
                updatedKeys.reserveCapacity(updatedKeys.count + keys.count)
                try RecordCodec.readingRecords(of: layout) {
                    try snapshot.forEachValue(forKeys: keys) { _, key, raw in
                        var slots = try RecordCodec.decode(raw, layout: layout) { destinations[$0 - attributeCount] }
                        let original = slots
                        // The conditions the index does not settle, and the expressions, on a
                        // detached object.
                        let detached =
                            plan.residual != nil || !computed.isEmpty
                            ? layout.managedClass.init(
                                ManagedObject.Bootstrap(
                                    layout: layout, key: key, token: token, slots: slots, fault: false))
                            : nil
                        if let residual = plan.residual, let o = detached {
                            let passes = try evaluator.test(residual, object: o)
                            if !passes { return }
                        }
                        if let o = detached {
                            for (slot, expression) in computed {
                                let a = layout.entity.attributes[slot]
                                let new: Slot
                                do {
                                    new = try Slot(computed: try expression.evaluate(with: o), type: a.type)
                                } catch let m
                                    as Slot.Mismatch
                                {
                                    throw LogbookError(
                                        .typeMismatch, "\(expression) gives \(m.got); \(a.name) is \(m.expected)",
                                        entity: layout.name, key: a.name,
                                        objectID: ObjectID(store: store.identity, key: key))
                                }
                                if new.isNull && !a.isOptional {
                                    throw LogbookError(
                                        .validation, "\(expression) gives no value for the required \(a.name)",
                                        entity: layout.name, key: a.name,
                                        objectID: ObjectID(store: store.identity, key: key))
                                }
                                slots[slot] = new
                            }
                            if !computed.isEmpty && !layout.ruleSlots.isEmpty {
                                var failure: String?
                                layout.checkRules(slots) { k, reason in failure = failure ?? "\(k): \(reason)" }
                                if let failure {
                                    throw LogbookError(
                                        .validation, failure, entity: layout.name,
                                        objectID: ObjectID(store: store.identity, key: key))
                                }
                            }
                        }
                        for c in changes { slots[c.slot] = c.value }
                        updatedKeys.append(key)
                        // Values the update leaves as they were, byte for byte, are not written
                        // again.
                        if slots.indices.allSatisfy({ slots[$0].isStoredIdentically(as: original[$0]) }) { return }
                        Self.encode(slots, key: key, entity: layout, into: &transaction, buffer: &buffer, layout: store)
                    }
                }
            }
            guard !updatedKeys.isEmpty else { return (0, []) }
            let version = try commitUnderSaveLock(&transaction) {
                batchHistoryRecord(updated: updatedKeys, names: propertyNames)
            }
            log.record(updatedKeys, version: version)
            return (version, updatedKeys)
        }
        guard !updatedKeys.isEmpty else { return BatchResult(count: 0, objectIDs: []) }
        // Objects that contexts hold reload the new values (their unsaved changes stay).
        let holdsObjects = !registry.withLock { $0.isEmpty }
        let listeners = container.hasListeners(besides: self) || !changeObservers.isEmpty
        let ids =
            request.resultType == .objectIDs || holdsObjects || listeners
            ? updatedKeys.map { ObjectID(store: store.identity, key: $0) } : []
        if holdsObjects || listeners {
            let changeSet = ContextChanges(inserted: [], updated: Set(ids), deleted: [], version: version)
            refreshObjects(changeSet)
            container.didSave(changeSet, from: self)
        }
        return BatchResult(count: updatedKeys.count, objectIDs: request.resultType == .objectIDs ? ids : [])
    }

    /// A batch update's constant `changes` written into `keys`' records without decoding
    /// them: each record is spliced (`RecordCodec.splice`), its index keys made from the new
    /// bytes.
    private func spliceUpdate(
        _ keys: [UInt64], changes: [(slot: Int, value: Slot)], layout: EntityLayout, snapshot: Snapshot,
        into transaction: inout Transaction, updated: inout [UInt64]
    ) throws {
        let store = storeLayout
        // Transient attributes are never stored: a change to one leaves the record without it.
        let stored = changes.sorted { $0.slot < $1.slot }.map { c -> (slot: Int, stored: [UInt8]?) in
            guard !c.value.isNull, !layout.transientSlots.contains(c.slot) else { return (c.slot, nil) }
            var bytes: [UInt8] = []
            RecordCodec.appendValue(c.value, at: c.slot, layout: layout, to: &bytes)
            return (c.slot, bytes)
        }
        let indexed = store.indexedSlots[layout.index]
        let changed = Set(changes.map(\.slot))
        let coversChange =
            indexed.contains { changed.contains($0.slot) }
            || store.constraintIndexes[layout.index].contains { $0.slots.contains(where: changed.contains) }
            || store.compoundIndexes[layout.index].contains { $0.slots.contains(where: changed.contains) }
        if !coversChange {
            // No index entry is made from a changed value: each record keeps its entries, copied
            // as they are, and the commit leaves the indexes alone.
            let kinds = layout.slotKinds
            let written = try RecordCodec.readingRecords(of: layout) {
                try snapshot.rewriteValues(
                    forKeys: keys, growth: RecordCodec.spliceGrowth(stored), into: &transaction
                ) { _, _, raw, out in
                    // A record the update leaves byte for byte as it was is not written again (nil).
                    try kinds.withUnsafeBufferPointer {
                        try RecordCodec.splice(raw, kinds: $0, changes: stored, to: out)
                    }
                }
            }
            // The keys come from the snapshot's own index: each has a record.
            guard written == keys.count else {
                throw LogbookError(
                    .store, "\(keys.count - written) records of \(layout.name) are missing from the store's snapshot",
                    entity: layout.name)
            }
            // The first entity's keys become the list as they are (8 MB not copied for a million).
            if updated.isEmpty { updated = keys } else { updated.append(contentsOf: keys) }
            return
        }
        // One index on an attribute: its key comes from that value alone; else from the record.
        let single =
            indexed.count <= 1 && store.constraintIndexes[layout.index].isEmpty
            && store.compoundIndexes[layout.index].isEmpty
            && indexed.allSatisfy { $0.slot < layout.attributeCount }
        let destinations = layout.toOne.map { store.keyspace[layout.relationshipDestination[$0]] }
        var buffer: [UInt8] = []
        updated.reserveCapacity(updated.count + keys.count)
        try RecordCodec.readingRecords(of: layout) {
            try layout.slotKinds.withUnsafeBufferPointer { kinds in
                try snapshot.forEachValue(forKeys: keys) { _, key, raw in
                    // A record the update leaves as it was is not written again (no call).
                    _ = try RecordCodec.splice(raw, kinds: kinds, changes: stored, buffer: &buffer) { record in
                        if single {
                            let indexKey = try indexed.first.map {
                                StoreLayout.indexKey(
                                    try RecordCodec.decodeSlot(record, $0.slot, kinds: kinds), slot: $0.slot,
                                    entity: layout, index: $0.index)
                            }
                            if let indexKey {
                                transaction.put(key, value: record, indexKey: indexKey)
                            } else {
                                transaction.put(key, value: record)
                            }
                        } else {
                            let slots = try RecordCodec.decode(record, kinds: kinds) {
                                destinations[$0 - layout.attributeCount]
                            }
                            transaction.put(key, value: record, indexKeys: store.indexKeys(slots, entity: layout))
                        }
                    }
                    updated.append(key)
                }
            }
        }
    }

    static func validationError(_ failures: [ValidationFailure]) -> LogbookError {
        var e = LogbookError(
            .validation, failures.count == 1 ? "1 record failed validation" : "\(failures.count) validation failures")
        e.validationFailures = failures
        return e
    }
}

extension ManagedObjectContext {
    /// A batch insert into an entity with uniqueness constraints: a row whose constraint
    /// values a stored object (or an earlier row) has replaces that object's attributes (an
    /// upsert; its relationships stay); the others are inserted. A row that matches two
    /// different objects is a `.constraintConflict` error.
    func upsertRows(_ rows: [[Slot]], keys: Range<UInt64>, layout: EntityLayout, resultType: BatchResultType) throws
        -> BatchResult
    {
        let store = storeLayout
        let constraints = store.constraintIndexes[layout.index]
        let (version, targets, updatedKeys) = try container.withSaveLock {
            log -> (UInt64, [UInt64], [UInt64]) in
            let snapshot = container.store.snapshot()
            var written: [UInt64: [Slot]] = [:]
            var order: [UInt64] = []
            var inOrder = Set<UInt64>()
            var targets: [UInt64] = []
            var existing: Set<UInt64> = []
            var claimed: [IndexKey: UInt64] = [:]
            for (i, row) in rows.enumerated() {
                var target: UInt64?
                var entries: [IndexKey] = []
                for c in constraints where !c.slots.contains(where: { row[$0].isNull }) {
                    let entry = store.constraintKey(row, c.slots, entity: layout, index: c.index)
                    entries.append(entry)
                    var found = claimed[entry]
                    if found == nil {
                        let bound = IndexBound(entry.bytes, inclusive: true)
                        for k in try snapshot.primaryKeys(index: c.index, from: bound, to: bound) {
                            guard let l = self.layout(forKey: k), l === layout,
                                let s = try decode(snapshot, key: k, layout: l),
                                c.slots.allSatisfy({ s[$0] == row[$0] })
                            else { continue }
                            found = k
                            if written[k] == nil { written[k] = s }
                            existing.insert(k)
                            break
                        }
                    }
                    if let f = found {
                        if let t = target, t != f {
                            var e = LogbookError(
                                .constraintConflict,
                                "row \(i) of the batch insert has the constraint values of two different objects")
                            e.entity = layout.name
                            throw e
                        }
                        target = f
                    }
                }
                let key = target ?? (keys.lowerBound + UInt64(i))
                if var current = written[key], target != nil {
                    // Attributes from the row; relationships as they were.
                    for s in 0..<layout.attributeCount { current[s] = row[s] }
                    written[key] = current
                } else {
                    written[key] = row
                }
                if inOrder.insert(key).inserted { order.append(key) }
                for entry in entries { claimed[entry] = key }
                targets.append(key)
            }
            var transaction = Transaction()
            var buffer: [UInt8] = []
            for key in order {
                Self.encode(written[key]!, key: key, entity: layout, into: &transaction, buffer: &buffer, layout: store)
            }
            transaction.put(StoredSchema.countersKey, value: container.countersRecord())
            let version = try commitUnderSaveLock(&transaction) {
                batchHistoryRecord(
                    inserted: order.filter { !existing.contains($0) }, updated: order.filter { existing.contains($0) },
                    names: (0..<layout.attributeCount).map { layout.slotNames[$0] })
            }
            log.record(existing, version: version)
            return (version, targets, Array(existing))
        }
        let ids = targets.map { ObjectID(store: store.identity, key: $0) }
        let changes = ContextChanges(
            inserted: Set(ids).subtracting(updatedKeys.map { ObjectID(store: store.identity, key: $0) }),
            updated: Set(updatedKeys.map { ObjectID(store: store.identity, key: $0) }), version: version)
        refreshObjects(changes)
        container.didSave(changes, from: self)
        return BatchResult(count: rows.count, objectIDs: resultType == .objectIDs ? ids : [])
    }
}
