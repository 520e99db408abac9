import Foundation

// Attributes as stored, for LogbookSync: a transformable value travels as the blob its
// transformer made, so that a store without the transformer still carries it unchanged.
extension ManagedObject {
    /// Attribute `key` as stored: its Swift value (`String`, `Int64`, `Double`, `Bool`, `Date`,
    /// `Data`, `UUID`, `URL`, `Decimal`), a transformable one as its blob (`Data`); nil for no
    /// value.
    package func storedAttribute(_ key: String) throws -> (any Sendable)? {
        let context = try checkUsable(key)
        _ = context
        guard let slot = layout.slot(named: key), slot < layout.attributeCount else {
            throw LogbookError(
                .unknownKey, "\(layout.name) has no attribute named \(key)", entity: layout.name, key: key,
                objectID: objectID)
        }
        let type = layout.entity.attributes[slot].type
        if case .transformable = type {
            guard case .data(let blob) = slots[slot] else { return nil }
            return blob
        }
        switch slots[slot] {
        case .null: return nil
        case .string(let s): return s
        case .int(let i): return i
        case .bool(let b): return b
        case .data(let d): return d
        case .double(let d): return type == .date ? Date(timeIntervalSinceReferenceDate: d) : d
        case .boxed(let b):
            switch b.value {
            case .uuid(let u): return u
            case .url(let u): return u
            case .decimal(let d): return d
            }
        case .object: return nil
        }
    }

    /// Sets attribute `key` to a value as `storedAttribute(_:)` gives it (a transformable one
    /// from its blob, without the transformer), as a change of this context.
    package func setStoredAttribute(_ value: (any Sendable)?, forKey key: String) throws {
        guard let slot = layout.slot(named: key), slot < layout.attributeCount else {
            throw LogbookError(
                .unknownKey, "\(layout.name) has no attribute named \(key)", entity: layout.name, key: key,
                objectID: objectID)
        }
        guard case .transformable = layout.entity.attributes[slot].type else {
            let typed: Any? =
                switch (layout.entity.attributes[slot].type, value) {
                case (.int16, let i as Int64): Int16(truncatingIfNeeded: i)
                case (.int32, let i as Int64): Int32(truncatingIfNeeded: i)
                case (.float, let d as Double): Float(d)
                default: value
                }
            try setValue(typed, forKey: key)
            return
        }
        try withUsableContext(key) { context in
            try context.undoable {
                context.setSlot(self, slot, (value as? Data).map { .data($0) } ?? .null)
            }
        }
    }
}

extension ManagedObjectModel {
    /// Every entity with the attributes and relationships it inherits, as its objects hold
    /// them (for LogbookSync's tables).
    package var flattenedEntities: [EntityDescription] { layouts.map(\.entity) }
}

extension PersistentContainer {
    /// Whether the store records history with each to-many change's members (what LogbookSync
    /// needs): `persistentHistoryTracking` and `historyRecordsMemberChanges`, in every
    /// container of this process that has the store open.
    package var recordsMemberChanges: Bool { historyTracking && writer.memberChanges }
}

extension PersistentContainer {
    /// The ID of the object with engine key `key` in this container's store.
    package func objectID(forKey key: UInt64) -> ObjectID { ObjectID(store: storeLayout.identity, key: key) }
}
