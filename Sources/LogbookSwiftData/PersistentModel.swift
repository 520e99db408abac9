import Foundation
import LogbookGraph

/// A class whose objects a model context stores (SwiftData's `PersistentModel`). Declare it
/// with `@Model`, which writes every requirement.
///
/// ```swift
/// @Model final class Author {
///     var name: String
///     @Relationship(deleteRule: .cascade, inverse: \Book.author) var books: [Book] = []
///     init(name: String) { self.name = name }
/// }
/// ```
public protocol PersistentModel: AnyObject, Observable, Hashable, Identifiable {
    /// Where the object's persisted values live: its own until it is inserted, then its
    /// managed object's.
    var persistentBackingData: ModelBackingData { get set }
    /// The persisted properties, as `@Model` found them.
    static var schemaMetadata: [ModelPropertyMetadata] { get }
    /// The `#Unique` and `#Index` lists of the class.
    static var schemaConstraints: ModelConstraints { get }
    /// An object over existing backing data (what a fetch makes).
    init(backingData: ModelBackingData)
    /// Tells observers of the persisted property `key` that it changed (after a merge, a
    /// rollback).
    func _$notifyMutation(forKey key: String)
}

extension PersistentModel {
    /// The object's identifier: permanent once inserted (this store's object ID), temporary
    /// before.
    public var persistentModelID: PersistentIdentifier { persistentBackingData.identifier(of: type(of: self)) }

    /// The identifier, for `Identifiable`.
    public var id: PersistentIdentifier { persistentModelID }

    /// The context the object was inserted into or fetched by; nil while unattached.
    public var modelContext: ModelContext? { persistentBackingData.context }

    /// Whether the object has changes its context has not saved (an unattached object: false).
    public var hasChanges: Bool { persistentBackingData.object?.hasChanges ?? false }

    /// Whether the object was deleted from its context (saved or not).
    public var isDeleted: Bool { persistentBackingData.object?.isDeleted ?? false }

    /// Objects are equal when they are the same object (as in SwiftData).
    public static func == (a: Self, b: Self) -> Bool { a === b }

    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }

    /// Whether a key path reads the object's identity (`persistentModelID`, `id`): predicates
    /// compare the object itself.
    static func isIdentity(_ keyPath: AnyKeyPath) -> Bool {
        keyPath == \Self.persistentModelID || keyPath == \Self.id
    }

    /// The value of a persisted property by name, as its managed object stores it (for
    /// diagnostics and tools; typed code reads the property).
    public func getValue<Value>(forKey key: String) -> Value { persistentBackingData.getValue(forKey: key) }
}

/// A persisted property of a `@Model` class, as the macro records it (SwiftData's
/// `Schema.PropertyMetadata`).
public struct ModelPropertyMetadata {
    /// The property's name (the attribute's or relationship's name in the store).
    public let name: String
    /// The property's key path.
    public let keyPath: AnyKeyPath
    /// The property's type.
    public let valueType: Any.Type
    let attribute: Schema.Attribute?
    let relationship: Schema.Relationship?
    /// The initial value of the property, when it has one and it is `Sendable`: the
    /// attribute's default value (what a lightweight migration gives stored objects).
    public let defaultValue: (any Sendable)?

    /// A plain attribute or a relationship with the defaults.
    public init<Root: PersistentModel, Value>(name: String, keyPath: KeyPath<Root, Value>) {
        self.init(name: name, keyPath: keyPath, attribute: nil, relationship: nil, defaultValue: nil)
    }

    /// An attribute with `@Attribute` options.
    public init<Root: PersistentModel, Value>(name: String, keyPath: KeyPath<Root, Value>, metadata: Schema.Attribute) {
        self.init(name: name, keyPath: keyPath, attribute: metadata, relationship: nil, defaultValue: nil)
    }

    /// A relationship with `@Relationship` options.
    public init<Root: PersistentModel, Value>(
        name: String, keyPath: KeyPath<Root, Value>, metadata: Schema.Relationship
    ) {
        self.init(name: name, keyPath: keyPath, attribute: nil, relationship: metadata, defaultValue: nil)
    }

    /// A property with an initial value, which becomes its attribute's default.
    public init<Root: PersistentModel, Value: Sendable>(
        name: String, keyPath: KeyPath<Root, Value>, defaultValue: Value, metadata: Schema.Attribute? = nil
    ) {
        var recorded: (any Sendable)? = defaultValue
        if let optional = defaultValue as? any OptionalProtocol, optional.isNil { recorded = nil }
        self.init(name: name, keyPath: keyPath, attribute: metadata, relationship: nil, defaultValue: recorded)
    }

    /// A property with an initial value of a type that is not `Sendable` (a relationship, or a
    /// value type that does not say it is): no default is recorded.
    public init<Root: PersistentModel, Value>(
        name: String, keyPath: KeyPath<Root, Value>, defaultValue: Value, metadata: Schema.Attribute? = nil
    ) {
        self.init(name: name, keyPath: keyPath, attribute: metadata, relationship: nil, defaultValue: nil)
    }

    private init<Root: PersistentModel, Value>(
        name: String, keyPath: KeyPath<Root, Value>, attribute: Schema.Attribute?, relationship: Schema.Relationship?,
        defaultValue: (any Sendable)?
    ) {
        self.name = name
        self.keyPath = keyPath
        self.valueType = Value.self
        self.attribute = attribute
        self.relationship = relationship
        self.defaultValue = defaultValue
    }
}

/// The `#Unique` and `#Index` lists of a `@Model` class, by property name.
public struct ModelConstraints: Sendable {
    /// Each `#Unique` list.
    public var unique: [[String]]
    /// Each `#Index` list.
    public var indexes: [[String]]
    public init(unique: [[String]] = [], indexes: [[String]] = []) {
        self.unique = unique
        self.indexes = indexes
    }
}

/// The placeholder a `@Model` class stores for each persisted property (its value lives in
/// the backing data). Not for use in source.
public struct _ModelNoStorage: Sendable {
    public init() {}
}

/// Where a subclass of a `@Model` class keeps the initial value of each of its own persisted
/// properties (its initializer sets them before `super.init`, before there is backing data to
/// hold them) until the object is inserted. Not for use in source.
public struct _ModelInitialValue {
    let value: Any?
    public init() { value = nil }
    public init<Value>(_ value: Value) { self.value = value as Any }
}

/// The identity of a model object (SwiftData's `PersistentIdentifier`): `Sendable`, so it
/// crosses to other contexts and actors, where `ModelContext.model(for:)` gives their object;
/// `Codable`, so it can be kept (it names the store, the entity and the object's serial).
///
/// ```swift
/// let id = book.persistentModelID
/// let same = try await importer.title(of: id)      // another actor, its own context
/// let data = try JSONEncoder().encode(id)
/// ```
public struct PersistentIdentifier: Hashable, Sendable, Codable, Comparable, CustomStringConvertible {
    /// The entity (the model class's name).
    public let entityName: String
    /// The identifier of the store, nil while the object is unattached.
    public let storeIdentifier: String?
    /// The object's serial number in its entity; nil while the object is unattached.
    public let serial: UInt64?
    /// A temporary identity for an object not yet inserted.
    let temporary: UUID?

    init(objectID: ObjectID) {
        entityName = objectID.entityName
        storeIdentifier = objectID.store.uuid.uuidString
        serial = objectID.serial
        temporary = nil
    }

    init(temporaryFor entityName: String, _ uuid: UUID) {
        self.entityName = entityName
        storeIdentifier = nil
        serial = nil
        temporary = uuid
    }

    /// Whether the identifier is temporary (its object was never inserted).
    public var isTemporary: Bool { serial == nil }

    /// The object-ID URI this identifier names (`ObjectID.uriRepresentation`), nil when temporary.
    public var uriRepresentation: URL? {
        guard let storeIdentifier, let serial else { return nil }
        let entity = entityName.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? entityName
        return URL(string: "x-logbook://\(storeIdentifier)/\(entity)/p\(serial)")
    }

    public var description: String {
        if let serial { return "\(entityName)/p\(serial)" }
        return "\(entityName)/t\(temporary?.uuidString ?? "?")"
    }

    /// Orders by entity, then serial (temporary identifiers last).
    public static func < (a: Self, b: Self) -> Bool {
        if a.entityName != b.entityName { return a.entityName < b.entityName }
        return (a.serial ?? .max, a.temporary?.uuidString ?? "") < (b.serial ?? .max, b.temporary?.uuidString ?? "")
    }
}
