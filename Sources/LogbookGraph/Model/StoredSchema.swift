import Foundation
import LogbookEngine

/// The schema recorded in the store (engine key 0 of keyspace 0), so that the store describes
/// itself: tools read it without the app's model, and an open with another model is checked
/// and migrated against it. JSON, for people and tools.
package struct StoredSchema: Codable, Equatable {
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

    /// The format of the records: `2` stores a date as `Date` holds it (seconds since 2001);
    /// `1`, before, stored seconds since 1970, which lost a date's last bits. A store of
    /// format 1 is converted at its first writable open (`Migration`).
    package var format = Self.currentFormat
    static let currentFormat = 2
    var storeUUID: UUID
    var entities: [Entity]
    var nextKeyspace: UInt16
    var nextIndex: UInt32

    package static let schemaKey: UInt64 = 0
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
    package static func make(for model: ManagedObjectModel, previous: StoredSchema?) -> StoredSchema {
        var numbers = Numbering(nextKeyspace: previous?.nextKeyspace ?? 1, nextIndex: previous?.nextIndex ?? 1)
        var made = [Entity?](repeating: nil, count: model.entities.count)
        // Parents first: a sub-entity shares the index numbers and set keyspaces of what it inherits.
        let order = model.entities.indices.sorted {
            model.layouts[$0].ancestors.count < model.layouts[$1].ancestors.count
        }
        for i in order {
            let e = model.flattened[i]
            let inherited = model.layouts[i].ancestors.first.flatMap { made[$0] }
            let old = previous.flatMap { p in p.entity(e.name) ?? e.renamingIdentifier.flatMap { p.entity($0) } }
            let keyspace = numbers.keyspace(true, old?.keyspace)!
            let attributes = storedAttributes(of: e, inherited: inherited, old: old, numbers: &numbers)
            let relationships = storedRelationships(
                of: e, inherited: inherited, old: old, model: model, numbers: &numbers)
            let constraints = numbers.numbered(
                e.uniquenessConstraints, inherited: inherited?.constraints, previous: old?.constraints)
            let compound = numbers.numbered(
                e.compoundIndexes, inherited: inherited?.compoundIndexes, previous: old?.compoundIndexes)
            made[i] = Entity(
                name: e.name, constraints: constraints.isEmpty ? nil : constraints,
                compoundIndexes: compound.isEmpty ? nil : compound, parent: e.parentEntity,
                abstract: e.isAbstract ? true : nil, keyspace: keyspace, attributes: attributes,
                relationships: relationships)
        }
        return StoredSchema(
            storeUUID: previous?.storeUUID ?? UUID(), entities: made.map { $0! }, nextKeyspace: numbers.nextKeyspace,
            nextIndex: numbers.nextIndex)
    }

    /// The keyspaces and index numbers a schema hands out: the previous schema's where it had
    /// them, else the next free ones.
    struct Numbering {
        var nextKeyspace: UInt16
        var nextIndex: UInt32

        /// A keyspace the previous schema gave, else a new one (nil when none is wanted).
        mutating func keyspace(_ wanted: Bool, _ previous: UInt16?) -> UInt16? {
            guard wanted else { return nil }
            if let previous { return previous }
            defer { nextKeyspace += 1 }
            return nextKeyspace
        }

        /// An index number the previous schema gave, else a new one (nil when not indexed).
        mutating func index(_ indexed: Bool, _ previous: UInt32?) -> UInt32? {
            guard indexed else { return nil }
            if let previous { return previous }
            defer { nextIndex += 1 }
            return nextIndex
        }

        /// Key lists with an index each: the parent's for the inherited ones (first), the
        /// previous schema's for those it had, else a new number.
        mutating func numbered(_ lists: [[String]], inherited: [Constraint]?, previous: [Constraint]?) -> [Constraint] {
            lists.enumerated().map { j, keys in
                if let inherited, j < inherited.count { return inherited[j] }
                if let c = previous?.first(where: { $0.keys == keys }) { return c }
                defer { nextIndex += 1 }
                return Constraint(keys: keys, index: nextIndex)
            }
        }
    }

    /// An entity's attributes as stored: the inherited ones as the parent has them, the others
    /// with the previous schema's index numbers where they had one.
    private static func storedAttributes(
        of e: EntityDescription, inherited: Entity?, old: Entity?, numbers: inout Numbering
    ) -> [Attribute] {
        var attributes: [Attribute] = []
        for (j, a) in e.attributes.enumerated() {
            if let inherited, j < inherited.attributes.count {
                attributes.append(inherited.attributes[j])
                continue
            }
            let oldA = old?.attributes.first { $0.name == a.name || $0.name == a.renamingIdentifier }
            let index = numbers.index(a.isIndexed && !a.isTransient, oldA?.index)
            let (type, transformer) = typeName(a.type)
            attributes.append(
                Attribute(name: a.name, type: type, transformer: transformer, optional: a.isOptional, index: index))
        }
        return attributes
    }

    /// An entity's relationships as stored: set and order keyspaces and index numbers kept from
    /// the previous schema where it had them; to-one relationships to a destination with
    /// sub-entities marked polymorphic (their records hold the keyspace too).
    private static func storedRelationships(
        of e: EntityDescription, inherited: Entity?, old: Entity?, model: ManagedObjectModel,
        numbers: inout Numbering
    ) -> [Relationship] {
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
            let setKeyspace = numbers.keyspace(r.isToMany, oldR?.setKeyspace)
            let orderKeyspace = numbers.keyspace(r.isOrdered, oldR?.orderKeyspace)
            let index = numbers.index(!r.isToMany && r.isIndexed, oldR?.index)
            relationships.append(
                Relationship(
                    name: r.name, destination: r.destination, inverse: r.inverse, toMany: r.isToMany,
                    deleteRule: r.deleteRule.rawValue, setKeyspace: setKeyspace, polymorphic: polymorphic,
                    orderKeyspace: orderKeyspace, index: index))
        }
        return relationships
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

    package static func decode(_ bytes: [UInt8]) throws -> StoredSchema {
        // What `encoded()` writes is read without `JSONDecoder` (`init(json:)`: a millisecond
        // of every open); anything else, and every error, goes through it.
        if let schema = StoredSchema(json: bytes) { return schema }
        do { return try JSONDecoder().decode(StoredSchema.self, from: Data(bytes)) } catch {
            throw LogbookError(.incompatibleModel, "the store's recorded schema cannot be read: \(error)")
        }
    }
}
