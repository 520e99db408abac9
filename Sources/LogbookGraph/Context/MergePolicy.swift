import LogbookEngine

/// How a save resolves a conflict: an object it writes or deletes whose record another save
/// changed (or deleted) since this context read it. Core Data's `NSMergePolicy`, by the same names.
///
/// ```swift
/// context.mergePolicy = .mergeByPropertyObjectTrump
/// try context.save()     // the properties this context changed win; the others take the store's values
/// ```
///
/// Conflicts are found by optimistic locking: each object remembers the version of the store
/// its values were read at, and a save compares the record it is about to replace with those
/// values when another save wrote it since. To-many relationships are stored as sets that saves
/// change by additions and removals, so both sides' changes to them are kept under every policy.
public enum MergePolicy: Sendable, Hashable {
    /// The save fails with a `.mergeConflict` error that lists every conflict
    /// (`LogbookError.conflicts`); nothing is written. The default, as in Core Data.
    case error
    /// Property by property: the properties this context changed keep its values, the others
    /// take the store's (`NSMergeByPropertyObjectTrumpMergePolicy`).
    case mergeByPropertyObjectTrump
    /// Property by property: the properties the other save changed take the store's values,
    /// the others keep this context's (`NSMergeByPropertyStoreTrumpMergePolicy`).
    case mergeByPropertyStoreTrump
    /// This context's version of each conflicting object replaces the store's whole record
    /// (`NSOverwriteMergePolicy`).
    case overwrite
    /// The conflicting objects drop this context's changes to their attributes and to-one
    /// relationships and take the store's values (`NSRollbackMergePolicy`).
    case rollback
}

/// One object a save could not write without undoing another save (Core Data's `NSMergeConflict`).
public struct MergeConflict: Sendable, CustomStringConvertible {
    /// The object in conflict.
    public var objectID: ObjectID
    /// Its entity.
    public var entityName: String
    /// The attributes and to-one relationships whose stored values differ from the values
    /// this context read (empty when the store deleted the object).
    public var changedKeys: [String]
    /// The values this context read, by key (`NSMergeConflict.cachedSnapshot`). To-one
    /// relationships are `ObjectID`s; a missing value is absent.
    public var cachedValues: [String: any Sendable]
    /// The values the store holds now, by key; nil when another save deleted the object
    /// (`NSMergeConflict.persistedSnapshot`).
    public var storeValues: [String: any Sendable]?
    /// Whether this context was deleting the object.
    public var isDeletedInContext: Bool

    /// Whether another save deleted the object.
    public var isDeletedInStore: Bool { storeValues == nil }

    public var description: String {
        if isDeletedInStore { return "\(objectID): deleted by another save" }
        let what = isDeletedInContext ? "deleted here, changed by another save" : "changed by another save"
        return "\(objectID): \(what) (\(changedKeys.joined(separator: ", ")))"
    }
}

extension ManagedObject {
    /// Whether the save must write the object's record (its attributes or to-one relationships
    /// changed; a change of its to-many sets alone writes only the sets).
    var recordChanged: Bool {
        guard !flags.contains(.fault), let committed else { return false }
        return committed != slots
    }
}
