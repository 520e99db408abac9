import Foundation

/// The type of an attribute.
public enum AttributeType: Sendable, Hashable, CustomStringConvertible {
    /// Text (`String`).
    case string
    /// A 16-bit integer (`Int16`).
    case int16
    /// A 32-bit integer (`Int32`).
    case int32
    /// A 64-bit integer (`Int64`, `Int`).
    case int64
    /// A double-precision number (`Double`).
    case double
    /// A single-precision number (`Float`; stored as a double rounded to a float).
    case float
    /// `Bool`.
    case bool
    /// A point in time (`Date`; stored as `Date` holds it, seconds since 2001 as a double).
    case date
    /// Bytes (`Data`).
    case data
    /// `UUID`.
    case uuid
    /// `URL`.
    case url
    /// `Decimal`.
    case decimal
    /// A value stored as the blob that the named `AttributeTransformer` makes of it.
    case transformable(transformer: String)

    public var description: String {
        switch self {
        case .string: "String"
        case .int16: "Integer 16"
        case .int32: "Integer 32"
        case .int64: "Integer 64"
        case .double: "Double"
        case .float: "Float"
        case .bool: "Boolean"
        case .date: "Date"
        case .data: "Binary"
        case .uuid: "UUID"
        case .url: "URI"
        case .decimal: "Decimal"
        case .transformable(let t): "Transformable(\(t))"
        }
    }

    var tag: UInt8 {
        switch self {
        case .string: 1
        case .int16: 2
        case .int32: 3
        case .int64: 4
        case .double: 5
        case .float: 6
        case .bool: 7
        case .date: 8
        case .data: 9
        case .uuid: 10
        case .url: 11
        case .decimal: 12
        case .transformable: 13
        }
    }

    /// Integers, floating-point numbers and decimals.
    var isNumeric: Bool {
        switch self {
        case .int16, .int32, .int64, .double, .float, .decimal: true
        default: false
        }
    }

    /// Whether the attribute can have a secondary index. Binary data is indexed by its first
    /// bytes (as Core Data indexes it; the planner compares such values on the records);
    /// transformable values are opaque to the store.
    var isIndexable: Bool {
        switch self {
        case .transformable: false
        default: true
        }
    }
}

/// A rule an attribute's value must satisfy when its object is saved.
public enum ValidationRule: Sendable {
    /// A number (or date, as seconds since 2001, `timeIntervalSinceReferenceDate`, as Xcode's
    /// model editor writes a date's minimum and maximum) within the range.
    case range(ClosedRange<Double>)
    /// A string's count of characters, or a data value's count of bytes, within the range.
    case length(ClosedRange<Int>)
    /// A string matching the regular expression.
    case pattern(String)
    /// A custom rule: return nil when the value is valid, else the reason.
    case custom(@Sendable (Any?) -> String?)
}

/// What happens to the objects at the other end of a relationship when an object is deleted.
public enum DeleteRule: String, Sendable, Hashable {
    /// The inverse relationship of each related object forgets the deleted object.
    case nullify
    /// The related objects are deleted too.
    case cascade
    /// The deletion is refused (at save) while any object is related.
    case deny
    /// Nothing is done; the related objects keep pointing at a deleted object.
    case noAction
}

/// An attribute of an entity.
public struct AttributeDescription: Sendable {
    /// The attribute's name: the key of `value(forKey:)` and of predicates.
    public var name: String
    /// The type of its values.
    public var type: AttributeType
    /// Whether an object may be saved without a value (Core Data's *Optional*).
    public var isOptional: Bool
    /// The value a new object starts with; nil for none.
    public var defaultValue: (any Sendable)?
    /// Checks a save runs on the value (ranges, lengths, patterns); a failure lists every broken rule.
    public var rules: [ValidationRule]
    /// The attribute's previous name, for lightweight migration of a rename.
    public var renamingIdentifier: String?
    /// Whether a secondary index orders the entity's objects by this attribute.
    public var isIndexed: Bool
    /// A transient attribute holds a value in memory only: it is never written to the store,
    /// and reads no value after a fetch or a refresh (Core Data's `isTransient`).
    public var isTransient = false
    /// Free-form information for the app (the model file's `userInfo`).
    public var userInfo: [String: String] = [:]
    /// A derived attribute's expression (Core Data's `derivationExpression`): computed at
    /// each save of an object and stored, so it can be fetched and indexed — a key path
    /// (`manager.name`), an aggregate of a to-many relationship (`employees.@count`), a
    /// function (`lowercase:(name)`, `canonical:(name)`, `now()`)…
    public var derivationExpression: String?
    /// Whether a deleted object's value of this attribute is kept in the history of the
    /// delete (Core Data's `preservesValueInHistoryOnDeletion`, a *tombstone*), so that a
    /// reader of history can tell which object went (by a UUID or a server ID).
    public var preservesValueInHistoryOnDeletion = false

    /// An attribute named `name` of `type`.
    ///
    /// ```swift
    /// AttributeDescription("age", .int32, optional: true, indexed: true, rules: [.range(0...150)])
    /// ```
    public init(
        _ name: String, _ type: AttributeType, optional: Bool = false, default defaultValue: (any Sendable)? = nil,
        indexed: Bool = false, transient: Bool = false, rules: [ValidationRule] = [],
        renamedFrom renamingIdentifier: String? = nil
    ) {
        self.name = name
        self.type = type
        self.isTransient = transient
        self.isOptional = optional
        self.defaultValue = defaultValue
        self.rules = rules
        self.renamingIdentifier = renamingIdentifier
        self.isIndexed = indexed
    }
}

/// A relationship from one entity to another, with its inverse.
public struct RelationshipDescription: Sendable {
    /// The relationship's name.
    public var name: String
    /// The name of the entity it points to.
    public var destination: String
    /// The name of the destination's relationship that points back; Logbook keeps both sides in step.
    public var inverse: String?
    /// Whether it holds a set of objects rather than at most one.
    public var isToMany: Bool
    /// What deleting the source object does to the related objects.
    public var deleteRule: DeleteRule
    /// Whether an object may be saved with no related object (to-one) or none at all (to-many, with `minCount`).
    public var isOptional: Bool
    /// For to-many relationships: bounds on the number of related objects, checked at save.
    public var minCount: Int
    /// The upper bound on the number of related objects (`Int.max`: none).
    public var maxCount: Int
    /// The relationship's previous name, for lightweight migration of a rename.
    public var renamingIdentifier: String?
    /// Free-form information for the app (the model file's `userInfo`).
    public var userInfo: [String: String] = [:]
    /// For to-many relationships: the members keep an order (Core Data's `isOrdered`, an
    /// ordered set): read them with `orderedObjects(forKey:)`, change the order with
    /// `insert(_:at:inRelationship:)`, `moveObject(at:to:inRelationship:)`, …
    public var isOrdered = false
    /// For to-one relationships: whether the store keeps an index of the destination, so that
    /// `manager == %@` and `manager.name == "X"` read only the matching objects (true by
    /// default, as SQLite users index foreign keys). Ignored for to-many relationships, whose
    /// members are stored as sets.
    public var isIndexed = true

    /// A relationship named `name` to the entity `destination`, with its inverse.
    ///
    /// ```swift
    /// RelationshipDescription("employees", to: "Employee", inverse: "manager", toMany: true, deleteRule: .cascade)
    /// ```
    public init(
        _ name: String, to destination: String, inverse: String?, toMany: Bool = false, ordered: Bool = false,
        deleteRule: DeleteRule = .nullify,
        optional: Bool = true, minCount: Int = 0, maxCount: Int = .max, renamedFrom renamingIdentifier: String? = nil,
        indexed: Bool = true
    ) {
        self.name = name
        self.isIndexed = indexed
        self.isOrdered = ordered && toMany
        self.destination = destination
        self.inverse = inverse
        self.isToMany = toMany
        self.deleteRule = deleteRule
        self.isOptional = optional
        self.minCount = minCount
        self.maxCount = maxCount
        self.renamingIdentifier = renamingIdentifier
    }
}

/// An entity: a kind of object, with attributes and relationships (a table, in SQL terms).
public struct EntityDescription: Sendable {
    /// The entity's name (unique in its model).
    public var name: String
    /// Its attributes, in the order records store them.
    public var attributes: [AttributeDescription]
    /// Its relationships.
    public var relationships: [RelationshipDescription]
    /// The entity's previous name, for lightweight migration of a rename.
    public var renamingIdentifier: String?
    /// The class its objects are made of (a `ManagedObject` subclass), if any.
    public var managedClass: ManagedObject.Type?
    /// The entity this one inherits from (Core Data's `superentity`): its attributes,
    /// relationships, validation rules and indexes come first, then this entity's own.
    public var parentEntity: String?
    /// Whether the entity has no objects of its own, only those of its sub-entities
    /// (`isAbstract`): inserting one is an error.
    public var isAbstract: Bool
    /// Free-form information for the app (the model file's `userInfo`).
    public var userInfo: [String: String] = [:]
    /// Properties whose value is a fetch, run when read (Core Data's fetched properties).
    public var fetchedProperties: [FetchedPropertyDescription] = []
    /// Sets of attributes (or to-one relationships) whose values no two objects of the entity
    /// (and its sub-entities) may share: checked at save with an index (Core Data's
    /// `uniquenessConstraints`). A value left empty is not constrained.
    public var uniquenessConstraints: [[String]] = []
    /// Indexes over several attributes (or to-one relationships), in order: a fetch uses one
    /// for equality conditions on a prefix of its keys plus a range on the next (Core Data's
    /// `indexes`, a fetch index with several elements). Single-attribute indexes are
    /// `AttributeDescription.isIndexed`.
    ///
    /// ```swift
    /// var person = EntityDescription("Person") { … }
    /// person.compoundIndexes = [["lastName", "age"]]   // lastName == 'X' AND age > 40
    /// ```
    public var compoundIndexes: [[String]] = []

    /// An entity from lists of attributes and relationships.
    public init(
        _ name: String, attributes: [AttributeDescription] = [], relationships: [RelationshipDescription] = [],
        class managedClass: ManagedObject.Type? = nil, parent parentEntity: String? = nil, abstract: Bool = false,
        renamedFrom renamingIdentifier: String? = nil
    ) {
        self.name = name
        self.attributes = attributes
        self.relationships = relationships
        self.managedClass = managedClass
        self.parentEntity = parentEntity
        self.isAbstract = abstract
        self.renamingIdentifier = renamingIdentifier
    }

    /// An entity built from a list of properties:
    /// ```swift
    /// EntityDescription("Person") {
    ///     AttributeDescription("firstName", .string)
    ///     AttributeDescription("age", .int32, optional: true, indexed: true)
    ///     RelationshipDescription("manager", to: "Manager", inverse: "employees")
    /// }
    /// ```
    ///
    /// A sub-entity names its parent; it has the parent's properties and adds its own:
    /// ```swift
    /// EntityDescription("Vehicle", abstract: true) { AttributeDescription("wheels", .int16) }
    /// EntityDescription("Car", parent: "Vehicle") { AttributeDescription("plate", .string) }
    /// ```
    public init(
        _ name: String, class managedClass: ManagedObject.Type? = nil, parent: String? = nil, abstract: Bool = false,
        renamedFrom: String? = nil, compoundIndexes: [[String]] = [],
        @PropertyListBuilder _ properties: () -> [PropertyDescription]
    ) {
        var attributes: [AttributeDescription] = []
        var relationships: [RelationshipDescription] = []
        for p in properties() {
            switch p {
            case .attribute(let a): attributes.append(a)
            case .relationship(let r): relationships.append(r)
            }
        }
        self.init(
            name, attributes: attributes, relationships: relationships, class: managedClass, parent: parent,
            abstract: abstract, renamedFrom: renamedFrom)
        self.compoundIndexes = compoundIndexes
    }
}

/// A property whose value is the result of a fetch: the objects of `destination` that match
/// `predicateFormat`, in which `$FETCH_SOURCE` is the object the property is read on.
///
/// ```swift
/// FetchedPropertyDescription("sameCity", destination: "Person", predicate: "city == $FETCH_SOURCE.city")
/// ```
public struct FetchedPropertyDescription: Sendable {
    /// The property's name (read it with `value(forKey:)`).
    public var name: String
    /// The entity fetched.
    public var destination: String
    /// The condition, as a predicate format (nil: every object of the destination).
    public var predicateFormat: String?

    /// A fetched property.
    public init(_ name: String, destination: String, predicate predicateFormat: String? = nil) {
        self.name = name
        self.destination = destination
        self.predicateFormat = predicateFormat
    }
}

/// An attribute or a relationship, for `PropertyListBuilder`.
public enum PropertyDescription: Sendable {
    /// An attribute.
    case attribute(AttributeDescription)
    /// A relationship.
    case relationship(RelationshipDescription)
}

/// Builds an entity's property list from attribute and relationship descriptions (see `EntityDescription.init(_:class:renamedFrom:_:)`).
@resultBuilder
public enum PropertyListBuilder {
    /// An attribute as a property.
    public static func buildExpression(_ a: AttributeDescription) -> [PropertyDescription] { [.attribute(a)] }
    /// A relationship as a property.
    public static func buildExpression(_ r: RelationshipDescription) -> [PropertyDescription] { [.relationship(r)] }
    /// The properties of a block, in order.
    public static func buildBlock(_ parts: [PropertyDescription]...) -> [PropertyDescription] { parts.flatMap { $0 } }
    /// The properties of an `if` without `else` (none when the condition is false).
    public static func buildOptional(_ part: [PropertyDescription]?) -> [PropertyDescription] { part ?? [] }
    /// The properties of a `for` loop.
    public static func buildArray(_ parts: [[PropertyDescription]]) -> [PropertyDescription] { parts.flatMap { $0 } }
}

/// Builds a model's entity list (see `ManagedObjectModel.init(_:)`).
@resultBuilder
public enum EntityListBuilder {
    /// An entity of the list.
    public static func buildExpression(_ e: EntityDescription) -> [EntityDescription] { [e] }
    /// The entities of a block, in order.
    public static func buildBlock(_ parts: [EntityDescription]...) -> [EntityDescription] { parts.flatMap { $0 } }
    /// The entities of a `for` loop.
    public static func buildArray(_ parts: [[EntityDescription]]) -> [EntityDescription] { parts.flatMap { $0 } }
}

/// The model: the entities a store holds (the schema, in SQL terms).
///
/// ```swift
/// let model = try ManagedObjectModel {
///     EntityDescription("Person", class: Person.self) {
///         AttributeDescription("firstName", .string)
///         AttributeDescription("lastName", .string)
///         AttributeDescription("age", .int32, optional: true)
///     }
/// }
/// ```
///
/// The initializer checks the model: unique names, destinations that exist, inverses that
/// point back, and typed classes whose properties match their attributes.
public final class ManagedObjectModel: Sendable {
    /// The model's entities, in the order they were given, each with its own properties
    /// (not those it inherits; `allProperties(of:)` has them all).
    public let entities: [EntityDescription]
    let byName: [String: Int]
    /// Resolved per-entity facts used on every access (slots, keys, inverses).
    let layouts: [EntityLayout]
    /// Each entity with its inherited properties first: what records store.
    let flattened: [EntityDescription]
    /// Named fetch requests of the model file (`<fetchRequest>`): entity and predicate format,
    /// which may hold `$variables`; see `fetchRequestFromTemplate(named:substitutionVariables:)`.
    public let fetchRequestTemplates: [String: (entityName: String, predicateFormat: String?)]
    /// Named subsets of the entities (the model file's configurations).
    public let configurations: [String: [String]]
    /// What the model file holds that Logbook reads but does not act on, in words (empty for
    /// a model built in code). Loading never fails for these: check them once.
    public let warnings: [String]
    /// By entity: the entity at the top of its inheritance tree.
    let root: [Int]

    /// A model from a list of entities, checked (see the type's discussion).
    public convenience init(@EntityListBuilder _ entities: () -> [EntityDescription]) throws {
        try self.init(entities: entities())
    }

    /// A model from an array of entities, checked: an invalid model throws `.invalidModel` naming the entity and property.
    public convenience init(entities: [EntityDescription]) throws {
        try self.init(entities: entities, fetchRequestTemplates: [:], configurations: [:], warnings: [])
    }

    init(
        entities: [EntityDescription], fetchRequestTemplates: [String: (entityName: String, predicateFormat: String?)],
        configurations: [String: [String]], warnings: [String]
    ) throws {
        self.fetchRequestTemplates = fetchRequestTemplates
        self.configurations = configurations
        self.warnings = warnings
        var byName: [String: Int] = [:]
        for (i, e) in entities.enumerated() {
            guard !e.name.isEmpty else { throw LogbookError(.invalidModel, "an entity has no name") }
            guard byName.updateValue(i, forKey: e.name) == nil else {
                throw LogbookError(.invalidModel, "two entities are named \(e.name)", entity: e.name)
            }
        }
        self.entities = entities
        self.byName = byName
        // Inheritance: parents that exist, no cycles; each entity flattened, parents first.
        var parent = [Int?](repeating: nil, count: entities.count)
        for (i, e) in entities.enumerated() {
            guard let p = e.parentEntity else { continue }
            guard let j = byName[p] else {
                throw LogbookError(
                    .invalidModel, "the parent entity \(p) of \(e.name) is not in the model", entity: e.name)
            }
            parent[i] = j
        }
        var root = Array(entities.indices)
        var ancestors = [[Int]](repeating: [], count: entities.count)
        for i in entities.indices {
            var chain: [Int] = []
            var at = parent[i]
            while let p = at {
                guard p != i, !chain.contains(p) else {
                    throw LogbookError(
                        .invalidModel, "entity \(entities[i].name) inherits from itself", entity: entities[i].name)
                }
                chain.append(p)
                at = parent[p]
            }
            ancestors[i] = chain
            root[i] = chain.last ?? i
        }
        self.root = root
        var flattened: [EntityDescription] = []
        for (i, e) in entities.enumerated() {
            var f = e
            let line = ancestors[i].reversed().map { entities[$0] } + [e]
            f.attributes = line.flatMap(\.attributes)
            f.relationships = line.flatMap(\.relationships)
            f.uniquenessConstraints = line.flatMap(\.uniquenessConstraints)
            f.compoundIndexes = line.flatMap(\.compoundIndexes)
            flattened.append(f)
        }
        self.flattened = flattened
        var descendants = entities.indices.map { [$0] }
        for i in entities.indices { for a in ancestors[i] { descendants[a].append(i) } }
        var layouts: [EntityLayout] = []
        for (i, e) in flattened.enumerated() {
            layouts.append(
                try EntityLayout(
                    entity: e, index: i, entityIndex: byName, entities: flattened, descendants: descendants,
                    ancestors: ancestors[i], ownAttributeStart: e.attributes.count - entities[i].attributes.count))
        }
        self.layouts = layouts
        for layout in layouts { try layout.checkInverses(layouts) }
    }

    /// The attributes and relationships of an entity, the inherited ones first (nil for an
    /// unknown name).
    public func allProperties(of entityName: String) -> (
        attributes: [AttributeDescription], relationships: [RelationshipDescription]
    )? {
        byName[entityName].map { (flattened[$0].attributes, flattened[$0].relationships) }
    }

    /// The names of an entity's sub-entities, all levels down, in model order.
    public func subentities(of entityName: String) -> [String] {
        guard let i = byName[entityName] else { return [] }
        return layouts[i].descendants.dropFirst().map { entities[$0].name }
    }

    /// The entity named `name`, or nil.
    public subscript(entity name: String) -> EntityDescription? { byName[name].map { entities[$0] } }

    func layout(named name: String) throws -> EntityLayout {
        // A few entities: comparing names (most are small strings, compared as two words) is
        // cheaper than hashing one.
        if layouts.count <= 16 {
            for layout in layouts where layout.name == name { return layout }
        }
        guard let i = byName[name] else {
            throw LogbookError(.unknownEntity, "no entity named \(name) in the model", entity: name)
        }
        return layouts[i]
    }

    func layout(for type: ManagedObject.Type) throws -> EntityLayout {
        if let l = layouts.first(where: { $0.entity.managedClass == type }) { return l }
        return try layout(named: type.entityName)
    }
}
