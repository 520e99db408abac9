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
    var slots: [FieldValue]
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
                slots[slot] = try FieldValue(newValue, type: type, transformers: AttributeTransformers.registry)
            } catch let m as FieldValue.Mismatch {
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
