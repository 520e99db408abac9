import Foundation

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

    /// Empty backing data, for an object made by its own initializer.
    public init() {}

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
            if let related = (try? object.value(forKey: key)) as? ManagedObject, let context {
                return context.model(for: related) as! Value
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

    /// Sets the persisted property `key`.
    public func setValue<Value>(forKey key: String, to value: Value) {
        guard let object, let info, let kind = info.kinds[key], let context else {
            pending[key] = value
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
            context.record { try object.setValue(model.map { try context.managedObject(for: $0) }, forKey: key) }
        case .toMany:
            let models = Self.unwrapped(value) as? [any PersistentModel] ?? []
            context.record { try object.setValue(try models.map { try context.managedObject(for: $0) }, forKey: key) }
        }
        context.didChange()
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
