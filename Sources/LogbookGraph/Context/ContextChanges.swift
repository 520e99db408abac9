import Dispatch
import Foundation
import LogbookEngine

/// What a save (or a merge, a refresh, a reset) changed, by object ID: handed to the other
/// contexts to merge, and to observers (Core Data's `NSManagedObjectContextDidSave` user info).
///
/// A client can make one to merge changes made outside contexts, for example the object IDs a
/// batch request returned:
///
/// ```swift
/// let result = try context.execute(update)                       // resultType: .objectIDs
/// viewContext.mergeChanges(ContextChanges(updated: Set(result.objectIDs)))
/// ```
public struct ContextChanges: Sendable {
    /// Objects inserted.
    public var inserted: Set<ObjectID>
    /// Objects whose values or relationships changed.
    public var updated: Set<ObjectID>
    /// Objects deleted.
    public var deleted: Set<ObjectID>
    /// Objects a merge or a refresh reloaded from the store (`NSRefreshedObjectsKey`).
    public var refreshed: Set<ObjectID> = []
    /// Objects that can no longer be used (`NSInvalidatedObjectsKey`).
    public var invalidated: Set<ObjectID> = []
    /// Every object of the context was invalidated (a reset: `NSInvalidatedAllObjectsKey`).
    public var invalidatedAll = false
    /// The store version the save committed (0 when not from a save).
    public var version: UInt64

    /// Changes by object ID, for `mergeChanges(_:)` and observers.
    public init(
        inserted: Set<ObjectID> = [], updated: Set<ObjectID> = [], deleted: Set<ObjectID> = [], version: UInt64 = 0
    ) {
        self.inserted = inserted
        self.updated = updated
        self.deleted = deleted
        self.version = version
    }

    /// Whether nothing changed.
    public var isEmpty: Bool {
        inserted.isEmpty && updated.isEmpty && deleted.isEmpty && refreshed.isEmpty && invalidated.isEmpty
            && !invalidatedAll
    }
}
