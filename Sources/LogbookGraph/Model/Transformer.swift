import Foundation
import LogbookEngine

/// Turns values of a type the store does not know into data and back, for transformable
/// attributes (Core Data's `NSValueTransformer`).
///
/// ```swift
/// struct ColorTransformer: AttributeTransformer {
///     func transformedValue(_ value: Any) throws -> Data { … }        // Color → 16 bytes
///     func reverseTransformedValue(_ data: Data) throws -> Any { … }  // 16 bytes → Color
/// }
/// AttributeTransformers.register(ColorTransformer(), name: "ColorTransformer")
/// ```
public protocol AttributeTransformer: Sendable {
    /// The data to store for `value`; throw when `value` is not of the expected type.
    func transformedValue(_ value: Any) throws -> Data
    /// The value for stored data; throw when the data cannot be decoded.
    func reverseTransformedValue(_ data: Data) throws -> Any
}

/// The transformers by name, process-wide (as Core Data's are).
public enum AttributeTransformers {
    static let registry = TransformerRegistry()

    /// Registers (or replaces) the transformer for `name`.
    public static func register(_ transformer: any AttributeTransformer, name: String) {
        registry.register(transformer, name: name)
    }

    /// The transformer registered as `name`, or nil.
    public static func transformer(named name: String) -> (any AttributeTransformer)? { registry.get(name) }
}

final class TransformerRegistry: Sendable {
    private let table = Locked<[String: any AttributeTransformer]>([:])

    func register(_ t: any AttributeTransformer, name: String) { table.withLock { $0[name] = t } }
    func get(_ name: String) -> (any AttributeTransformer)? { table.withLock { $0[name] } }

    func forward(_ value: Any, transformer name: String) throws -> Data {
        guard let t = get(name) else {
            throw LogbookError(.transformerMissing, "no value transformer is registered as \(name)")
        }
        do { return try t.transformedValue(value) } catch {
            throw LogbookError(.transformFailed, "transformer \(name) could not encode \(type(of: value)): \(error)")
        }
    }

    func reverse(_ data: Data, transformer name: String) throws -> Any {
        guard let t = get(name) else {
            throw LogbookError(.transformerMissing, "no value transformer is registered as \(name)")
        }
        do { return try t.reverseTransformedValue(data) } catch {
            throw LogbookError(.transformFailed, "transformer \(name) could not decode \(data.count) bytes: \(error)")
        }
    }
}
