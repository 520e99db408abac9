import Foundation

/// A request for the objects of one entity, ordered by sort descriptors applied in turn.
///
/// ```swift
/// var request = FetchRequest<Person>()                      // entity from the class name
/// request.sortDescriptors = [FetchSortDescriptor(key: "age"), FetchSortDescriptor(key: "firstName")]
/// let people = try context.fetch(request)
/// ```
///
/// A fetch sees the context's unsaved inserts, changes and deletions (`includesPendingChanges`).
public struct FetchRequest<Result: ManagedObject>: Sendable {
    /// The name of the entity fetched.
    public var entityName: String
    /// Only the objects that satisfy it (all when nil).
    public var predicate: FetchPredicate?
    /// The order of the result: the first descriptor, then the next for ties, and so on.
    public var sortDescriptors: [FetchSortDescriptor] = []
    /// At most this many objects (0: no limit).
    public var fetchLimit = 0
    /// Skip this many objects first.
    public var fetchOffset = 0
    /// When positive, fetched objects come back as faults and are loaded this many at a time,
    /// as the result is walked (touching one loads its batch); 0 loads them all at once.
    public var fetchBatchSize = 0
    /// For `fetchDictionaries`: the attributes and expressions each dictionary holds (all
    /// attributes when empty).
    public var propertiesToFetch: [FetchProperty] = []
    /// Whether the fetch sees the context's unsaved inserts, changes and deletions (`true`,
    /// as in Core Data). With `false` objects are matched on the values the store holds, and
    /// unsaved inserts are left out; the objects returned are still the context's own.
    public var includesPendingChanges = true
    /// Whether objects of the entity's sub-entities are fetched too (`true`, as in Core Data).
    public var includesSubentities = true
    /// For `fetchDictionaries`: one dictionary per distinct combination of these keys.
    public var propertiesToGroupBy: [String] = []

    /// A request for the entity named `entityName` (for `ManagedObject` results).
    public init(entityName: String) { self.entityName = entityName }
    /// A request for the entity of `Result` (`Result.entityName`: the class's name unless it overrides it).
    public init() { self.entityName = Result.entityName }
}
