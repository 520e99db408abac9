import Foundation
import LogbookEngine

/// The identity of a store, shared by the object IDs it hands out.
package final class StoreIdentity: Sendable, Hashable {
    package let uuid: UUID
    /// Entity names by keyspace (the stored schema's assignment).
    let entityNames: [UInt16: String]
    let keyspaces: [String: UInt16]

    init(uuid: UUID, keyspaces: [String: UInt16]) {
        self.uuid = uuid
        self.keyspaces = keyspaces
        var names: [UInt16: String] = [:]
        for (n, k) in keyspaces { names[k] = n }
        self.entityNames = names
    }

    package static func == (a: StoreIdentity, b: StoreIdentity) -> Bool { a.uuid == b.uuid }
    package func hash(into h: inout Hasher) { h.combine(uuid) }
}

/// The identity of a managed object: stable across launches, usable from any thread and in
/// any context of the same store (objects never cross contexts; their IDs do).
///
/// ```swift
/// let id = person.objectID
/// let uri = id.uriRepresentation          // x-logbook://<store>/Person/p42
/// let same = container.objectID(forURIRepresentation: uri)
/// ```
public struct ObjectID: Hashable, Sendable, CustomStringConvertible {
    package let store: StoreIdentity
    /// The engine key: the entity's keyspace (high 16 bits) and the object's serial number.
    package let key: UInt64

    init(store: StoreIdentity, key: UInt64) {
        self.store = store
        self.key = key
    }

    /// The name of the object's entity.
    public var entityName: String { store.entityNames[EngineKey(rawValue: key).keyspace] ?? "?" }

    /// The object's serial number within its entity.
    public var serial: UInt64 { EngineKey(rawValue: key).id }

    /// A URI naming the object, which `PersistentContainer.objectID(forURIRepresentation:)` reads back.
    public var uriRepresentation: URL {
        URL(
            string:
                "x-logbook://\(store.uuid.uuidString)/\(entityName.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? entityName)/p\(serial)"
        )!
    }

    public var description: String { "\(entityName)/p\(serial)" }

    public static func == (a: ObjectID, b: ObjectID) -> Bool { a.key == b.key && a.store == b.store }
    public func hash(into h: inout Hasher) { h.combine(key) }
}
