import Foundation
import LogbookEngine

extension ManagedObjectModel {
    /// The model a store records, read without the app's model (for tools): entities,
    /// attributes with their types and optionality, relationships, indexes. Typed classes and
    /// validation rules are the app's and are not recorded.
    ///
    /// ```swift
    /// let model = try ManagedObjectModel(recordedIn: "/var/lib/myapp/people.logbook")
    /// ```
    ///
    /// An encrypted store's model is read with its key (`encryptionKey`).
    public convenience init(recordedIn directory: String, encryptionKey: (any EncryptionKeyProvider)? = nil) throws {
        var options = StoreOptions()
        options.readOnly = true
        options.encryptionKey = encryptionKey
        let store: Store
        do { store = try Store.open(at: directory, options: options) } catch { throw LogbookError.wrap(error) }
        defer { try? store.close() }
        guard let bytes = try? store.snapshot().value(forKey: StoredSchema.schemaKey) else {
            throw LogbookError(.incompatibleModel, "the store holds no Logbook schema")
        }
        let schema = try StoredSchema.decode(bytes)
        // Each entity records its properties with the inherited ones first: its own are the
        // rest, after its parent's.
        func own<T>(_ e: StoredSchema.Entity, _ all: (StoredSchema.Entity) -> [T]) -> ArraySlice<T> {
            let inherited = e.parent.flatMap { schema.entity($0) }.map { all($0).count } ?? 0
            return all(e).dropFirst(inherited)
        }
        try self.init(
            entities: schema.entities.map { e in
                var entity = EntityDescription(
                    e.name,
                    attributes: own(e, \.attributes).map { a in
                        AttributeDescription(
                            a.name, Migration.storedType(a) ?? .data, optional: a.optional, indexed: a.index != nil)
                    },
                    relationships: own(e, \.relationships).map { r in
                        RelationshipDescription(
                            r.name, to: r.destination, inverse: r.inverse, toMany: r.toMany,
                            ordered: r.orderKeyspace != nil, deleteRule: DeleteRule(rawValue: r.deleteRule) ?? .nullify,
                            indexed: r.index != nil)
                    }, parent: e.parent, abstract: e.abstract ?? false)
                entity.uniquenessConstraints = own(e) { $0.constraints ?? [] }.map(\.keys)
                entity.compoundIndexes = own(e) { $0.compoundIndexes ?? [] }.map(\.keys)
                return entity
            })
    }
}

/// What a store's keyspaces and indexes stand for, as its recorded schema says (for tools
/// that show engine figures by entity).
public struct RecordedNames: Sendable {
    /// Entity names by the keyspace of their objects.
    public var entities: [UInt16: String] = [:]
    /// `Entity.relationship` by the keyspace of its membership sets.
    public var relationships: [UInt16: String] = [:]
    /// `Entity.attribute` by secondary index number.
    public var indexes: [IndexID: String] = [:]

    /// The names a store records; empty when it holds no Logbook schema.
    ///
    /// ```swift
    /// let names = try RecordedNames(in: "/var/lib/myapp/people.logbook")
    /// names.entities[1]   // "Person"
    /// ```
    public init(in directory: String, encryptionKey: (any EncryptionKeyProvider)? = nil) throws {
        var options = StoreOptions()
        options.readOnly = true
        options.encryptionKey = encryptionKey
        let store: Store
        do { store = try Store.open(at: directory, options: options) } catch { throw LogbookError.wrap(error) }
        defer { try? store.close() }
        guard let bytes = try? store.snapshot().value(forKey: StoredSchema.schemaKey),
            let schema = try? StoredSchema.decode(bytes)
        else { return }
        for e in schema.entities {
            entities[e.keyspace] = e.name
            for a in e.attributes { if let i = a.index { indexes[IndexID(rawValue: i)] = "\(e.name).\(a.name)" } }
            for r in e.relationships {
                if let k = r.setKeyspace, relationships[k] == nil { relationships[k] = "\(e.name).\(r.name)" }
                if let k = r.orderKeyspace, relationships[k] == nil { relationships[k] = "\(e.name).\(r.name) order" }
            }
            for r in e.relationships {
                if let i = r.index, indexes[IndexID(rawValue: i)] == nil {
                    indexes[IndexID(rawValue: i)] = "\(e.name).\(r.name)"
                }
            }
            for c in e.compoundIndexes ?? [] where indexes[IndexID(rawValue: c.index)] == nil {
                indexes[IndexID(rawValue: c.index)] = "\(e.name) (\(c.keys.joined(separator: ", ")))"
            }
            for c in e.constraints ?? [] where indexes[IndexID(rawValue: c.index)] == nil {
                indexes[IndexID(rawValue: c.index)] = "\(e.name) unique (\(c.keys.joined(separator: ", ")))"
            }
        }
    }
}
