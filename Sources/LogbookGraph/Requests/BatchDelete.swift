import Foundation
import LogbookEngine

/// Deletes the objects a predicate selects (or the objects of a list of IDs) straight in the
/// store, without loading them into a context (Core Data's `NSBatchDeleteRequest`): one
/// transaction. Unlike Core Data's, it applies the delete rules: cascades follow (through any
/// number of levels), nullify removes the deleted objects from the other side of each inverse,
/// deny refuses the whole request with a `.deleteDenied` error, and indexes stay exact. The
/// deleted objects' IDs come back, and the container's contexts merge the deletion (and the
/// nullified objects) automatically — Core Data leaves that merge to the caller.
///
/// ```swift
/// var request = BatchDeleteRequest(entityName: "Item")
/// request.predicate = try FetchPredicate(format: "done == YES")
/// let result = try context.execute(request)        // result.objectIDs: what went
/// ```
public struct BatchDeleteRequest {
    /// The entity whose objects are deleted (with its sub-entities); nil for a list of IDs.
    public let entityName: String?
    /// Only the objects that satisfy it (all when nil).
    public var predicate: FetchPredicate?
    /// The objects to delete, when the request was made from IDs.
    public let objectIDs: [ObjectID]

    /// A request that deletes objects of the entity named `entityName`.
    public init(entityName: String, predicate: FetchPredicate? = nil) {
        self.entityName = entityName
        self.predicate = predicate
        self.objectIDs = []
    }

    /// A request that deletes the objects with these IDs (any entities).
    public init(objectIDs: [ObjectID]) {
        self.entityName = nil
        self.objectIDs = objectIDs
    }
}
