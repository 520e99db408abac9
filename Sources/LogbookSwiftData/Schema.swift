import Foundation
import LogbookEngine
import LogbookGraph

/// The model classes a container stores, and the version they make (SwiftData's `Schema`).
/// Related classes are found through relationships: naming the root classes is enough.
///
/// ```swift
/// let schema = Schema([Book.self, Author.self], version: Schema.Version(1, 0, 0))
/// let container = try ModelContainer(for: schema, configurations: ModelConfiguration(isStoredInMemoryOnly: true))
/// ```
public final class Schema: @unchecked Sendable {
    // @unchecked Sendable: immutable; `types` holds metatypes, which never change.
    /// A schema's version (SwiftData's `Schema.Version`), recorded in `VersionedSchema`s.
    public struct Version: Sendable, Hashable, Comparable, Codable, CustomStringConvertible {
        public var major: Int
        public var minor: Int
        public var patch: Int
        public init(_ major: Int, _ minor: Int, _ patch: Int) {
            self.major = major
            self.minor = minor
            self.patch = patch
        }
        public static func < (a: Self, b: Self) -> Bool { (a.major, a.minor, a.patch) < (b.major, b.minor, b.patch) }
        public var description: String { "\(major).\(minor).\(patch)" }
    }

    /// The options of `@Attribute` (SwiftData's `Schema.Attribute`).
    public struct Attribute: Sendable {
        /// One option of an attribute.
        public struct Option: Sendable, Hashable {
            enum Kind: Sendable, Hashable {
                case unique, externalStorage, preserveValueOnDeletion, ephemeral, spotlight
                case allowsCloudEncryption
                case transformable(String)
            }
            let kind: Kind
            /// No two objects may have the same value; inserting one that does updates the stored
            /// one (an upsert).
            public static let unique = Option(kind: .unique)
            /// SwiftData keeps large values in files beside its store; Logbook's journal holds
            /// them like any other value (LZ4 compressed), so this option changes nothing.
            public static let externalStorage = Option(kind: .externalStorage)
            /// The history keeps the value after the object is deleted (the tombstone).
            public static let preserveValueOnDeletion = Option(kind: .preserveValueOnDeletion)
            /// Tracked in memory, never stored (Core Data's transient attribute).
            public static let ephemeral = Option(kind: .ephemeral)
            /// Accepted and ignored (there is no Spotlight on Linux).
            public static let spotlight = Option(kind: .spotlight)
            /// Accepted and ignored (there is no CloudKit on Linux).
            public static let allowsCloudEncryption = Option(kind: .allowsCloudEncryption)
            /// Stored as the data the transformer registered under `name` makes of it
            /// (`AttributeTransformers.register(_:name:)`).
            public static func transformable(by name: String) -> Option { Option(kind: .transformable(name)) }
            /// Stored as the data an instance of `transformerType` makes of it (SwiftData's form):
            /// the transformer is registered under its type's name (without its module, so
            /// that the store does not depend on where the type lives) unless one is already.
            ///
            /// ```swift
            /// @Attribute(.transformable(by: ColorTransformer.self)) var color: RGBA
            /// ```
            public static func transformable(by transformerType: ValueTransformer.Type) -> Option {
                let name = String(describing: transformerType)
                if AttributeTransformers.transformer(named: name) == nil {
                    ValueTransformer.setValueTransformer(transformerType.init(), forName: NSValueTransformerName(name))
                }
                return Option(kind: .transformable(name))
            }
        }
        public let options: [Option]
        public let originalName: String?
        public let hashModifier: String?
        public init(_ options: Option..., originalName: String? = nil, hashModifier: String? = nil) {
            self.options = options
            self.originalName = originalName
            self.hashModifier = hashModifier
        }
    }

    /// The options of `@Relationship` (SwiftData's `Schema.Relationship`).
    public struct Relationship: @unchecked Sendable {
        // @unchecked Sendable: `inverse` is an immutable key path.
        /// What deleting an object does to the objects it is related to.
        public enum DeleteRule: Sendable, Hashable {
            case nullify, cascade, deny, noAction
        }
        /// One option of a relationship.
        public struct Option: Sendable, Hashable {
            let name: String
            /// The related object is unique for this object (a uniqueness constraint on the
            /// to-one relationship).
            public static let unique = Option(name: "unique")
        }
        public let options: [Option]
        public let deleteRule: DeleteRule
        public let minimumModelCount: Int?
        public let maximumModelCount: Int?
        public let originalName: String?
        public let inverse: AnyKeyPath?
        public let hashModifier: String?
        public init(
            _ options: Option..., deleteRule: DeleteRule = .nullify, minimumModelCount: Int? = 0,
            maximumModelCount: Int? = 0, originalName: String? = nil, inverse: AnyKeyPath? = nil,
            hashModifier: String? = nil
        ) {
            self.options = options
            self.deleteRule = deleteRule
            self.minimumModelCount = minimumModelCount
            self.maximumModelCount = maximumModelCount
            self.originalName = originalName
            self.inverse = inverse
            self.hashModifier = hashModifier
        }
    }

    /// The schema's version.
    public let version: Version
    /// The model classes: those named and those reached through their relationships.
    public let types: [any PersistentModel.Type]
    /// The entity names of the classes, in the order of `types`.
    public var entityNames: [String] { types.map { ModelEntityInfo.entityName(of: $0) } }

    /// A schema of `types` and every class their relationships reach.
    public init(_ types: [any PersistentModel.Type], version: Version = Version(1, 0, 0)) {
        self.version = version
        var seen = Set<ObjectIdentifier>()
        var ordered: [any PersistentModel.Type] = []
        var pending = types
        while let t = pending.first {
            pending.removeFirst()
            guard seen.insert(ObjectIdentifier(t)).inserted else { continue }
            ordered.append(t)
            // A subclass brings its superclasses (their entities are its parents); subclasses
            // are not found from their superclass: name them, as in SwiftData.
            if let s = ModelEntityInfo.superclass(of: t) { pending.append(s) }
            for p in t.schemaMetadata {
                if let related = ModelPropertyKind.relatedModel(p.valueType) { pending.append(related) }
            }
        }
        self.types = ordered
    }

    /// A schema of `types`.
    public convenience init(_ types: any PersistentModel.Type..., version: Version = Version(1, 0, 0)) {
        self.init(types, version: version)
    }

    /// The schema of a versioned schema.
    public convenience init(versionedSchema: any VersionedSchema.Type) {
        self.init(versionedSchema.models, version: versionedSchema.versionIdentifier)
    }

    /// The Core Data–style model the schema makes (one entity per class).
    public func managedObjectModel() throws -> ManagedObjectModel {
        let infos = try types.map { try ModelEntityInfo.info(for: $0) }
        var byType: [ObjectIdentifier: ModelEntityInfo] = [:]
        for i in infos { byType[ObjectIdentifier(i.type)] = i }
        return try ManagedObjectModel(entities: infos.map { try $0.entityDescription(resolving: byType) })
    }
}

/// How a persisted property of a `@Model` class is stored.
enum ModelPropertyKind {
    /// An attribute of a type the store knows (`String`, the integers, `Double`, `Date`…),
    /// optional or not.
    case attribute(any AttributeValue.Type, AttributeType, optional: Bool)
    /// Any other `Codable` value, stored as JSON through a transformer.
    case codable(transformer: String, optional: Bool)
    /// A to-one relationship (an optional or a required object).
    case toOne(any PersistentModel.Type, optional: Bool)
    /// A to-many relationship (an array of objects, or an optional one).
    case toMany(any PersistentModel.Type, optional: Bool)

    /// The model class a property of `type` relates to, if it is a relationship.
    static func relatedModel(_ type: Any.Type) -> (any PersistentModel.Type)? {
        var t = type
        if let o = t as? any _OptionalType.Type { t = o.wrappedType }
        if let m = t as? any PersistentModel.Type { return m }
        if let a = t as? any _ArrayType.Type, let m = a.elementType as? any PersistentModel.Type { return m }
        return nil
    }

    static func of(_ type: Any.Type, transformer: String?) throws -> ModelPropertyKind {
        var t = type
        var optional = false
        if let o = t as? any _OptionalType.Type {
            t = o.wrappedType
            optional = true
        }
        if let m = t as? any PersistentModel.Type { return .toOne(m, optional: optional) }
        if let a = t as? any _ArrayType.Type, let m = a.elementType as? any PersistentModel.Type {
            return .toMany(m, optional: optional)
        }
        if let transformer { return .codable(transformer: transformer, optional: optional) }
        if let scalar = t as? any _ModelScalar.Type, let value = type as? any AttributeValue.Type {
            return .attribute(value, scalar.modelAttributeType, optional: optional)
        }
        if let codable = t as? any Codable.Type {
            return .codable(transformer: CodableTransformers.register(codable), optional: optional)
        }
        throw LogbookError(
            .invalidModel,
            "\(type) is neither a type the store knows, nor Codable, nor a @Model class (or an array of one)")
    }

    /// Whether values are stored natively (not through a transformer).
    var isNative: Bool {
        if case .attribute = self { return true }
        return false
    }

    var isOptional: Bool {
        switch self {
        case .attribute(_, _, let o), .codable(_, let o), .toOne(_, let o), .toMany(_, let o): o
        }
    }
}

/// Optionals, seen through their wrapped type.
protocol _OptionalType {
    static var wrappedType: Any.Type { get }
    static var noValue: Self { get }
}
extension Optional: _OptionalType {
    static var wrappedType: Any.Type { Wrapped.self }
    static var noValue: Self { nil }
}

/// Arrays, seen through their element type.
protocol _ArrayType {
    static var elementType: Any.Type { get }
    static var empty: Self { get }
}
extension Array: _ArrayType {
    static var elementType: Any.Type { Element.self }
    static var empty: Self { [] }
}

/// The types an attribute stores natively, with their attribute type.
protocol _ModelScalar { static var modelAttributeType: AttributeType { get } }
extension String: _ModelScalar { static var modelAttributeType: AttributeType { .string } }
extension Int: _ModelScalar { static var modelAttributeType: AttributeType { .int64 } }
extension Int64: _ModelScalar { static var modelAttributeType: AttributeType { .int64 } }
extension Int32: _ModelScalar { static var modelAttributeType: AttributeType { .int32 } }
extension Int16: _ModelScalar { static var modelAttributeType: AttributeType { .int16 } }
// The other integer types in the narrowest signed attribute that holds every value of theirs
// (Core Data has no unsigned attributes), so that they index and sort as numbers. `UInt` and
// `UInt64` values above `Int64.max` do not fit: saving one is a type mismatch, never a wrap.
extension Int8: _ModelScalar { static var modelAttributeType: AttributeType { .int16 } }
extension UInt8: _ModelScalar { static var modelAttributeType: AttributeType { .int16 } }
extension UInt16: _ModelScalar { static var modelAttributeType: AttributeType { .int32 } }
extension UInt32: _ModelScalar { static var modelAttributeType: AttributeType { .int64 } }
extension UInt: _ModelScalar { static var modelAttributeType: AttributeType { .int64 } }
extension UInt64: _ModelScalar { static var modelAttributeType: AttributeType { .int64 } }
extension Double: _ModelScalar { static var modelAttributeType: AttributeType { .double } }
extension Float: _ModelScalar { static var modelAttributeType: AttributeType { .float } }
extension Bool: _ModelScalar { static var modelAttributeType: AttributeType { .bool } }
extension Date: _ModelScalar { static var modelAttributeType: AttributeType { .date } }
extension Data: _ModelScalar { static var modelAttributeType: AttributeType { .data } }
extension UUID: _ModelScalar { static var modelAttributeType: AttributeType { .uuid } }
extension URL: _ModelScalar { static var modelAttributeType: AttributeType { .url } }
extension Decimal: _ModelScalar { static var modelAttributeType: AttributeType { .decimal } }

/// `Codable` values of attributes, stored as JSON (sorted keys, so that equal values store
/// equal bytes) through a transformer registered per type.
enum CodableTransformers {
    struct Transformer<T: Codable>: AttributeTransformer {
        func transformedValue(_ value: Any) throws -> Data {
            guard let v = value as? T else {
                throw LogbookError(.typeMismatch, "\(type(of: value)) is not \(T.self)")
            }
            let encoder = JSONEncoder()
            encoder.outputFormatting = .sortedKeys
            return try encoder.encode(v)
        }
        func reverseTransformedValue(_ data: Data) throws -> Any { try JSONDecoder().decode(T.self, from: data) }
    }

    /// Registers the transformer of `type` (once) and returns its name.
    static func register(_ type: any Codable.Type) -> String {
        func make<C: Codable>(_ c: C.Type) -> any AttributeTransformer { Transformer<C>() }
        let name = "Logbook.Codable<\(String(reflecting: type))>"
        if AttributeTransformers.transformer(named: name) == nil {
            AttributeTransformers.register(make(type), name: name)
        }
        return name
    }
}

/// What Logbook knows of a `@Model` class: its entity name, how each property is stored, its
/// key paths by name. Computed once per class, process-wide.
final class ModelEntityInfo: @unchecked Sendable {
    // @unchecked Sendable: immutable after init; metatypes and key paths do not change.
    let type: any PersistentModel.Type
    let name: String
    let metadata: [ModelPropertyMetadata]
    let kinds: [String: ModelPropertyKind]
    let names: [AnyKeyPath: String]
    let constraints: ModelConstraints
    /// The info of the nearest superclass that is a `@Model` class (the parent entity).
    let superInfo: ModelEntityInfo?
    /// The properties the class declares itself (not inherited).
    let ownMetadata: [ModelPropertyMetadata]
    /// For a to-one relationship that several to-many relationships of its destination name as
    /// their inverse: the hidden to-one relationships that are the inverses of all but the
    /// first (see `siblingInverses`).
    let alternates: [String: [String]]

    private static let cache = Locked<[ObjectIdentifier: ModelEntityInfo]>([:])

    static func entityName(of type: any PersistentModel.Type) -> String { String(describing: type) }

    /// The info of a class already seen (every class of an open container's schema).
    static func cached(_ type: any PersistentModel.Type) -> ModelEntityInfo? {
        cache.withLock { $0[ObjectIdentifier(type)] }
    }

    static func info(for type: any PersistentModel.Type) throws -> ModelEntityInfo {
        if let known = cache.withLock({ $0[ObjectIdentifier(type)] }) { return known }
        let made = try ModelEntityInfo(type)
        return cache.withLock {
            $0[ObjectIdentifier(type)]
                ?? {
                    $0[ObjectIdentifier(type)] = made
                    return made
                }(&$0)
        }
    }

    /// The nearest superclass of `type` that is a `@Model` class.
    static func superclass(of type: any PersistentModel.Type) -> (any PersistentModel.Type)? {
        var at: AnyClass? = _getSuperclass(type)
        while let c = at {
            if let model = c as? any PersistentModel.Type { return model }
            at = _getSuperclass(c)
        }
        return nil
    }

    /// The names of the entity of `type` and of every entity below it among the classes seen.
    static func entityNames(ofSubclassesOf type: any PersistentModel.Type) -> [String] {
        let all = cache.withLock { Array($0.values) }
        return [entityName(of: type)]
            + all.filter { info in
                var at = info.superInfo
                while let s = at {
                    if s.type == type { return true }
                    at = s.superInfo
                }
                return false
            }.map(\.name).sorted()
    }

    private init(_ type: any PersistentModel.Type) throws {
        self.type = type
        name = Self.entityName(of: type)
        metadata = type.schemaMetadata
        constraints = type.schemaConstraints
        superInfo = try Self.superclass(of: type).map { try Self.info(for: $0) }
        let inherited = Set(superInfo?.metadata.map(\.name) ?? [])
        ownMetadata = metadata.filter { !inherited.contains($0.name) }
        var kinds: [String: ModelPropertyKind] = [:]
        var names: [AnyKeyPath: String] = [:]
        for p in metadata {
            var transformer: String?
            for o in p.attribute?.options ?? [] {
                if case .transformable(let t) = o.kind { transformer = t }
            }
            do { kinds[p.name] = try ModelPropertyKind.of(p.valueType, transformer: transformer) } catch let e
                as LogbookError
            {
                throw LogbookError(.invalidModel, "\(name).\(p.name): \(e.message)", entity: name, key: p.name)
            }
            names[p.keyPath] = p.name
        }
        self.kinds = kinds
        self.names = names
        var alternates: [String: [String]] = [:]
        for p in metadata {
            guard case .toOne(let destination, _) = kinds[p.name] else { continue }
            let hidden = Self.siblingInverses(of: p, in: destination.schemaMetadata).map { Self.hiddenName(p.name, $0) }
            if !hidden.isEmpty { alternates[p.name] = hidden }
        }
        self.alternates = alternates
    }

    /// The to-many relationships of a destination that name the to-one `p` as their inverse,
    /// but for the one that is its inverse (the one `p` names, else the first declared):
    /// Apple's Backyard Birds has `leadingPlants` and `trailingPlants`, both
    /// `inverse: \Plant.backyard`. Each of these gets a hidden to-one inverse on `p`'s class
    /// (`hiddenName`), so that every link has its inverse kept in step; `p` reads the first of
    /// them that has a value.
    static func siblingInverses(of p: ModelPropertyMetadata, in destination: [ModelPropertyMetadata]) -> [String] {
        let naming = destination.filter { $0.relationship?.inverse == p.keyPath }
        guard naming.count > 1 else { return [] }
        let primary = naming.first { $0.keyPath == p.relationship?.inverse } ?? naming[0]
        return naming.filter { $0.name != primary.name }.map(\.name)
    }

    /// The hidden to-one relationship that is the inverse of `sibling` in place of `toOne`.
    static func hiddenName(_ toOne: String, _ sibling: String) -> String { "\(toOne)$\(sibling)" }

    /// The entity of the class; `others` finds the classes its relationships point to.
    func entityDescription(resolving others: [ObjectIdentifier: ModelEntityInfo]) throws -> EntityDescription {
        var entity = EntityDescription(name)
        // A subclass is a sub-entity of its superclass's entity, with the properties it adds.
        entity.parentEntity = superInfo?.name
        for p in ownMetadata {
            guard let kind = kinds[p.name] else { continue }
            let options = Set(p.attribute?.options.map(\.kind) ?? [])
            switch kind {
            case .attribute(_, _, let optional), .codable(_, let optional):
                let attributeType: AttributeType
                switch kind {
                case .attribute(_, let t, _): attributeType = t
                case .codable(let transformer, _): attributeType = .transformable(transformer: transformer)
                default: continue
                }
                var a = AttributeDescription(
                    // The initial value is the default, a Codable value's (an array, an enum)
                    // too: what a lightweight migration gives the objects already stored.
                    p.name, attributeType, optional: optional, default: p.defaultValue,
                    transient: options.contains(.ephemeral), renamedFrom: p.attribute?.originalName)
                a.preservesValueInHistoryOnDeletion = options.contains(.preserveValueOnDeletion)
                entity.attributes.append(a)
                if options.contains(.unique) { entity.uniquenessConstraints.append([p.name]) }
            case .toOne(let destination, let optional), .toMany(let destination, let optional):
                guard let target = others[ObjectIdentifier(destination)] else {
                    throw LogbookError(
                        .invalidModel, "\(name).\(p.name) points to \(destination), which is not in the schema",
                        entity: name, key: p.name)
                }
                let toMany: Bool
                if case .toMany = kind { toMany = true } else { toMany = false }
                let r = p.relationship
                let deleteRule: DeleteRule =
                    switch r?.deleteRule ?? .nullify {
                    case .nullify: .nullify
                    case .cascade: .cascade
                    case .deny: .deny
                    case .noAction: .noAction
                    }
                let minimum = r?.minimumModelCount ?? 0
                let maximum = r?.maximumModelCount ?? 0
                entity.relationships.append(
                    RelationshipDescription(
                        p.name, to: target.name, inverse: try inverse(of: p, in: target), toMany: toMany,
                        deleteRule: deleteRule, optional: optional || toMany, minCount: minimum,
                        maxCount: maximum > 0 ? maximum : .max, renamedFrom: r?.originalName))
                if r?.options.contains(.unique) == true { entity.uniquenessConstraints.append([p.name]) }
            }
        }
        // The hidden inverses of sibling to-many relationships (see `siblingInverses`).
        for p in ownMetadata {
            guard case .toOne(let destination, _) = kinds[p.name], let target = others[ObjectIdentifier(destination)]
            else { continue }
            for sibling in Self.siblingInverses(of: p, in: target.metadata) {
                entity.relationships.append(
                    RelationshipDescription(Self.hiddenName(p.name, sibling), to: target.name, inverse: sibling))
            }
        }
        entity.uniquenessConstraints += constraints.unique
        for index in constraints.indexes {
            if index.count == 1, let i = entity.attributes.firstIndex(where: { $0.name == index[0] }) {
                entity.attributes[i].isIndexed = true
            } else if index.count > 1 {
                entity.compoundIndexes.append(index)
            }
        }
        return entity
    }

    /// The inverse of relationship `p`: the one it names, the one that names it, or the only
    /// relationship of `target` that points back to this class.
    func inverse(of p: ModelPropertyMetadata, in target: ModelEntityInfo) throws -> String? {
        if let given = p.relationship?.inverse {
            guard let n = target.names[given] else {
                throw LogbookError(
                    .invalidModel, "the inverse of \(name).\(p.name) is not a persisted property of \(target.name)",
                    entity: name, key: p.name)
            }
            // Several relationships naming the same inverse: all but one have a hidden inverse.
            if let toOne = target.metadata.first(where: { $0.name == n }),
                Self.siblingInverses(of: toOne, in: metadata).contains(p.name)
            {
                return Self.hiddenName(n, p.name)
            }
            return n
        }
        func points(_ q: ModelPropertyMetadata, to t: any PersistentModel.Type) -> Bool {
            ModelPropertyKind.relatedModel(q.valueType).map { ObjectIdentifier($0) == ObjectIdentifier(t) } ?? false
        }
        let back = target.metadata.filter { q in points(q, to: type) && !(target.name == name && q.name == p.name) }
        // The first relationship naming this one as its inverse (see above for several).
        if let named = back.first(where: { $0.relationship?.inverse == p.keyPath }) { return named.name }
        // Inferred only when it is unambiguous: one relationship each way (for a class related to
        // itself, two relationships that are each other's only candidate).
        let forward = metadata.filter { points($0, to: target.type) }
        let expected = target.name == name ? 2 : 1
        guard back.count == 1, forward.count == expected, back[0].relationship?.inverse == nil else { return nil }
        return back[0].name
    }
}
