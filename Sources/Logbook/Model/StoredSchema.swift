import Foundation
import LogbookEngine

/// The schema recorded in the store (engine key 0 of keyspace 0), so that the store describes
/// itself: tools read it without the app's model, and an open with another model is checked
/// and migrated against it. JSON, for people and tools.
struct StoredSchema: Codable, Equatable {
    struct Attribute: Codable, Equatable {
        var name: String
        var type: String
        var transformer: String?
        var optional: Bool
        /// The secondary index over this attribute, if it has one.
        var index: UInt32?
    }
    struct Relationship: Codable, Equatable {
        var name: String
        var destination: String
        var inverse: String?
        var toMany: Bool
        var deleteRule: String
        /// For to-many relationships: the keyspace of the membership sets (shared by the
        /// entity that declares the relationship and its sub-entities).
        var setKeyspace: UInt16?
        /// For to-one relationships to an entity with sub-entities: records hold the keyspace too.
        var polymorphic: Bool?
        /// For ordered to-many relationships: the keyspace of the order records (one per owner).
        var orderKeyspace: UInt16?
        /// For indexed to-one relationships: the secondary index over the destination.
        var index: UInt32?
    }
    struct Constraint: Codable, Equatable {
        var keys: [String]
        /// The index of the constraint's values.
        var index: UInt32
    }
    struct Entity: Codable, Equatable {
        var name: String
        /// Uniqueness constraints, each with its index (shared with sub-entities).
        var constraints: [Constraint]?
        /// Compound indexes, each with its index number (shared with sub-entities).
        var compoundIndexes: [Constraint]?
        /// The entity it inherits from, if any.
        var parent: String?
        /// Whether it is abstract (recorded for tools).
        var abstract: Bool?
        var keyspace: UInt16
        var attributes: [Attribute]
        var relationships: [Relationship]
    }

    var format = 1
    var storeUUID: UUID
    var entities: [Entity]
    var nextKeyspace: UInt16
    var nextIndex: UInt32

    static let schemaKey: UInt64 = 0
    static let countersKey: UInt64 = 1

    func entity(_ name: String) -> Entity? { entities.first { $0.name == name } }

    static func typeName(_ t: AttributeType) -> (String, String?) {
        switch t {
        case .transformable(let name): ("transformable", name)
        default: (t.description, nil)
        }
    }

    /// The schema for `model`, keeping the keyspaces and index numbers of `previous` for what
    /// it still has (matched by name or renaming identifier).
    static func make(for model: ManagedObjectModel, previous: StoredSchema?) -> StoredSchema {
        var nextKeyspace = previous?.nextKeyspace ?? 1
        var nextIndex = previous?.nextIndex ?? 1
        var made = [Entity?](repeating: nil, count: model.entities.count)
        // Parents first: a sub-entity shares the index numbers and set keyspaces of what it inherits.
        let order = model.entities.indices.sorted {
            model.layouts[$0].ancestors.count < model.layouts[$1].ancestors.count
        }
        for i in order {
            let e = model.flattened[i]
            let layout = model.layouts[i]
            let inherited = layout.ancestors.first.flatMap { made[$0] }
            let old = previous.flatMap { p in p.entity(e.name) ?? e.renamingIdentifier.flatMap { p.entity($0) } }
            let keyspace: UInt16
            if let old {
                keyspace = old.keyspace
            } else {
                keyspace = nextKeyspace
                nextKeyspace += 1
            }
            var attributes: [Attribute] = []
            for (j, a) in e.attributes.enumerated() {
                if let inherited, j < inherited.attributes.count {
                    attributes.append(inherited.attributes[j])
                    continue
                }
                let oldA = old?.attributes.first { $0.name == a.name || $0.name == a.renamingIdentifier }
                var index: UInt32?
                if a.isIndexed && !a.isTransient {
                    if let i = oldA?.index {
                        index = i
                    } else {
                        index = nextIndex
                        nextIndex += 1
                    }
                }
                let (type, transformer) = typeName(a.type)
                attributes.append(
                    Attribute(name: a.name, type: type, transformer: transformer, optional: a.isOptional, index: index))
            }
            var relationships: [Relationship] = []
            for (j, r) in e.relationships.enumerated() {
                let polymorphic: Bool? =
                    !r.isToMany
                        && (model.byName[r.destination].map { model.layouts[$0].descendants.count > 1 } ?? false)
                    ? true : nil
                if let inherited, j < inherited.relationships.count {
                    var copy = inherited.relationships[j]
                    copy.polymorphic = polymorphic
                    relationships.append(copy)
                    continue
                }
                let oldR = old?.relationships.first { $0.name == r.name || $0.name == r.renamingIdentifier }
                // A keyspace the previous schema gave, else a new one.
                func keyspace(_ wanted: Bool, _ previous: UInt16?) -> UInt16? {
                    guard wanted else { return nil }
                    if let previous { return previous }
                    defer { nextKeyspace += 1 }
                    return nextKeyspace
                }
                let setKeyspace = keyspace(r.isToMany, oldR?.setKeyspace)
                let orderKeyspace = keyspace(r.isOrdered, oldR?.orderKeyspace)
                var index: UInt32?
                if !r.isToMany && r.isIndexed {
                    if let i = oldR?.index {
                        index = i
                    } else {
                        index = nextIndex
                        nextIndex += 1
                    }
                }
                relationships.append(
                    Relationship(
                        name: r.name, destination: r.destination, inverse: r.inverse, toMany: r.isToMany,
                        deleteRule: r.deleteRule.rawValue, setKeyspace: setKeyspace, polymorphic: polymorphic,
                        orderKeyspace: orderKeyspace, index: index))
            }
            // Key lists with an index each: the parent's for the inherited ones (first), the
            // previous schema's for those it had, else a new number.
            func numbered(_ lists: [[String]], inherited: [Constraint]?, previous: [Constraint]?) -> [Constraint] {
                lists.enumerated().map { j, keys in
                    if let inherited, j < inherited.count { return inherited[j] }
                    if let c = previous?.first(where: { $0.keys == keys }) { return c }
                    defer { nextIndex += 1 }
                    return Constraint(keys: keys, index: nextIndex)
                }
            }
            let constraints = numbered(
                e.uniquenessConstraints, inherited: inherited?.constraints, previous: old?.constraints)
            let compound = numbered(
                e.compoundIndexes, inherited: inherited?.compoundIndexes, previous: old?.compoundIndexes)
            made[i] = Entity(
                name: e.name, constraints: constraints.isEmpty ? nil : constraints,
                compoundIndexes: compound.isEmpty ? nil : compound, parent: e.parentEntity,
                abstract: e.isAbstract ? true : nil, keyspace: keyspace, attributes: attributes,
                relationships: relationships)
        }
        return StoredSchema(
            storeUUID: previous?.storeUUID ?? UUID(), entities: made.map { $0! }, nextKeyspace: nextKeyspace,
            nextIndex: nextIndex)
    }

    /// Whether `other` differs from this schema in its indexes alone (single, relationship and
    /// compound index numbers, and the next index number).
    func sameExceptIndexes(_ other: StoredSchema) -> Bool {
        func strip(_ s: StoredSchema) -> StoredSchema {
            var s = s
            s.nextIndex = 0
            for i in s.entities.indices {
                s.entities[i].compoundIndexes = nil
                for j in s.entities[i].attributes.indices { s.entities[i].attributes[j].index = nil }
                for j in s.entities[i].relationships.indices { s.entities[i].relationships[j].index = nil }
            }
            return s
        }
        return strip(self) == strip(other)
    }

    func encoded() -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return Array((try? encoder.encode(self)) ?? Data())
    }

    static func decode(_ bytes: [UInt8]) throws -> StoredSchema {
        // What `encoded()` writes is read without `JSONDecoder` (`init(json:)`: a millisecond
        // of every open); anything else, and every error, goes through it.
        if let schema = StoredSchema(json: bytes) { return schema }
        do { return try JSONDecoder().decode(StoredSchema.self, from: Data(bytes)) } catch {
            throw LogbookError(.incompatibleModel, "the store's recorded schema cannot be read: \(error)")
        }
    }
}

/// Per-entity facts of an open store: keyspace, index numbers, set keyspaces.
final class StoreLayout: Sendable {
    let schema: StoredSchema
    let identity: StoreIdentity
    /// By model entity index.
    let keyspace: [UInt16]
    /// By model entity index, by slot (attributes, then to-one relationships): the index
    /// number, if indexed.
    let slotIndex: [[IndexID?]]
    /// By model entity index, by relationship index: the set keyspace of to-many relationships.
    let setKeyspace: [[UInt16?]]
    /// By model entity index, by relationship index: the order keyspace of ordered ones.
    let orderKeyspace: [[UInt16?]]
    let entityByKeyspace: [UInt16: Int]
    /// By model entity index: the indexed slots and their index numbers.
    let indexedSlots: [[(slot: Int, index: IndexID)]]
    /// By model entity index: each uniqueness constraint's slots and index.
    let constraintIndexes: [[(slots: [Int], index: IndexID)]]
    /// By model entity index: each compound index's slots and index.
    let compoundIndexes: [[(slots: [Int], index: IndexID)]]

    /// The owners a set key may have — one per entity and to-many relationship whose members
    /// are stored in the set's keyspace (several when sub-entities inherit the relationship) —
    /// with that entity (by model index) and relationship (by index).
    func owners(ofSet setKey: UInt64) -> [(owner: UInt64, entity: Int, relationship: Int)] {
        let k = EngineKey(rawValue: setKey)
        var out: [(owner: UInt64, entity: Int, relationship: Int)] = []
        for (e, sets) in setKeyspace.enumerated() {
            for (r, ks) in sets.enumerated() where ks == k.keyspace {
                out.append((EngineKey(keyspace: keyspace[e], id: k.id).rawValue, e, r))
            }
        }
        return out
    }

    init(schema: StoredSchema, model: ManagedObjectModel) {
        self.schema = schema
        var ks: [UInt16] = []
        var ai: [[IndexID?]] = []
        var sk: [[UInt16?]] = []
        var ok: [[UInt16?]] = []
        var ci: [[(slots: [Int], index: IndexID)]] = []
        var cx: [[(slots: [Int], index: IndexID)]] = []
        var byKs: [UInt16: Int] = [:]
        var names: [String: UInt16] = [:]
        for (i, e) in model.entities.enumerated() {
            let stored = schema.entity(e.name)!
            ks.append(stored.keyspace)
            byKs[stored.keyspace] = i
            names[e.name] = stored.keyspace
            let layout = model.layouts[i]
            // To-one slots follow the attributes, in the order of `layout.toOne`.
            ai.append(
                stored.attributes.map { $0.index.map(IndexID.init(rawValue:)) }
                    + layout.toOne.map { r in
                        stored.relationships.first { $0.name == layout.entity.relationships[r].name }?.index.map(
                            IndexID.init(rawValue:))
                    })
            sk.append(stored.relationships.map(\.setKeyspace))
            ok.append(stored.relationships.map(\.orderKeyspace))
            ci.append(
                zip(layout.constraints, stored.constraints ?? []).map { slots, c in (slots, IndexID(rawValue: c.index))
                })
            cx.append(
                (stored.compoundIndexes ?? []).compactMap { c in
                    let slots = c.keys.compactMap { layout.slotByName[$0] }
                    return slots.count == c.keys.count ? (slots, IndexID(rawValue: c.index)) : nil
                })
        }
        keyspace = ks
        slotIndex = ai
        indexedSlots = ai.map { list in list.enumerated().compactMap { i, x in x.map { (i, $0) } } }
        compoundIndexes = cx
        setKeyspace = sk
        orderKeyspace = ok
        constraintIndexes = ci
        entityByKeyspace = byKs
        identity = StoreIdentity(uuid: schema.storeUUID, keyspaces: names)
    }

    @inline(__always)
    func setKey(entity: Int, relationship: Int, owner: UInt64) -> UInt64 {
        EngineKey(rawValue: owner).inKeyspace(setKeyspace[entity][relationship]!).rawValue
    }

    /// The key of the record that holds the order of an ordered relationship's members.
    func orderKey(entity: Int, relationship: Int, owner: UInt64) -> UInt64? {
        orderKeyspace[entity][relationship].map { EngineKey(rawValue: owner).inKeyspace($0).rawValue }
    }
}

extension StoreLayout {
    /// The index entries of a record: one per indexed attribute or to-one relationship, one
    /// per uniqueness constraint, one per compound index.
    func indexKeys(_ slots: [Slot], entity: EntityLayout) -> [IndexKey] {
        var keys = indexedSlots[entity.index].map {
            Self.indexKey(slots[$0.slot], slot: $0.slot, entity: entity, index: $0.index)
        }
        for c in constraintIndexes[entity.index] {
            keys.append(constraintKey(slots, c.slots, entity: entity, index: c.index))
        }
        for c in compoundIndexes[entity.index] {
            keys.append(
                IndexKey(index: c.index, bytes: Self.compoundKey(c.slots.map { slots[$0] }, c.slots, entity: entity)))
        }
        return keys
    }

    /// The single-slot index entry of a value: an attribute's ordered bytes, or a to-one
    /// relationship's destination key.
    @inline(__always)
    static func indexKey(_ value: Slot, slot: Int, entity: EntityLayout, index: IndexID) -> IndexKey {
        RecordCodec.indexKey(
            value, type: slot < entity.attributeCount ? entity.entity.attributes[slot].type : .int64, index: index)
    }

    /// A compound index entry: each value as in a single index (0x00 for none, else 0x01 and
    /// ordered bytes), with the bytes of strings, data and URLs escaped (0x00 as 0x00 0xFF) and
    /// ended by 0x00 0x00, so that entries sort by the first value, then the second, and so on.
    /// Cut at the longest index key; an entry cut short still sorts at or after every bound
    /// it matches (the planner checks every condition on the records again).
    static func compoundKey(_ values: [Slot], _ slots: [Int], entity: EntityLayout) -> [UInt8] {
        var bytes: [UInt8] = []
        for (value, slot) in zip(values, slots) {
            bytes.append(contentsOf: compoundPart(value, slot: slot, entity: entity))
            if bytes.count >= JournalFormat.maxIndexKeyLength { break }
        }
        if bytes.count > JournalFormat.maxIndexKeyLength {
            bytes.removeLast(bytes.count - JournalFormat.maxIndexKeyLength)
        }
        return bytes
    }

    /// One value's part of a compound entry (see `compoundKey`).
    static func compoundPart(_ value: Slot, slot: Int, entity: EntityLayout) -> [UInt8] {
        func escaped<C: Collection>(_ raw: C) -> [UInt8] where C.Element == UInt8 {
            var out: [UInt8] = [1]
            out.reserveCapacity(raw.count + 3)
            for b in raw {
                out.append(b)
                if b == 0 { out.append(0xFF) }
            }
            out.append(contentsOf: [0, 0])
            return out
        }
        switch value {
        case .null: return [0]
        case .string(let s): return escaped(s.utf8)
        case .data(let d): return escaped(d)
        case .boxed(let b):
            if case .url(let u) = b.value { return escaped(u.absoluteString.utf8) }
            return indexKey(value, slot: slot, entity: entity, index: 0).bytes
        default: return indexKey(value, slot: slot, entity: entity, index: 0).bytes
        }
    }

    /// A constraint's index entry: each value's index bytes, length-prefixed (two bytes), each
    /// cut to its share of the longest key (values that differ only past the cut are told
    /// apart by reading the records).
    func constraintKey(_ slots: [Slot], _ constrained: [Int], entity: EntityLayout, index: IndexID) -> IndexKey {
        let share = JournalFormat.maxIndexKeyLength / max(1, constrained.count) - 2
        var bytes: [UInt8] = []
        for s in constrained {
            let part: [UInt8]
            if s < entity.attributeCount {
                part = RecordCodec.indexKey(slots[s], type: entity.entity.attributes[s].type, index: index).bytes
            } else if case .object(let k) = slots[s] {
                part = [1] + withUnsafeBytes(of: k.bigEndian) { Array($0) }
            } else {
                part = [0]
            }
            let cut = part.prefix(share)
            bytes.append(UInt8(cut.count >> 8))
            bytes.append(UInt8(cut.count & 0xFF))
            bytes.append(contentsOf: cut)
        }
        return IndexKey(index: index, bytes: bytes)
    }
}
