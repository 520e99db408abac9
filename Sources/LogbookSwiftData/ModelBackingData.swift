import Foundation
import LogbookGraph

/// Where a `@Model` object's persisted values live (SwiftData's `BackingData`): values of its
/// own while the object is unattached; its managed object's, in the context it was inserted
/// into or fetched by, after. Written by `@Model`; not for use in source.
public final class ModelBackingData {
    /// Values set before the object was inserted, by property name.
    private var pending: [String: Any] = [:]
    /// The managed object, once attached.
    private(set) var object: ManagedObject?
    /// The context, once attached. Held: an object keeps its context alive, as in SwiftData
    /// (the context holds its objects weakly, so there is no cycle).
    private(set) var context: ModelContext?
    /// How each property is stored, once attached.
    private var info: ModelEntityInfo?
    /// The temporary identity of an unattached object.
    private lazy var temporary = UUID()

    /// The properties whose `willSet`/`didSet` are running: a set of one of them from inside
    /// its own observers stores the value without running them again, as Swift's observers do.
    private var observing: Set<String> = []

    /// Empty backing data, for an object made by its own initializer.
    public init() {}

    /// For `@Model`'s setters of properties with observers: whether the observers of `key` may
    /// run now (false inside them); `_$endObservers(forKey:)` follows a true answer.
    public func _$beginObservers(forKey key: String) -> Bool { observing.insert(key).inserted }

    /// The end of what `_$beginObservers(forKey:)` began.
    public func _$endObservers(forKey key: String) { observing.remove(key) }

    init(object: ManagedObject, context: ModelContext, info: ModelEntityInfo) {
        self.object = object
        self.context = context
        self.info = info
    }

    func identifier(of type: any PersistentModel.Type) -> PersistentIdentifier {
        if let object { return PersistentIdentifier(objectID: object.objectID) }
        return PersistentIdentifier(temporaryFor: ModelEntityInfo.entityName(of: type), temporary)
    }

    /// Moves the object into `context` as `object`; returns the values set before.
    func attach(to object: ManagedObject, context: ModelContext, info: ModelEntityInfo) -> [String: Any] {
        self.object = object
        self.context = context
        self.info = info
        defer { pending = [:] }
        return pending
    }

    /// The value of the persisted property `key`.
    public func getValue<Value>(forKey key: String) -> Value {
        guard let object, let info, let kind = info.kinds[key] else {
            if let v = pending[key] { return v as! Value }
            if let o = Value.self as? any _OptionalType.Type { return o.noValue as! Value }
            if let a = Value.self as? any _ArrayType.Type { return a.empty as! Value }
            preconditionFailure("\(key) of an unattached \(Value.self) object was read before it was set")
        }
        switch kind {
        case .attribute(let type, _, _):
            if let (slot, attributeType) = object.typedRead(key),
                let v = type.init(storedValue: StoredValue(slot: slot), type: attributeType)
            {
                return v as! Value
            }
            return type.absentValue as! Value
        case .codable:
            if let v = (try? object.value(forKey: key)) ?? nil { return v as! Value }
        case .toOne:
            // The relationship, or (for one several to-many relationships name as their
            // inverse) the first hidden inverse that has a value.
            for name in [key] + (info.alternates[key] ?? []) {
                if let related = (try? object.value(forKey: name)) as? ManagedObject, let context {
                    return context.model(for: related) as! Value
                }
            }
        case .toMany:
            guard let context, let related = try? object.objects(forKey: key) else { break }
            // SwiftData's arrays are unordered; these come in serial order (insertion order).
            let models = related.sorted { $0.engineKey < $1.engineKey }.map { context.model(for: $0) }
            return cast(models, to: Value.self)
        }
        if let o = Value.self as? any _OptionalType.Type { return o.noValue as! Value }
        if let a = Value.self as? any _ArrayType.Type { return a.empty as! Value }
        preconditionFailure("\(info.name).\(key) has no value (was its object deleted?)")
    }

    /// The value of the persisted property `key` of a subclass, whose initial value waits in
    /// the object (see `_ModelInitialValue`) until it is inserted.
    public func getValue<Value>(forKey key: String, initialValue: _ModelInitialValue) -> Value {
        if object == nil, pending[key] == nil, let v = initialValue.value { return v as! Value }
        return getValue(forKey: key)
    }

    /// Whether the unattached object has a value for `key` set since it was made.
    func hasPending(_ key: String) -> Bool { pending[key] != nil }

    /// Sets the persisted property `key` of `owner` (the model object this backing data is
    /// for). An unattached object given a related object that is in a context is inserted into
    /// that context, as in SwiftData (`book.author = fetchedAuthor` saves the book too).
    public func setValue<Value>(forKey key: String, to value: Value, owner: (any PersistentModel)? = nil) {
        guard let object, let info, let kind = info.kinds[key], let context else {
            pending[key] = value
            if let owner, let context = Self.context(of: value) { context.insert(owner) }
            return
        }
        switch kind {
        case .attribute:
            guard let v = value as? any AttributeValue else {
                preconditionFailure("\(Value.self) is not an attribute value")
            }
            object.typedWrite(key) { type in v.storedValue(type: type)?.slot }
        case .codable:
            let unwrapped = Self.unwrapped(value)
            context.record { try object.setValue(unwrapped, forKey: key) }
        case .toOne:
            let model = Self.unwrapped(value) as? any PersistentModel
            context.record {
                // Set directly, the object joins the primary relationship's set and leaves the
                // others' (see `ModelEntityInfo.siblingInverses`).
                for hidden in info.alternates[key] ?? [] { try object.setValue(nil, forKey: hidden) }
                try object.setValue(model.map { try context.managedObject(for: $0) }, forKey: key)
            }
        case .toMany:
            let models = Self.unwrapped(value) as? [any PersistentModel] ?? []
            context.record { try object.setValue(try models.map { try context.managedObject(for: $0) }, forKey: key) }
        }
        context.didChange()
    }

    /// The context of the first attached model object in `value` (a model object, an optional
    /// one, an array of them), if any.
    private static func context(of value: Any) -> ModelContext? {
        switch unwrapped(value) {
        case let model as any PersistentModel: return model.persistentBackingData.context
        case let models as [any PersistentModel]:
            return models.lazy.compactMap { $0.persistentBackingData.context }.first
        default: return nil
        }
    }

    /// A value with its optional unwrapped (nil for none), whatever its type.
    private static func unwrapped(_ value: Any) -> Any? {
        if let optional = value as? any OptionalProtocol { return optional.wrapped }
        return value
    }

    private func cast<Value>(_ models: [any PersistentModel], to: Value.Type) -> Value {
        if let v = models as? Value { return v }
        // An array of the concrete class, through its element type.
        let array = Value.self as? any _OptionalType.Type
        let arrayType = (array?.wrappedType ?? Value.self) as! any _ArrayType.Type
        return arrayType.from(models) as! Value
    }
}

extension _ArrayType {
    /// An array of this type made of `elements` (each cast to the element type).
    static func from(_ elements: [Any]) -> Any {
        (Self.self as! any _TypedArray.Type).make(elements)
    }
}

protocol _TypedArray { static func make(_ elements: [Any]) -> Any }
extension Array: _TypedArray {
    static func make(_ elements: [Any]) -> Any { elements.map { $0 as! Element } }
}
