import Foundation
import LogbookEngine

/// Per-entity facts of an open store: keyspace, index numbers, set keyspaces.
package final class StoreLayout: Sendable {
    let schema: StoredSchema
    package let identity: StoreIdentity
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
    func indexKeys(_ slots: [FieldValue], entity: EntityLayout) -> [IndexKey] {
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
    static func indexKey(_ value: FieldValue, slot: Int, entity: EntityLayout, index: IndexID) -> IndexKey {
        RecordCodec.indexKey(
            value, type: slot < entity.attributeCount ? entity.entity.attributes[slot].type : .int64, index: index)
    }

    /// A compound index entry: each value as in a single index (0x00 for none, else 0x01 and
    /// ordered bytes), with the bytes of strings, data and URLs escaped (0x00 as 0x00 0xFF) and
    /// ended by 0x00 0x00, so that entries sort by the first value, then the second, and so on.
    /// Cut at the longest index key; an entry cut short still sorts at or after every bound
    /// it matches (the planner checks every condition on the records again).
    static func compoundKey(_ values: [FieldValue], _ slots: [Int], entity: EntityLayout) -> [UInt8] {
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
    static func compoundPart(_ value: FieldValue, slot: Int, entity: EntityLayout) -> [UInt8] {
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
    func constraintKey(_ slots: [FieldValue], _ constrained: [Int], entity: EntityLayout, index: IndexID) -> IndexKey {
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
