import Foundation
import LogbookEngine

/// An error of the object graph: what went wrong (`code`), in words (`message`), and where
/// (entity, object, key), with the underlying engine error when there is one.
///
/// ```swift
/// do { try context.save() }
/// catch let error as LogbookError where error.code == .validation {
///     for failure in error.validationFailures { print(failure) }
/// }
/// ```
public struct LogbookError: Error, Sendable, CustomStringConvertible {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        public let rawValue: String
        public init(_ rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        public static let unknownEntity = Code("unknownEntity")
        public static let unknownKey = Code("unknownKey")
        public static let typeMismatch = Code("typeMismatch")
        /// One or more objects failed validation; see `validationFailures`.
        public static let validation = Code("validation")
        /// A relationship to an object of the wrong entity, another context or another store.
        public static let invalidRelationship = Code("invalidRelationship")
        /// A delete rule `.deny` refused a deletion.
        public static let deleteDenied = Code("deleteDenied")
        public static let transformerMissing = Code("transformerMissing")
        public static let transformFailed = Code("transformFailed")
        /// The object was used after its context was reset, or after it was deleted and saved.
        public static let objectInvalidated = Code("objectInvalidated")
        /// No object with this ID exists in the store.
        public static let objectNotFound = Code("objectNotFound")
        /// The model is not valid (an inverse missing, a duplicate name…).
        public static let invalidModel = Code("invalidModel")
        /// The store was written with a model that cannot be migrated to this one.
        public static let incompatibleModel = Code("incompatibleModel")
        /// The operation needs a context with a queue (main or private).
        public static let wrongConcurrencyType = Code("wrongConcurrencyType")
        public static let cancelled = Code("cancelled")
        /// The storage engine failed; `underlying` holds its error.
        public static let store = Code("store")
        public static let invalidPredicate = Code("invalidPredicate")
        /// A fetch request whose parts do not fit together (dictionary results, group-by…).
        public static let invalidFetch = Code("invalidFetch")
        public static let invalidArgument = Code("invalidArgument")

        public static func ~= (code: Code, error: any Error) -> Bool { (error as? LogbookError)?.code == code }
    }

    public var code: Code
    public var message: String
    public var entity: String?
    public var key: String?
    public var objectID: ObjectID?
    public var validationFailures: [ValidationFailure] = []
    public var underlying: EngineError?

    public init(_ code: Code, _ message: String, entity: String? = nil, key: String? = nil, objectID: ObjectID? = nil) {
        self.code = code
        self.message = message
        self.entity = entity
        self.key = key
        self.objectID = objectID
    }

    public var description: String {
        var text = "\(code): \(message)"
        var place: [String] = []
        if let entity { place.append("entity \(entity)") }
        if let objectID { place.append("object \(objectID)") }
        if let key { place.append("key \(key)") }
        if !place.isEmpty { text += " (" + place.joined(separator: ", ") + ")" }
        if !validationFailures.isEmpty { text += "\n" + validationFailures.map { "  - \($0)" }.joined(separator: "\n") }
        if let underlying { text += " [\(underlying)]" }
        return text
    }

    static func wrap(_ error: any Error) -> any Error {
        if let engine = error as? EngineError {
            var e = LogbookError(.store, engine.message)
            e.underlying = engine
            return e
        }
        return error
    }
}

/// One reason an object cannot be saved.
public struct ValidationFailure: Sendable, Hashable, CustomStringConvertible {
    public var objectID: ObjectID
    public var entity: String
    public var key: String
    public var reason: String

    public var description: String { "\(entity) \(objectID) \(key): \(reason)" }
}
