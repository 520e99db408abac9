import Foundation
import LogbookEngine

/// An entity as the object graph uses it: slot numbers for attributes and relationships.
final class EntityLayout: Sendable {
    let entity: EntityDescription
    let index: Int
    let name: String
    /// Attribute slots come first (0..<attributeCount), then to-one relationships.
    let attributeCount: Int
    let slotByName: [String: Int]
    let toOne: [Int]
    let toMany: [Int]
    /// For each relationship (by index in `entity.relationships`): the destination's index and
    /// the inverse's index in the destination's relationships.
    let relationshipDestination: [Int]
    let relationshipInverse: [Int?]
    let relationshipByName: [String: Int]
    let managedClass: ManagedObject.Type
    /// Slots of a new object: the defaults, else no value.
    let defaultSlots: [FieldValue]
    /// Names by slot.
    let slotNames: [String]
    /// The ids of the slot names (`PropertyName`): a `@Managed` property's name is compared
    /// with them as numbers.
    let slotNameIDs: [UInt16]
    /// Slots by name id, for entities of more than 16 slots.
    let slotByNameID: [UInt16: Int]
    /// Storage kinds by slot.
    let slotKinds: [SlotKind]
    /// What save checks, precomputed: slots that must have a value, attributes with rules,
    /// to-one relationships that must be set, to-many relationships with count bounds.
    let requiredSlots: [Int]
    let ruleSlots: [Int]
    /// Transient attributes: written as no value.
    let transientSlots: [Int]
    /// Derived attributes and their expressions, computed at save.
    let derivedSlots: [(slot: Int, expression: FetchExpression)]
    let hasRelationshipRules: Bool
    /// Uniqueness constraints (inherited ones first), as the slots of their attributes and
    /// to-one relationships.
    let constraints: [[Int]]

    /// This entity and all its sub-entities (all levels), this one first.
    let descendants: [Int]
    /// Its parent, the parent's parent, and so on.
    let ancestors: [Int]
    /// Whether it inherits or is inherited from: then its indexes and sets are shared with
    /// the others of its tree, and a plan filters what an index finds by keyspace.
    var inTree: Bool { descendants.count > 1 || !ancestors.isEmpty }
    /// Where its own attributes start (the inherited ones come first).
    let ownAttributeStart: Int

    init(
        entity: EntityDescription, index: Int, entityIndex: [String: Int], entities: [EntityDescription],
        descendants: [[Int]] = [], ancestors: [Int] = [], ownAttributeStart: Int = 0
    ) throws {
        self.entity = entity
        self.index = index
        self.name = entity.name
        self.descendants = descendants.isEmpty ? [index] : descendants[index]
        self.ancestors = ancestors
        self.ownAttributeStart = ownAttributeStart
        self.managedClass = entity.managedClass ?? ManagedObject.self
        attributeCount = entity.attributes.count
        var slots = try Self.attributeSlots(entity)
        let (relByName, destinations, toOne, toMany) = try Self.relationships(
            entity, slots: &slots, attributeCount: attributeCount, entityIndex: entityIndex)
        let inverses = try Self.inverses(entity, entityIndex: entityIndex, entities: entities)
        self.slotByName = slots
        var defaults = [FieldValue](repeating: .null, count: entity.attributes.count + toOne.count)
        for (i, a) in entity.attributes.enumerated() {
            if let d = a.defaultValue {
                defaults[i] = (try? FieldValue(d, type: a.type, transformers: AttributeTransformers.registry)) ?? .null
            }
        }
        self.defaultSlots = defaults
        self.slotNames = entity.attributes.map(\.name) + toOne.map { entity.relationships[$0].name }
        let nameIDs = slotNames.map(PropertyNames.id)
        self.slotNameIDs = nameIDs
        self.slotByNameID = nameIDs.count > 16 ? Dictionary(zip(nameIDs, nameIDs.indices)) { a, _ in a } : [:]
        // A to-one relationship to an entity with sub-entities records the keyspace too.
        self.slotKinds = Self.kinds(
            entity,
            toOne: toOne.map { r in
                descendants.isEmpty ? false : descendants[entityIndex[entity.relationships[r].destination]!].count > 1
            })
        self.requiredSlots = entity.attributes.indices.filter { !entity.attributes[$0].isOptional }
        self.ruleSlots = entity.attributes.indices.filter { !entity.attributes[$0].rules.isEmpty }
        self.transientSlots = entity.attributes.indices.filter { entity.attributes[$0].isTransient }
        self.derivedSlots = try Self.derivations(entity)
        self.constraints = try entity.uniquenessConstraints.map {
            try Self.storedSlots($0, of: "uniqueness constraint", entity: entity, slots: slots)
        }.filter { !$0.isEmpty }
        for keys in entity.compoundIndexes {
            _ = try Self.storedSlots(keys, of: "compound index", entity: entity, slots: slots)
        }
        self.hasRelationshipRules = entity.relationships.contains { r in
            r.isToMany ? (r.minCount > 0 || r.maxCount < .max) : !r.isOptional
        }
        self.toOne = toOne
        self.toMany = toMany
        self.relationshipDestination = destinations
        self.relationshipInverse = inverses
        self.relationshipByName = relByName
    }

    /// The attributes' slots by name, each attribute checked: a unique name, an indexable type
    /// where indexed, a default value of its type.
    private static func attributeSlots(_ entity: EntityDescription) throws -> [String: Int] {
        var slots: [String: Int] = [:]
        for (i, a) in entity.attributes.enumerated() {
            guard slots.updateValue(i, forKey: a.name) == nil else {
                throw LogbookError(
                    .invalidModel, "two properties are named \(a.name)", entity: entity.name, key: a.name)
            }
            if a.isIndexed && !a.type.isIndexable {
                throw LogbookError(
                    .invalidModel, "a \(a.type) attribute cannot be indexed", entity: entity.name, key: a.name)
            }
            if let d = a.defaultValue,
                (try? FieldValue(d, type: a.type, transformers: AttributeTransformers.registry)) == nil
            {
                throw LogbookError(
                    .invalidModel, "the default value \(d) is not a \(a.type)", entity: entity.name, key: a.name)
            }
        }
        return slots
    }

    /// The relationships by name, their destinations' model indexes, and which are to-one
    /// (given slots after the attributes, added to `slots`) and to-many.
    private static func relationships(
        _ entity: EntityDescription, slots: inout [String: Int], attributeCount: Int, entityIndex: [String: Int]
    ) throws -> (byName: [String: Int], destinations: [Int], toOne: [Int], toMany: [Int]) {
        var relByName: [String: Int] = [:]
        var destinations: [Int] = []
        var toOne: [Int] = []
        var toMany: [Int] = []
        for (i, r) in entity.relationships.enumerated() {
            guard slots[r.name] == nil, relByName.updateValue(i, forKey: r.name) == nil else {
                throw LogbookError(
                    .invalidModel, "two properties are named \(r.name)", entity: entity.name, key: r.name)
            }
            guard let d = entityIndex[r.destination] else {
                throw LogbookError(
                    .invalidModel, "relationship \(r.name) points to unknown entity \(r.destination)",
                    entity: entity.name, key: r.name)
            }
            destinations.append(d)
            if r.isToMany {
                toMany.append(i)
            } else {
                slots[r.name] = attributeCount + toOne.count
                toOne.append(i)
            }
        }
        return (relByName, destinations, toOne, toMany)
    }

    /// Each relationship's inverse, by index in its destination (nil without one).
    private static func inverses(
        _ entity: EntityDescription, entityIndex: [String: Int], entities: [EntityDescription]
    ) throws -> [Int?] {
        var inverses: [Int?] = []
        for r in entity.relationships {
            guard let inv = r.inverse else {
                inverses.append(nil)
                continue
            }
            let dest = entities[entityIndex[r.destination]!]
            guard let j = dest.relationships.firstIndex(where: { $0.name == inv }) else {
                throw LogbookError(
                    .invalidModel, "the inverse \(inv) of \(r.name) is not a relationship of \(r.destination)",
                    entity: entity.name, key: r.name)
            }
            inverses.append(j)
        }
        return inverses
    }

    /// The derived attributes' expressions, parsed.
    private static func derivations(_ entity: EntityDescription) throws -> [(slot: Int, expression: FetchExpression)] {
        var derived: [(slot: Int, expression: FetchExpression)] = []
        for (i, a) in entity.attributes.enumerated() {
            guard let format = a.derivationExpression else { continue }
            do { derived.append((i, try FetchExpression(format: format))) } catch let e as LogbookError {
                throw LogbookError(
                    .invalidModel, "the derivation of \(a.name) does not parse: \(e.message)", entity: entity.name,
                    key: a.name)
            }
        }
        return derived
    }

    /// The slots of keys that must each name a stored attribute or a to-one relationship.
    static func storedSlots(_ keys: [String], of what: String, entity: EntityDescription, slots: [String: Int]) throws
        -> [Int]
    {
        try keys.map { key in
            guard let slot = slots[key], slot >= entity.attributes.count || !entity.attributes[slot].isTransient
            else {
                throw LogbookError(
                    .invalidModel,
                    "the \(what) (\(keys.joined(separator: ", "))) names \(key), which is not a stored attribute or to-one relationship",
                    entity: entity.name, key: key)
            }
            return slot
        }
    }

    var slotCount: Int { attributeCount + toOne.count }

    /// How each slot is stored, for decoding without reading the attribute descriptions.
    enum SlotKind: UInt8 { case string, int, double, float, bool, data, uuid, url, decimal, object, anyObject }

    static func kinds(_ entity: EntityDescription, toOne: [Bool]) -> [SlotKind] {
        entity.attributes.map { a -> SlotKind in
            switch a.type {
            case .string: .string
            case .int16, .int32, .int64: .int
            case .double, .date: .double
            case .float: .float
            case .bool: .bool
            case .data, .transformable: .data
            case .uuid: .uuid
            case .url: .url
            case .decimal: .decimal
            }
        } + toOne.map { $0 ? .anyObject : .object }
    }

    func checkInverses(_ layouts: [EntityLayout]) throws {
        for (i, r) in entity.relationships.enumerated() {
            guard let j = relationshipInverse[i] else { continue }
            let dest = layouts[relationshipDestination[i]]
            let back = dest.entity.relationships[j]
            // The inverse points to this entity, or to the ancestor that declared the relationship.
            let pointsBack = back.destination == name || ancestors.contains { layouts[$0].name == back.destination }
            guard pointsBack, back.inverse == r.name else {
                throw LogbookError(
                    .invalidModel, "\(r.name) and \(dest.name).\(back.name) are not each other's inverse", entity: name,
                    key: r.name)
            }
        }
    }

    /// The slot of an attribute or to-one relationship: a scan of the names for small entities
    /// (faster than hashing the key), the table otherwise.
    @inline(__always)
    func slot(named key: String) -> Int? {
        if slotNames.count <= 16 {
            for i in slotNames.indices where slotNames[i] == key { return i }
            return nil
        }
        return slotByName[key]
    }

    /// The slot of the attribute or to-one relationship a `@Managed` property names.
    @inline(__always)
    func slot(named name: PropertyName) -> Int? {
        if slotNameIDs.count <= 16 {
            for i in slotNameIDs.indices where slotNameIDs[i] == name.id { return i }
            return nil
        }
        return slotByNameID[name.id]
    }

    /// The relationship named `key` (its index in the entity's relationships), found the way
    /// `slot(named:)` finds an attribute.
    func relationship(named key: String) -> Int? {
        let relationships = entity.relationships
        if relationships.count <= 16 {
            for i in relationships.indices where relationships[i].name == key { return i }
            return nil
        }
        return relationshipByName[key]
    }

    /// The slot of a to-one relationship.
    func slot(ofToOne relationship: Int) -> Int { slotByName[entity.relationships[relationship].name]! }
}
