import Foundation
import LogbookEngine

extension ManagedObjectContext {
    /// Runs a batch insert in one transaction; see `BatchInsertRequest`.
    public func execute(_ request: BatchInsertRequest) throws -> BatchResult {
        let layout = try insertable(model.layout(named: request.entityName))
        guard request.count > 0 else { return BatchResult(count: 0, objectIDs: []) }
        let keys = try container.reserveKeys(entity: layout.index, count: UInt64(request.count))
        var transaction = Transaction()
        var buffer: [UInt8] = []
        var row = BatchInsertRow(layout: layout)
        var failures: [ValidationFailure] = []
        let store = storeLayout
        let recordWriter = RecordWriter(entity: layout, store: store)
        let hasRules = !layout.ruleSlots.isEmpty
        // With uniqueness constraints, rows are upserted: collected first, written under the lock.
        let constrained = !store.constraintIndexes[layout.index].isEmpty
        var rows: [[FieldValue]] = []
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
            recordWriter.put(row.slots, key: key, into: &transaction, buffer: &buffer)
        }
        if !failures.isEmpty { throw Self.validationError(failures) }
        if constrained { return try upsertRows(rows, keys: keys, layout: layout, resultType: request.resultType) }
        let version = try container.writer.withSaveLock { _ in
            transaction.put(StoredSchema.countersKey, value: container.countersRecord())
            return try container.writer.commit(&transaction) { batchHistoryRecord(inserted: Array(keys)) }
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
        let (changes, computed) = try updatedValues(of: request, layout: layout)
        var fetch = FetchRequest<ManagedObject>(entityName: request.entityName)
        fetch.predicate = request.predicate
        // The entity and its sub-entities (whose records hold the inherited attributes at the
        // same slots), each with its own plan.
        let parts = try spans(fetch, layout).map { l -> (EntityLayout, ExecutionPlan) in
            var f = fetch
            f.entityName = l.name
            return (l, try plan(f, layout: l))
        }
        // Read and written under the save lock: no save comes between (its values would be lost).
        let store = storeLayout
        let propertyNames = Set(changes.map(\.slot) + computed.map(\.slot)).map { layout.slotNames[$0] }.sorted()
        let (version, updatedKeys) = try container.writer.withSaveLock { log -> (UInt64, [UInt64]) in
            let snapshot = container.store.snapshot()
            var transaction = Transaction()
            var buffer: [UInt8] = []
            var updatedKeys: [UInt64] = []
            var evaluator = PredicateEvaluator(format: request.predicate?.format ?? "")
            for (layout, plan) in parts {
                let keys = try candidateKeys(plan, layout: layout, snapshot: snapshot, stopAfter: nil)
                if plan.residual == nil && computed.isEmpty {
                    // Constant values on records the plan selects whole: the stored bytes are
                    // changed in place, the other values never decoded.
                    try spliceUpdate(
                        keys, changes: changes, layout: layout, snapshot: snapshot, into: &transaction,
                        updated: &updatedKeys)
                    continue
                }
                try decodedUpdate(
                    keys, plan: plan, changes: changes, computed: computed, layout: layout, snapshot: snapshot,
                    evaluator: &evaluator, into: &transaction, buffer: &buffer, updated: &updatedKeys)
            }
            guard !updatedKeys.isEmpty else { return (0, []) }
            let version = try container.writer.commit(&transaction) {
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
            passToChildren(changeSet)
            container.didSave(changeSet, from: self)
        }
        return BatchResult(count: updatedKeys.count, objectIDs: request.resultType == .objectIDs ? ids : [])
    }

    /// A batch update's values: the constants, each checked against its attribute's type, its
    /// optionality and its rules, and the expressions computed per record.
    private func updatedValues(of request: BatchUpdateRequest, layout: EntityLayout) throws -> (
        changes: [(slot: Int, value: FieldValue)], computed: [(slot: Int, expression: FetchExpression)]
    ) {
        var changes: [(slot: Int, value: FieldValue)] = []
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
            let new: FieldValue
            do {
                new = try FieldValue(value ?? nil, type: a.type, transformers: AttributeTransformers.registry)
            } catch let m
                as FieldValue.Mismatch
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
        return (changes, computed)
    }

    /// A batch update of records decoded one by one (a condition left to check on objects, or
    /// values computed per record): each record that passes gets the constants and the computed
    /// values, checked, and is written unless it is left byte for byte as it was.
    private func decodedUpdate(
        _ keys: [UInt64], plan: ExecutionPlan, changes: [(slot: Int, value: FieldValue)],
        computed: [(slot: Int, expression: FetchExpression)], layout: EntityLayout, snapshot: Snapshot,
        evaluator: inout PredicateEvaluator, into t: inout Transaction, buffer: inout [UInt8],
        updated: inout [UInt64]
    ) throws {
        updated.reserveCapacity(updated.count + keys.count)
        let store = storeLayout
        let destinations = layout.toOne.map { store.keyspace[layout.relationshipDestination[$0]] }
        let attributeCount = layout.attributeCount
        let recordWriter = RecordWriter(entity: layout, store: store)
        try RecordCodec.readingRecords(of: layout) {
            // Not cached: the records read are the versions the update replaces.
            try snapshot.forEachValue(forKeys: keys, caching: false) { _, key, raw in
                var slots = try RecordCodec.decode(raw, layout: layout) { destinations[$0 - attributeCount] }
                let original = slots
                // The conditions the index does not settle, and the expressions, on a
                // detached object.
                let detached =
                    plan.residual != nil || !computed.isEmpty
                    ? layout.managedClass.init(
                        ManagedObject.Bootstrap(
                            binding: binding(layout), key: key, slots: slots, fault: false))
                    : nil
                if let residual = plan.residual, let o = detached {
                    let passes = try evaluator.test(residual, object: o)
                    if !passes { return }
                }
                if let o = detached {
                    for (slot, expression) in computed {
                        let a = layout.entity.attributes[slot]
                        let new: FieldValue
                        do {
                            new = try FieldValue(computed: try expression.evaluate(with: o), type: a.type)
                        } catch let m
                            as FieldValue.Mismatch
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
                updated.append(key)
                // Values the update leaves as they were, byte for byte, are not written
                // again.
                if slots.indices.allSatisfy({ slots[$0].isStoredIdentically(as: original[$0]) }) { return }
                recordWriter.put(slots, key: key, into: &t, buffer: &buffer)
            }
        }
    }

    /// A batch update's constant `changes` written into `keys`' records without decoding
    /// them: each record is spliced (`RecordCodec.splice`), its index keys made from the new
    /// bytes.
    private func spliceUpdate(
        _ keys: [UInt64], changes: [(slot: Int, value: FieldValue)], layout: EntityLayout, snapshot: Snapshot,
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
                // Not cached: the records read are the versions the update replaces.
                try snapshot.forEachValue(forKeys: keys, caching: false) { _, key, raw in
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
    func upsertRows(_ rows: [[FieldValue]], keys: Range<UInt64>, layout: EntityLayout, resultType: BatchResultType)
        throws
        -> BatchResult
    {
        let store = storeLayout
        let constraints = store.constraintIndexes[layout.index]
        let (version, targets, updatedKeys) = try container.writer.withSaveLock {
            log -> (UInt64, [UInt64], [UInt64]) in
            let snapshot = container.store.snapshot()
            var written: [UInt64: [FieldValue]] = [:]
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
                RecordWriter.put(
                    written[key]!, key: key, entity: layout, store: store, into: &transaction, buffer: &buffer)
            }
            transaction.put(StoredSchema.countersKey, value: container.countersRecord())
            let version = try container.writer.commit(&transaction) {
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
        passToChildren(changes)
        container.didSave(changes, from: self)
        return BatchResult(count: rows.count, objectIDs: resultType == .objectIDs ? ids : [])
    }
}
