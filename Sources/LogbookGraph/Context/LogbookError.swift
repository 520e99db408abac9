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
    /// What kind of error it is. Compare with `==`, or match in a `catch` with `~=`:
    ///
    /// ```swift
    /// catch LogbookError.Code.validation { … }
    /// ```
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        /// The code's name, for example `"validation"`.
        public let rawValue: String
        /// A code named `rawValue`.
        public init(_ rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// No entity of the model has the name given.
        public static let unknownEntity = Code("unknownEntity")
        /// The entity has no attribute or relationship of the name given.
        public static let unknownKey = Code("unknownKey")
        /// A value of the wrong type for an attribute or relationship.
        public static let typeMismatch = Code("typeMismatch")
        /// One or more objects failed validation; see `validationFailures`.
        public static let validation = Code("validation")
        /// A relationship to an object of the wrong entity, another context or another store.
        public static let invalidRelationship = Code("invalidRelationship")
        /// A delete rule `.deny` refused a deletion.
        public static let deleteDenied = Code("deleteDenied")
        /// A transformable attribute names a transformer that is not registered (`AttributeTransformers.register`).
        public static let transformerMissing = Code("transformerMissing")
        /// A transformer threw while encoding or decoding a value.
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
        /// The operation (an asynchronous fetch) was cancelled.
        public static let cancelled = Code("cancelled")
        /// The storage engine failed; `underlying` holds its error.
        public static let store = Code("store")
        /// A predicate that does not parse, or that names what the entity does not have; the message gives the column.
        public static let invalidPredicate = Code("invalidPredicate")
        /// A fetch request whose parts do not fit together (dictionary results, group-by…).
        public static let invalidFetch = Code("invalidFetch")
        /// An argument out of its range (a negative limit, an empty name…).
        public static let invalidArgument = Code("invalidArgument")
        /// A change or save in a context that reads the store as of a past version
        /// (`PersistentContainer.snapshot(asOf:)`), which is read-only.
        public static let readOnly = Code("readOnly")
        /// A save found objects another save changed or deleted since they were read, and the
        /// merge policy is `.error`; see `conflicts`. Nothing was written.
        public static let mergeConflict = Code("mergeConflict")
        /// A save would give two objects the values of a uniqueness constraint; see
        /// `constraintConflicts`. Nothing was written.
        public static let constraintConflict = Code("constraintConflict")

        /// A history token of (or from before) transactions that were purged since: reading
        /// history after it could miss some (Core Data's `NSPersistentHistoryTokenExpiredError`).
        public static let historyTokenExpired = Code("historyTokenExpired")

        /// Whether `error` is a `LogbookError` with this code, for `catch` patterns.
        public static func ~= (code: Code, error: any Error) -> Bool { (error as? LogbookError)?.code == code }
    }

    /// What kind of error it is.
    public var code: Code
    /// What went wrong, in words.
    public var message: String
    /// The entity concerned, if any.
    public var entity: String?
    /// The attribute or relationship concerned, if any.
    public var key: String?
    /// The object concerned, if any.
    public var objectID: ObjectID?
    /// For `.validation`: every failure of every object, so that one save reports them all.
    public var validationFailures: [ValidationFailure] = []
    /// For `.mergeConflict`: every object in conflict, with the values read and the store's.
    public var conflicts: [MergeConflict] = []
    /// For `.constraintConflict`: every object whose constraint values another object has.
    public var constraintConflicts: [ConstraintConflict] = []
    /// For `.store`: the engine's error (file, offset, code).
    public var underlying: EngineError?

    /// An error with its code, message and place.
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
        if !conflicts.isEmpty { text += "\n" + conflicts.map { "  - \($0)" }.joined(separator: "\n") }
        if !constraintConflicts.isEmpty {
            text += "\n" + constraintConflicts.map { "  - \($0)" }.joined(separator: "\n")
        }
        if let underlying { text += " [\(underlying)]" }
        return text
    }

    package static func wrap(_ error: any Error) -> any Error {
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
    /// The object that failed.
    public var objectID: ObjectID
    /// Its entity's name.
    public var entity: String
    /// The attribute or relationship that failed.
    public var key: String
    /// Why, in words ("is required", "is above the maximum 150"…).
    public var reason: String

    public var description: String { "\(entity) \(objectID) \(key): \(reason)" }
}
