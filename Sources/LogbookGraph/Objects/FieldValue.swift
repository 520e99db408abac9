import Foundation

/// A stored value of an attribute or a to-one relationship, as a managed object holds it.
@usableFromInline
package enum FieldValue: Sendable, Hashable {
    case null
    case string(String)
    case int(Int64)
    /// Doubles, floats and dates (seconds since 2001, as `Date` holds them: every bit kept).
    case double(Double)
    case bool(Bool)
    /// Binary data, and the blob a transformer made of a transformable value.
    case data(Data)
    case boxed(Boxed)
    /// A to-one relationship: the destination's engine key.
    case object(UInt64)

    /// UUID, URL and Decimal live in a box so that a slot stays small.
    @usableFromInline
    package final class Boxed: Sendable, Hashable {
        enum Value: Sendable, Hashable {
            case uuid(UUID)
            case url(URL)
            case decimal(Decimal)
        }
        let value: Value
        init(_ value: Value) { self.value = value }
        @usableFromInline package static func == (a: Boxed, b: Boxed) -> Bool { a.value == b.value }
        @usableFromInline package func hash(into h: inout Hasher) { h.combine(value) }
    }

    var isNull: Bool { if case .null = self { true } else { false } }

    /// Whether a record would store this value in the same bytes as `other`: stricter than
    /// `==`, under which canonically equivalent strings ("é" precomposed and decomposed), 0.0
    /// and -0.0, and decimals of different scale are equal. A URL or a decimal is never taken
    /// as stored the same (a batch update writes it again).
    func isStoredIdentically(as other: FieldValue) -> Bool {
        switch (self, other) {
        case (.string(let a), .string(let b)): a.utf8.elementsEqual(b.utf8)
        case (.double(let a), .double(let b)): a.bitPattern == b.bitPattern
        case (.boxed(let a), .boxed(let b)):
            if case .uuid(let x) = a.value, case .uuid(let y) = b.value { x == y } else { false }
        default: self == other
        }
    }

    struct Mismatch: Error {
        var expected: AttributeType
        /// The value given, as the error shows it: its type and the value.
        var got: String
        init(expected: AttributeType, got: Any) {
            self.expected = expected
            self.got = "\(Swift.type(of: got)) \(got)"
        }
    }

    /// Converts a Swift value to a slot of `type`, checking the type (and integer ranges).
    init(_ value: Any?, type: AttributeType, transformers: TransformerRegistry? = nil) throws {
        // The common cases first: the attribute's own Swift type, one cast.
        switch type {
        case .string:
            if let s = value as? String {
                self = .string(s)
                return
            }
        case .int32:
            if let x = value as? Int32 {
                self = .int(Int64(x))
                return
            }
        case .int64:
            if let x = value as? Int64 {
                self = .int(x)
                return
            }
        case .bool:
            if let b = value as? Bool {
                self = .bool(b)
                return
            }
        case .date:
            if let d = value as? Date {
                self = .double(d.timeIntervalSinceReferenceDate)
                return
            }
        case .double:
            if let d = value as? Double {
                self = .double(d)
                return
            }
        default: break
        }
        guard let value, !(value is NSNull) else {
            self = .null
            return
        }
        if let optional = value as? any OptionalProtocol, optional.isNil {
            self = .null
            return
        }
        func int(_ range: ClosedRange<Int64>) throws -> FieldValue {
            let v: Int64?
            switch value {
            case let x as Int: v = Int64(x)
            case let x as Int64: v = x
            case let x as Int32: v = Int64(x)
            case let x as Int16: v = Int64(x)
            case let x as Int8: v = Int64(x)
            case let x as UInt8: v = Int64(x)
            case let x as UInt16: v = Int64(x)
            case let x as UInt32: v = Int64(x)
            case let x as UInt: v = Int64(exactly: x)
            case let x as UInt64: v = Int64(exactly: x)
            default: v = nil
            }
            guard let v, range.contains(v) else { throw Mismatch(expected: type, got: value) }
            return .int(v)
        }
        switch type {
        case .string:
            guard let s = value as? String else { throw Mismatch(expected: type, got: value) }
            self = .string(s)
        case .int16: self = try int(Int64(Int16.min)...Int64(Int16.max))
        case .int32: self = try int(Int64(Int32.min)...Int64(Int32.max))
        case .int64: self = try int(Int64.min...Int64.max)
        case .double, .float:
            switch value {
            case let d as Double: self = .double(type == .float ? Double(Float(d)) : d)
            case let f as Float: self = .double(Double(f))
            case let i as Int: self = .double(Double(i))
            default: throw Mismatch(expected: type, got: value)
            }
        case .bool:
            guard let b = value as? Bool else { throw Mismatch(expected: type, got: value) }
            self = .bool(b)
        case .date:
            guard let d = value as? Date else { throw Mismatch(expected: type, got: value) }
            self = .double(d.timeIntervalSinceReferenceDate)
        case .data:
            guard let d = value as? Data else {
                if let b = value as? [UInt8] {
                    self = .data(Data(b))
                    return
                }
                throw Mismatch(expected: type, got: value)
            }
            self = .data(d)
        case .uuid:
            guard let u = value as? UUID else { throw Mismatch(expected: type, got: value) }
            self = .boxed(Boxed(.uuid(u)))
        case .url:
            guard let u = value as? URL else { throw Mismatch(expected: type, got: value) }
            self = .boxed(Boxed(.url(u)))
        case .decimal:
            switch value {
            case let d as Decimal: self = .boxed(Boxed(.decimal(d)))
            case let i as Int: self = .boxed(Boxed(.decimal(Decimal(i))))
            default: throw Mismatch(expected: type, got: value)
            }
        case .transformable(let name):
            guard let registry = transformers else { throw Mismatch(expected: type, got: value) }
            self = .data(try registry.forward(value, transformer: name))
        }
    }

    /// The Swift value of a slot of `type` (transformables stay blobs; see `ManagedObject.value(forKey:)`).
    func value(type: AttributeType) -> (any Sendable)? {
        switch (self, type) {
        case (.null, _): return nil
        case (.string(let s), _): return s
        case (.int(let i), .int16): return Int16(truncatingIfNeeded: i)
        case (.int(let i), .int32): return Int32(truncatingIfNeeded: i)
        case (.int(let i), _): return i
        case (.double(let d), .date): return Date(timeIntervalSinceReferenceDate: d)
        case (.double(let d), .float): return Float(d)
        case (.double(let d), _): return d
        case (.bool(let b), _): return b
        case (.data(let d), _): return d
        case (.boxed(let b), _):
            switch b.value {
            case .uuid(let u): return u
            case .url(let u): return u
            case .decimal(let d): return d
            }
        case (.object, _): return nil
        }
    }

    /// A number for range rules.
    var number: Double? {
        switch self {
        case .int(let i): Double(i)
        case .double(let d): d
        case .boxed(let b): if case .decimal(let d) = b.value { NSDecimalNumber(decimal: d).doubleValue } else { nil }
        default: nil
        }
    }
}

/// Lets `FieldValue.init` see through `Optional<T>` boxed in `Any`.
package protocol OptionalProtocol {
    var isNil: Bool { get }
    /// The wrapped value, or nil (for values of unknown optional type).
    var wrapped: Any? { get }
}
extension Optional: OptionalProtocol {
    package var isNil: Bool { self == nil }
    package var wrapped: Any? {
        switch self {
        case .some(let v): v
        case .none: nil
        }
    }
}
