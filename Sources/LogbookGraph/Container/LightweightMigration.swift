import Foundation
import LogbookEngine

/// Reading the schema at open, and migrating it.
enum Migration {
    static func prepare(store: Store, model: ManagedObjectModel) throws -> (StoreLayout, [UInt64]) {
        let snapshot = store.snapshot()
        let stored: StoredSchema?
        do { stored = try snapshot.value(forKey: StoredSchema.schemaKey).map(StoredSchema.decode) } catch let e
            as LogbookError
        { throw e } catch { throw LogbookError.wrap(error) }
        var schema = StoredSchema.make(for: model, previous: stored)
        if let stored, stored.format > StoredSchema.currentFormat {
            throw LogbookError(
                .incompatibleModel,
                "the store was written by a later Logbook (record format \(stored.format); this one reads up to \(StoredSchema.currentFormat))"
            )
        }
        if let stored, stored.format < schema.format, store.isReadOnly {
            throw LogbookError(
                .incompatibleModel,
                "the store was written by an earlier Logbook (record format \(stored.format)): open it writable once to convert it"
            )
        }
        if let stored, stored != schema, store.isReadOnly, stored.sameExceptIndexes(schema) {
            // Read-only, the model adds or drops indexes alone: the store is read as it is
            // (fetches plan with the indexes it has).
            schema = stored
        }
        if let stored, stored != schema {
            try check(stored: stored, new: schema, model: model, snapshot: snapshot)
            // Another process writing records of the old layout beside it would undo it.
            do {
                try store.withStoreToItself("a migration") {
                    try migrate(store: store, snapshot: snapshot, stored: stored, new: schema, model: model)
                }
            } catch let error as EngineError { throw LogbookError.wrap(error) }
        } else if stored == nil {
            if store.isReadOnly { throw LogbookError(.incompatibleModel, "the store holds no Logbook schema") }
            var t = Transaction()
            t.put(StoredSchema.schemaKey, value: schema.encoded())
            try StoreWriter.commit(t, to: store)
        }
        let layout = StoreLayout(schema: schema, model: model)
        // Counters: the recorded ones, never below what the store holds.
        var next = [UInt64](repeating: 1, count: model.entities.count)
        if let record = try? store.snapshot().value(forKey: StoredSchema.countersKey) {
            record.withUnsafeBytes { raw in
                var o = 0
                func varint() -> UInt64? {
                    var r: UInt64 = 0
                    var shift: UInt64 = 0
                    while o < raw.count && shift < 64 {
                        let b = raw[o]
                        o += 1
                        r |= UInt64(b & 0x7F) << shift
                        if b < 0x80 { return r }
                        shift += 7
                    }
                    return nil
                }
                while let ks = varint(), let n = varint() {
                    if let e = layout.entityByKeyspace[UInt16(truncatingIfNeeded: ks)] { next[e] = max(next[e], n) }
                }
            }
        }
        let snap = store.snapshot()
        // Above the largest key of each keyspace (its last key: O(1) in the primary index,
        // where a walk of every key cost an open of a million objects several milliseconds).
        for (e, ks) in layout.keyspace.enumerated() {
            guard let last = snap.keyBounds(inKeyspace: ks)?.upperBound else { continue }
            next[e] = max(next[e], EngineKey(rawValue: last).id + 1)
        }
        // One counter per inheritance tree: its root's, above every serial of the tree.
        for e in next.indices where model.root[e] != e { next[model.root[e]] = max(next[model.root[e]], next[e]) }
        return (layout, next)
    }

    static func storedType(_ a: StoredSchema.Attribute) -> AttributeType? {
        if a.type == "transformable" { return .transformable(transformer: a.transformer ?? "") }
        let all: [AttributeType] = [
            .string, .int16, .int32, .int64, .double, .float, .bool, .date, .data, .uuid, .url, .decimal
        ]
        return all.first { $0.description == a.type }
    }

    /// Whether two transformer names store values alike. A `Codable` value of the SwiftData
    /// layer is stored as its JSON whatever its type's name, so the type may move to another
    /// module or into a versioned schema's namespace (its JSON is read back when a value is).
    static func sameTransformer(_ a: String?, _ b: String?) -> Bool {
        if a == b { return true }
        let codable = "Logbook.Codable<"
        return a?.hasPrefix(codable) == true && b?.hasPrefix(codable) == true
    }

    /// Refuses what a lightweight migration cannot do, saying what changed.
    static func check(stored: StoredSchema, new: StoredSchema, model: ManagedObjectModel, snapshot: Snapshot) throws {
        for (i, e) in new.entities.enumerated() {
            guard let old = stored.entities.first(where: { $0.keyspace == e.keyspace }) else { continue }
            let hasObjects = snapshot.count(inKeyspace: e.keyspace) > 0
            for (j, a) in e.attributes.enumerated() {
                let description = model.flattened[i].attributes[j]
                if let oldA = old.attributes.first(where: {
                    $0.name == a.name || $0.name == description.renamingIdentifier
                }) {
                    if oldA.type != a.type || !sameTransformer(oldA.transformer, a.transformer) {
                        throw LogbookError(
                            .incompatibleModel, "attribute \(a.name) changed type from \(oldA.type) to \(a.type)",
                            entity: e.name, key: a.name)
                    }
                    if oldA.optional && !a.optional && description.defaultValue == nil && hasObjects {
                        throw LogbookError(
                            .incompatibleModel, "attribute \(a.name) became required without a default value",
                            entity: e.name, key: a.name)
                    }
                } else if !a.optional && description.defaultValue == nil && hasObjects {
                    throw LogbookError(
                        .incompatibleModel,
                        "new attribute \(a.name) is required but has no default value for the objects already stored",
                        entity: e.name, key: a.name)
                }
            }
            for r in e.relationships {
                if let oldR = old.relationships.first(where: { $0.name == r.name }),
                    oldR.toMany != r.toMany || oldR.destination != r.destination
                {
                    throw LogbookError(
                        .incompatibleModel, "relationship \(r.name) changed its destination or cardinality",
                        entity: e.name, key: r.name)
                }
            }
        }
    }

    /// Rewrites the records of every entity whose layout changed, drops removed entities and
    /// relationships, and records the new schema: one transaction.
    static func migrate(
        store: Store, snapshot: Snapshot, stored: StoredSchema, new: StoredSchema, model: ManagedObjectModel
    ) throws {
        if store.isReadOnly {
            throw LogbookError(.incompatibleModel, "the store needs a migration but was opened read-only")
        }
        var t = Transaction()
        let newLayout = StoreLayout(schema: new, model: model)
        var seenConstraintKeys: [IndexKey: UInt64] = [:]
        let oldModel = try Self.oldModel(of: stored)
        for (oi, old) in stored.entities.enumerated() {
            guard let ni = new.entities.firstIndex(where: { $0.keyspace == old.keyspace }) else {
                // Entity removed: its objects and sets go.
                snapshot.forEachKey(inKeyspace: old.keyspace) {
                    t.delete($0)
                    return true
                }
                for r in old.relationships { if let k = r.setKeyspace { dropSets(inKeyspace: k, snapshot, &t) } }
                continue
            }
            let newEntity = new.entities[ni]
            dropStaleSetsAndOrders(of: old, now: newEntity, snapshot: snapshot, into: &t)
            let oldPolymorphic = old.relationships.map { $0.polymorphic ?? false }
            let newPolymorphic = newEntity.relationships.map { $0.polymorphic ?? false }
            // Format 1 stored dates as seconds since 1970: their records are written again.
            let convertsDates =
                stored.format < 2 && old.attributes.contains { $0.type == AttributeType.date.description }
            guard
                convertsDates || old.attributes != newEntity.attributes
                    || old.relationships.map(\.name) != newEntity.relationships.map(\.name)
                    || old.relationships.map(\.index) != newEntity.relationships.map(\.index)
                    || oldPolymorphic != newPolymorphic || old.constraints != newEntity.constraints
                    || old.compoundIndexes != newEntity.compoundIndexes
            else { continue }
            try rewriteRecords(
                of: old, oldLayout: oldModel.layouts[oi], stored: stored, newIndex: ni, newLayout: newLayout,
                model: model, snapshot: snapshot, seenConstraintKeys: &seenConstraintKeys, into: &t)
        }
        t.put(StoredSchema.schemaKey, value: new.encoded())
        try StoreWriter.commit(t, to: store)
    }

    /// A model of the stored schema, to decode the old records (every attribute optional,
    /// relationships without inverses).
    static func oldModel(of stored: StoredSchema) throws -> ManagedObjectModel {
        var oldEntities: [EntityDescription] = []
        for e in stored.entities {
            oldEntities.append(
                EntityDescription(
                    e.name,
                    attributes: e.attributes.map {
                        AttributeDescription($0.name, storedType($0) ?? .data, optional: true)
                    },
                    relationships: e.relationships.map {
                        RelationshipDescription($0.name, to: $0.destination, inverse: nil, toMany: $0.toMany)
                    }))
        }
        return try ManagedObjectModel(
            entities: oldEntities.map { e in
                var e = e
                e.relationships = e.relationships.filter { r in oldEntities.contains { $0.name == r.destination } }
                return e
            })
    }

    /// Every set of a set keyspace, emptied.
    static func dropSets(inKeyspace k: UInt16, _ snapshot: Snapshot, _ t: inout Transaction) {
        snapshot.forEachSet(inKeyspace: k) { key, _ in
            t.replaceMembers(EmptyCollection(), ofSet: key)
            return true
        }
    }

    /// The order records of relationships no longer ordered (or gone), and the sets of
    /// relationships gone, dropped.
    static func dropStaleSetsAndOrders(
        of old: StoredSchema.Entity, now newEntity: StoredSchema.Entity, snapshot: Snapshot, into t: inout Transaction
    ) {
        for r in old.relationships {
            guard let k = r.orderKeyspace, !newEntity.relationships.contains(where: { $0.orderKeyspace == k })
            else {
                continue
            }
            snapshot.forEachKey(inKeyspace: k) {
                t.delete($0)
                return true
            }
        }
        for r in old.relationships
        where !newEntity.relationships.contains(where: { $0.setKeyspace == r.setKeyspace && r.setKeyspace != nil }) {
            if let k = r.setKeyspace { dropSets(inKeyspace: k, snapshot, &t) }
        }
    }

    /// Each stored record of an entity whose attributes, relationships or constraints changed,
    /// decoded with the old layout and written again with the new one: values by name (or
    /// renaming identifier), defaults for new attributes, new uniqueness constraints checked.
    static func rewriteRecords(
        of old: StoredSchema.Entity, oldLayout: EntityLayout, stored: StoredSchema, newIndex ni: Int,
        newLayout: StoreLayout, model: ManagedObjectModel, snapshot: Snapshot,
        seenConstraintKeys: inout [IndexKey: UInt64], into t: inout Transaction
    ) throws {
        let layout = model.layouts[ni]
        let description = model.flattened[ni]
        var keys: [UInt64] = []
        snapshot.forEachKey(inKeyspace: old.keyspace) {
            keys.append($0)
            return true
        }
        var buffer: [UInt8] = []
        // The old records' to-one slots as they were written (with keyspaces where the
        // destination had sub-entities then).
        var oldKinds = oldLayout.slotKinds
        for (n, r) in oldLayout.toOne.enumerated() where old.relationships[r].polymorphic == true {
            oldKinds[oldLayout.attributeCount + n] = .anyObject
        }
        for key in keys {
            let oldSlots: [FieldValue]? =
                try snapshot.withValue(forKey: key) { raw -> [FieldValue]? in
                    try? oldKinds.withUnsafeBufferPointer { kinds in
                        try RecordCodec.decode(raw, kinds: kinds) { slot in
                            let r = oldLayout.toOne[slot - oldLayout.attributeCount]
                            let dest = old.relationships[r].destination
                            return stored.entity(dest)?.keyspace ?? 0
                        }
                    }
                } ?? nil
            guard let oldSlots else { continue }
            var slots = [FieldValue](repeating: .null, count: layout.slotCount)
            for (j, a) in description.attributes.enumerated() {
                if let k = old.attributes.firstIndex(where: { $0.name == a.name || $0.name == a.renamingIdentifier }
                ) {
                    slots[j] = oldSlots[k]
                    if stored.format < 2, old.attributes[k].type == AttributeType.date.description,
                        case .double(let since1970) = oldSlots[k]
                    {
                        // The date format 1 read back (its last bits were lost when written).
                        slots[j] = .double(Date(timeIntervalSince1970: since1970).timeIntervalSinceReferenceDate)
                    }
                }
                if slots[j].isNull, let d = a.defaultValue {
                    slots[j] =
                        (try? FieldValue(d, type: a.type, transformers: AttributeTransformers.registry)) ?? .null
                }
            }
            for (n, r) in layout.toOne.enumerated() {
                let rel = description.relationships[r]
                if let k = oldLayout.slotByName[rel.name]
                    ?? rel.renamingIdentifier.flatMap({ oldLayout.slotByName[$0] }), k >= oldLayout.attributeCount
                {
                    slots[layout.attributeCount + n] = oldSlots[k]
                }
            }
            RecordCodec.encode(slots, layout: layout, into: &buffer)
            let indexKeys = newLayout.indexKeys(slots, entity: layout)
            // Objects already stored must satisfy a new uniqueness constraint.
            for c in newLayout.constraintIndexes[ni] where !c.slots.contains(where: { slots[$0].isNull }) {
                let entry = newLayout.constraintKey(slots, c.slots, entity: layout, index: c.index)
                if let other = seenConstraintKeys.updateValue(key, forKey: entry) {
                    throw LogbookError(
                        .incompatibleModel,
                        "the stored objects \(EngineKey(rawValue: other).id) and \(EngineKey(rawValue: key).id) share the values of a uniqueness constraint of the new model",
                        entity: description.name)
                }
            }
            t.put(key, value: buffer, indexKeys: indexKeys)
        }
    }
}
