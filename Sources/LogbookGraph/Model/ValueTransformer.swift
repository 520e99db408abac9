import Foundation
import LogbookEngine

#if !canImport(Darwin)
    /// The name a value transformer is registered under (Foundation's `NSValueTransformerName`,
    /// which Foundation on Linux does not have).
    public struct NSValueTransformerName: RawRepresentable, Hashable, Sendable {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public init(_ rawValue: String) { self.rawValue = rawValue }
    }

    /// Foundation's `ValueTransformer`, which Foundation on Linux does not have, so that the
    /// transformers of Core Data and SwiftData apps compile unchanged. A transformer registered
    /// with `setValueTransformer(_:forName:)` is also an ``AttributeTransformer`` of that name
    /// (a model file's `valueTransformerName`), and `@Attribute(.transformable(by: T.self))`
    /// uses one. Its transformed value must be `Data` (what the store keeps).
    ///
    /// ```swift
    /// final class ColorTransformer: ValueTransformer {
    ///     override class func transformedValueClass() -> AnyClass { NSData.self }
    ///     override func transformedValue(_ value: Any?) -> Any? { (value as? RGBA)?.bytes }
    ///     override func reverseTransformedValue(_ value: Any?) -> Any? { (value as? Data).map(RGBA.init) }
    /// }
    /// ValueTransformer.setValueTransformer(ColorTransformer(), forName: .init("ColorTransformer"))
    /// ```
    ///
    /// Apple's `NSSecureUnarchiveFromDataTransformer` (keyed archiving of Objective-C classes)
    /// is not offered: there are no such classes to archive on Linux.
    open class ValueTransformer: NSObject {
        /// The class of the transformed values (`NSData` for a store's transformers).
        open class func transformedValueClass() -> AnyClass { NSObject.self }
        /// Whether `reverseTransformedValue(_:)` works (the store needs it to read values back).
        open class func allowsReverseTransformation() -> Bool { true }
        /// The transformed form of `value` (the data to store).
        open func transformedValue(_ value: Any?) -> Any? { value }
        /// The value back from its transformed form; by default `transformedValue(_:)` when the
        /// class allows reverse transformation, as Foundation's does.
        open func reverseTransformedValue(_ value: Any?) -> Any? {
            type(of: self).allowsReverseTransformation() ? transformedValue(value) : nil
        }

        public required override init() { super.init() }

        private static let registered = Locked<[String: ValueTransformer]>([:])

        /// Registers `transformer` as `name` (nil removes it), for Core Data models and for
        /// ``AttributeTransformers``.
        public class func setValueTransformer(_ transformer: ValueTransformer?, forName name: NSValueTransformerName) {
            registered.withLock { $0[name.rawValue] = transformer }
            if let transformer {
                AttributeTransformers.register(ValueTransformerAdapter(transformer), name: name.rawValue)
            }
        }

        /// The transformer registered as `name`.
        public class func valueTransformer(forName name: NSValueTransformerName) -> ValueTransformer? {
            registered.withLock { $0[name.rawValue] }
        }

        /// The names of the registered transformers.
        public class func valueTransformerNames() -> [NSValueTransformerName] {
            registered.withLock { $0.keys.sorted().map(NSValueTransformerName.init(rawValue:)) }
        }
    }
#endif

/// A `ValueTransformer` as an ``AttributeTransformer``: its transformed value must be `Data`.
struct ValueTransformerAdapter: AttributeTransformer, @unchecked Sendable {
    // @unchecked Sendable: a registered ValueTransformer is shared by every thread, as
    // Foundation's registry shares it; transformers keep no mutable state of their own.
    let transformer: ValueTransformer
    init(_ transformer: ValueTransformer) { self.transformer = transformer }

    func transformedValue(_ value: Any) throws -> Data {
        guard let data = transformer.transformedValue(value) as? Data else {
            throw LogbookError(
                .typeMismatch, "\(type(of: transformer)) did not transform a \(type(of: value)) into Data")
        }
        return data
    }

    func reverseTransformedValue(_ data: Data) throws -> Any {
        guard let value = transformer.reverseTransformedValue(data) else {
            throw LogbookError(.typeMismatch, "\(type(of: transformer)) could not read back \(data.count) bytes")
        }
        return value
    }
}
