import Foundation
import LogbookEngine

/// A Swift type that an attribute can hold through a typed property: String, the integer
/// types, Double, Float, Bool, Date, Data, UUID, URL, Decimal, and optionals of them.
public protocol AttributeValue {
    /// The value a property reads when the object has none (for non-optional properties).
    static var absentValue: Self { get }
    /// A value from what `value(forKey:)` returns, or nil when it is of another type.
    init?(attributeValue: Any)
    /// The value as `setValue(_:forKey:)` takes it.
    var attributeValue: Any? { get }
    /// Direct conversions to and from the stored form (no `Any` on the way); Logbook's
    /// conformances implement them, the defaults go through `attributeValue`.
    /// Reads the value from its stored form, or nil when the stored form is of another kind.
    init?(storedValue: StoredValue, type: AttributeType)
    /// The stored form of the value for an attribute of `type`, or nil when the type does not fit.
    func storedValue(type: AttributeType) -> StoredValue?
}

/// A value as a managed object stores it (opaque).
public struct StoredValue {
    @usableFromInline package let slot: FieldValue
    @usableFromInline package init(slot: FieldValue) { self.slot = slot }
}

extension AttributeValue {
    /// Reads the value from its stored form, or nil when the stored form is of another kind.
    public init?(storedValue: StoredValue, type: AttributeType) {
        guard let any = storedValue.slot.value(type: type) else { return nil }
        self.init(attributeValue: any)
    }
    /// The stored form of the value for an attribute of `type`, or nil when the type does not fit (the setter then reports a type mismatch at save).
    public func storedValue(type: AttributeType) -> StoredValue? {
        (try? FieldValue(attributeValue, type: type, transformers: AttributeTransformers.registry)).map(
            StoredValue.init)
    }
}

extension String {
    /// Reads the value from its stored form, or nil when the stored form is of another kind.
    public init?(storedValue: StoredValue, type: AttributeType) {
        guard case .string(let s) = storedValue.slot else { return nil }
        self = s
    }
    /// The stored form of the value for an attribute of `type`, or nil when the type does not fit (the setter then reports a type mismatch at save).
    public func storedValue(type: AttributeType) -> StoredValue? {
        type == .string ? StoredValue(slot: .string(self)) : nil
    }
}
extension Bool {
    /// Reads the value from its stored form, or nil when the stored form is of another kind.
    public init?(storedValue: StoredValue, type: AttributeType) {
        guard case .bool(let b) = storedValue.slot else { return nil }
        self = b
    }
    /// The stored form of the value for an attribute of `type`, or nil when the type does not fit (the setter then reports a type mismatch at save).
    public func storedValue(type: AttributeType) -> StoredValue? {
        type == .bool ? StoredValue(slot: .bool(self)) : nil
    }
}
extension Date {
    /// Reads the value from its stored form, or nil when the stored form is of another kind.
    public init?(storedValue: StoredValue, type: AttributeType) {
        guard case .double(let d) = storedValue.slot else { return nil }
        self = Date(timeIntervalSinceReferenceDate: d)
    }
    /// The stored form of the value for an attribute of `type`, or nil when the type does not fit (the setter then reports a type mismatch at save).
    public func storedValue(type: AttributeType) -> StoredValue? {
        type == .date ? StoredValue(slot: .double(timeIntervalSinceReferenceDate)) : nil
    }
}
extension Double {
    /// Reads the value from its stored form, or nil when the stored form is of another kind.
    public init?(storedValue: StoredValue, type: AttributeType) {
        guard case .double(let d) = storedValue.slot else { return nil }
        self = d
    }
    /// The stored form of the value for an attribute of `type`, or nil when the type does not fit (the setter then reports a type mismatch at save).
    public func storedValue(type: AttributeType) -> StoredValue? {
        switch type {
        case .double: StoredValue(slot: .double(self))
        case .float: StoredValue(slot: .double(Double(Float(self))))
        default: nil
        }
    }
}
extension IntegerAttributeValue {
    /// Reads the value from its stored form, or nil when the stored form is of another kind.
    public init?(storedValue: StoredValue, type: AttributeType) {
        guard case .int(let i) = storedValue.slot else { return nil }
        self.init(truncatingIfNeeded: i)
    }
    /// The stored form of the value for an attribute of `type`, or nil when the type does not fit (the setter then reports a type mismatch at save).
    public func storedValue(type: AttributeType) -> StoredValue? {
        let range: ClosedRange<Int64>
        switch type {
        case .int16: range = Int64(Int16.min)...Int64(Int16.max)
        case .int32: range = Int64(Int32.min)...Int64(Int32.max)
        case .int64: range = Int64.min...Int64.max
        default: return nil
        }
        guard let v = Int64(exactly: self), range.contains(v) else { return nil }
        return StoredValue(slot: .int(v))
    }
}

extension String: AttributeValue {
    public static var absentValue: String { "" }
    public init?(attributeValue v: Any) {
        guard let s = v as? String else { return nil }
        self = s
    }
    public var attributeValue: Any? { self }
}
extension Bool: AttributeValue {
    public static var absentValue: Bool { false }
    public init?(attributeValue v: Any) {
        guard let b = v as? Bool else { return nil }
        self = b
    }
    public var attributeValue: Any? { self }
}
extension Double: AttributeValue {
    public static var absentValue: Double { 0 }
    public init?(attributeValue v: Any) {
        if let d = v as? Double { self = d } else if let f = v as? Float { self = Double(f) } else { return nil }
    }
    public var attributeValue: Any? { self }
}
extension Float: AttributeValue {
    public static var absentValue: Float { 0 }
    public init?(attributeValue v: Any) {
        if let f = v as? Float { self = f } else if let d = v as? Double { self = Float(d) } else { return nil }
    }
    public var attributeValue: Any? { self }
}
extension Date: AttributeValue {
    public static var absentValue: Date { Date(timeIntervalSince1970: 0) }
    public init?(attributeValue v: Any) {
        guard let d = v as? Date else { return nil }
        self = d
    }
    public var attributeValue: Any? { self }
}
extension Data: AttributeValue {
    public static var absentValue: Data { Data() }
    public init?(attributeValue v: Any) {
        guard let d = v as? Data else { return nil }
        self = d
    }
    public var attributeValue: Any? { self }
}
extension UUID: AttributeValue {
    public static var absentValue: UUID { UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)) }
    public init?(attributeValue v: Any) {
        guard let u = v as? UUID else { return nil }
        self = u
    }
    public var attributeValue: Any? { self }
}
extension URL: AttributeValue {
    public static var absentValue: URL { URL(string: "about:blank")! }
    public init?(attributeValue v: Any) {
        guard let u = v as? URL else { return nil }
        self = u
    }
    public var attributeValue: Any? { self }
}
extension Decimal: AttributeValue {
    public static var absentValue: Decimal { 0 }
    public init?(attributeValue v: Any) {
        guard let d = v as? Decimal else { return nil }
        self = d
    }
    public var attributeValue: Any? { self }
}

/// Integers convert from any stored integer width (the attribute decides the width).
public protocol IntegerAttributeValue: AttributeValue, FixedWidthInteger {}
extension IntegerAttributeValue {
    /// Zero.
    public static var absentValue: Self { 0 }
    /// An integer of any stored width (`Int16`, `Int32`, `Int64`, `Int`), truncated to this type's width.
    public init?(attributeValue v: Any) {
        switch v {
        case let x as Int16: self.init(truncatingIfNeeded: x)
        case let x as Int32: self.init(truncatingIfNeeded: x)
        case let x as Int64: self.init(truncatingIfNeeded: x)
        case let x as Int: self.init(truncatingIfNeeded: x)
        default: return nil
        }
    }
    /// The integer itself.
    public var attributeValue: Any? { self }
}
extension Int: IntegerAttributeValue {}
extension Int16: IntegerAttributeValue {}
extension Int32: IntegerAttributeValue {}
extension Int64: IntegerAttributeValue {}
extension Int8: IntegerAttributeValue {}
extension UInt8: IntegerAttributeValue {}
extension UInt16: IntegerAttributeValue {}
extension UInt32: IntegerAttributeValue {}
extension UInt: IntegerAttributeValue {}
extension UInt64: IntegerAttributeValue {}

extension Optional: AttributeValue where Wrapped: AttributeValue {
    public static var absentValue: Wrapped? { nil }
    public init?(attributeValue v: Any) {
        guard let w = Wrapped(attributeValue: v) else { return nil }
        self = .some(w)
    }
    public var attributeValue: Any? { self?.attributeValue ?? nil }
    public init?(storedValue: StoredValue, type: AttributeType) {
        if storedValue.slot.isNull {
            self = .none
            return
        }
        guard let w = Wrapped(storedValue: storedValue, type: type) else { return nil }
        self = .some(w)
    }
    public func storedValue(type: AttributeType) -> StoredValue? {
        guard let w = self else { return StoredValue(slot: .null) }
        return w.storedValue(type: type)
    }
}

/// A typed attribute of a `ManagedObject` subclass, read and written through its context.
///
/// ```swift
/// final class Person: ManagedObject {
///     @Managed("firstName") var firstName: String
///     @Managed("age") var age: Int32?
/// }
/// ```
/// Reading a non-optional property that has no value gives `absentValue` ("" or 0); the
/// save reports the missing required value. A setter cannot throw: an error (an object used
/// after its context was reset…) is reported by the next `save()`.
@propertyWrapper
public struct Managed<Value: AttributeValue> {
    @usableFromInline let name: PropertyName

    /// The attribute's name in the model.
    public var key: String { name.string }

    /// A property for the attribute named `key`, held as the name's two-byte id
    /// (`PropertyName`): the property takes two bytes in each object.
    public init(_ key: StaticString) { name = PropertyName(key) }

    /// A property for the attribute named `key`, given as a `String` (held as its id, as a
    /// literal is).
    @_disfavoredOverload
    public init(_ key: String) { name = PropertyName(key) }

    /// Not for use: the property is read and written through the enclosing object (see the static subscript).
    @available(*, unavailable, message: "@Managed is for ManagedObject subclasses")
    public var wrappedValue: Value {
        get { fatalError() }
        set { fatalError() }
    }

    /// The value, read and written through the enclosing object and its context.
    @inlinable
    public static subscript<Object: ManagedObject>(
        _enclosingInstance object: Object,
        wrapped wrappedKeyPath: ReferenceWritableKeyPath<Object, Value>,
        storage storageKeyPath: ReferenceWritableKeyPath<Object, Self>
    ) -> Value {
        get {
            guard let (slot, type) = object.typedRead(object[keyPath: storageKeyPath].name),
                let v = Value(storedValue: StoredValue(slot: slot), type: type)
            else {
                return Value.absentValue
            }
            return v
        }
        set {
            object.typedWrite(object[keyPath: storageKeyPath].name) { type in newValue.storedValue(type: type)?.slot }
        }
    }
}

/// A typed transformable attribute: values of any type, stored through the named transformer.
///
/// ```swift
/// @Transformable("color") var color: Color?
/// ```
@propertyWrapper
public struct Transformable<Value> {
    @usableFromInline let name: PropertyName

    /// The attribute's name in the model.
    public var key: String { name.string }

    /// A property for the transformable attribute named `key` (held in two bytes, as `@Managed` holds its name).
    public init(_ key: StaticString) { name = PropertyName(key) }

    /// A property for the transformable attribute named `key`, given as a `String`.
    @_disfavoredOverload
    public init(_ key: String) { name = PropertyName(key) }

    /// Not for use: the property is read and written through the enclosing object (see the static subscript).
    @available(*, unavailable, message: "@Transformable is for ManagedObject subclasses")
    public var wrappedValue: Value? {
        get { fatalError() }
        set { fatalError() }
    }

    /// The value, read and written through the enclosing object and its context.
    public static subscript<Object: ManagedObject>(
        _enclosingInstance object: Object,
        wrapped wrappedKeyPath: ReferenceWritableKeyPath<Object, Value?>,
        storage storageKeyPath: ReferenceWritableKeyPath<Object, Self>
    ) -> Value? {
        get { object.valueRecordingErrors(forKey: object[keyPath: storageKeyPath].key) as? Value }
        set { object.setValueRecordingErrors(newValue, forKey: object[keyPath: storageKeyPath].key) }
    }
}

/// A typed to-one relationship.
///
/// ```swift
/// @ToOne("manager") var manager: Manager?
/// ```
@propertyWrapper
public struct ToOne<Destination: ManagedObject> {
    @usableFromInline let name: PropertyName

    /// The relationship's name in the model.
    public var key: String { name.string }

    /// A property for the to-one relationship named `key` (held in two bytes, as `@Managed` holds its name).
    public init(_ key: StaticString) { name = PropertyName(key) }

    /// A property for the to-one relationship named `key`, given as a `String`.
    @_disfavoredOverload
    public init(_ key: String) { name = PropertyName(key) }

    /// Not for use: the property is read and written through the enclosing object (see the static subscript).
    @available(*, unavailable, message: "@ToOne is for ManagedObject subclasses")
    public var wrappedValue: Destination? {
        get { fatalError() }
        set { fatalError() }
    }

    /// The related object, read and written through the enclosing object (setting it updates the inverse).
    public static subscript<Object: ManagedObject>(
        _enclosingInstance object: Object,
        wrapped wrappedKeyPath: ReferenceWritableKeyPath<Object, Destination?>,
        storage storageKeyPath: ReferenceWritableKeyPath<Object, Self>
    ) -> Destination? {
        get { (try? object.value(forKey: object[keyPath: storageKeyPath].key)) as? Destination }
        set { object.setValueRecordingErrors(newValue, forKey: object[keyPath: storageKeyPath].key) }
    }
}

/// A typed to-many relationship, read as a set; assigning a set replaces the members (and
/// the inverses follow). Use `add`/`remove` on the object to change members one by one.
///
/// ```swift
/// @ToMany("employees") var employees: Set<Employee>
/// ```
@propertyWrapper
public struct ToMany<Destination: ManagedObject> {
    @usableFromInline let name: PropertyName

    /// The relationship's name in the model.
    public var key: String { name.string }

    /// A property for the to-many relationship named `key` (held in two bytes, as `@Managed` holds its name).
    public init(_ key: StaticString) { name = PropertyName(key) }

    /// A property for the to-many relationship named `key`, given as a `String`.
    @_disfavoredOverload
    public init(_ key: String) { name = PropertyName(key) }

    /// Not for use: the property is read and written through the enclosing object (see the static subscript).
    @available(*, unavailable, message: "@ToMany is for ManagedObject subclasses")
    public var wrappedValue: Set<Destination> {
        get { fatalError() }
        set { fatalError() }
    }

    /// The related objects, read and written through the enclosing object (assigning replaces the members; inverses follow).
    public static subscript<Object: ManagedObject>(
        _enclosingInstance object: Object,
        wrapped wrappedKeyPath: ReferenceWritableKeyPath<Object, Set<Destination>>,
        storage storageKeyPath: ReferenceWritableKeyPath<Object, Self>
    ) -> Set<Destination> {
        get {
            guard let all = try? object.objects(forKey: object[keyPath: storageKeyPath].key) else { return [] }
            return Set(all.compactMap { $0 as? Destination })
        }
        set {
            object.setValueRecordingErrors(
                Array(newValue) as [ManagedObject], forKey: object[keyPath: storageKeyPath].key)
        }
    }
}

extension ManagedObject {
    /// A value by key for a property wrapper, whose getter cannot throw: an error is recorded
    /// for the next save, and the value is nil.
    func valueRecordingErrors(forKey key: String) -> Any? {
        do {
            return try value(forKey: key)
        } catch let e as LogbookError {
            contextRef?.recordError(e)
        } catch {}
        return nil
    }

    /// Sets a value by key for a property wrapper, whose setter cannot throw: an error is
    /// recorded for the next save.
    func setValueRecordingErrors(_ value: Any?, forKey key: String) {
        do {
            try setValue(value, forKey: key)
        } catch let e as LogbookError {
            contextRef?.recordError(e)
        } catch {}
    }
}
