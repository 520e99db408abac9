import Foundation
import LogbookGraph

/// The result of a fetch that keeps itself up to date (the role of SwiftData's `@Query`,
/// without SwiftUI): `results` and `sections` follow the context's saves, merges of other
/// contexts' saves and rollbacks; the object is `Observable`, so code that read them (with
/// `withObservationTracking`, or a UI toolkit that observes) is told when they change, and
/// `updates()` gives each change as an asynchronous sequence. Built on
/// `FetchedResultsController`. Use it where its context is used (the main actor for the
/// main context).
///
/// ```swift
/// let query = try ModelQuery(FetchDescriptor<Book>(sortBy: [SortDescriptor(\.title)]),
///                            in: container.mainContext)
/// print(query.results.map(\.title))
/// for await update in query.updates() { print(update.inserted.count, "new books") }
/// ```
@Observable
public final class ModelQuery<T: PersistentModel> {
    /// The objects, in the descriptor's order (within their sections when sectioned).
    public private(set) var results: [T] = []
    /// The objects grouped by the section key path's value, in order (one unnamed section when
    /// not sectioned).
    public private(set) var sections: [ModelQuerySection<T>] = []
    /// The error of the last refetch, if it failed (the results are then those before it).
    public private(set) var fetchError: (any Error)?

    @ObservationIgnored public let descriptor: FetchDescriptor<T>
    @ObservationIgnored private let context: ModelContext
    @ObservationIgnored private let controller: FetchedResultsController<ManagedObject>
    @ObservationIgnored private var relay: Relay?
    @ObservationIgnored private var continuations: [Int: AsyncStream<ModelQueryUpdate>.Continuation] = [:]
    @ObservationIgnored private var nextContinuation = 0

    /// A query over `descriptor` in `context`, fetched at once; `sectionedBy` groups the results
    /// by a persisted property (sort by it first, so that each section is contiguous).
    public init(
        _ descriptor: FetchDescriptor<T>, sectionedBy section: PartialKeyPath<T>? = nil, in context: ModelContext
    ) throws {
        self.descriptor = descriptor
        self.context = context
        let info = try context.container.info(for: T.self)
        var sectionName: String?
        if let section {
            guard let name = info.names[section] else {
                throw LogbookError(.invalidArgument, "\(section) is not a persisted property of \(T.self)")
            }
            sectionName = name
        }
        var request = try descriptor.request(info, in: context.container)
        request.fetchLimit = max(0, descriptor.fetchLimit ?? 0)
        controller = FetchedResultsController(
            fetchRequest: request, managedObjectContext: context.managedObjectContext, sectionNameKeyPath: sectionName)
        let relay = Relay()
        self.relay = relay
        controller.delegate = relay
        relay.query = self
        try controller.performFetch()
        refresh(changes: nil)
    }

    /// Each change of the results, from now until the task iterating it is cancelled.
    public func updates() -> AsyncStream<ModelQueryUpdate> {
        let (stream, continuation) = AsyncStream.makeStream(of: ModelQueryUpdate.self)
        let n = nextContinuation
        nextContinuation += 1
        continuations[n] = continuation
        return stream
    }

    fileprivate func refresh(changes: ModelQueryUpdate?) {
        let models = { (objects: [ManagedObject]) in objects.map { self.context.model(for: $0) as! T } }
        let newSections = (controller.sections ?? []).map {
            ModelQuerySection(name: $0.name, models: models($0.objects))
        }
        sections = newSections
        results = newSections.flatMap(\.models)
        if let changes {
            for (n, c) in continuations {
                if case .terminated = c.yield(changes) { continuations.removeValue(forKey: n) }
            }
        }
    }

    /// Collects a controller's changes and hands them to the query.
    private final class Relay: FetchedResultsControllerDelegate {
        weak var query: ModelQuery?
        var pending = ModelQueryUpdate()

        func controllerWillChangeContent(_ controller: AnyObject) { pending = ModelQueryUpdate() }

        func controller(
            _ controller: AnyObject, didChange object: ManagedObject, at indexPath: FetchedIndexPath?,
            for type: FetchedResultsChangeType, newIndexPath: FetchedIndexPath?
        ) {
            let id = PersistentIdentifier(objectID: object.objectID)
            switch type {
            case .insert: pending.inserted.append(id)
            case .delete: pending.deleted.append(id)
            case .move: pending.moved.append(id)
            case .update: pending.updated.append(id)
            }
        }

        func controllerDidChangeContent(_ controller: AnyObject) { query?.refresh(changes: pending) }
    }
}

/// A section of a `ModelQuery`: the objects that share the section key path's value.
public struct ModelQuerySection<T: PersistentModel> {
    /// The value, as text ("" for a nil value, or when the query is not sectioned).
    public let name: String
    /// The objects, in order.
    public let models: [T]
}

/// What changed in a `ModelQuery`'s results, by identifier.
public struct ModelQueryUpdate: Sendable, Hashable {
    /// Objects that now match.
    public var inserted: [PersistentIdentifier] = []
    /// Objects that no longer match (or were deleted).
    public var deleted: [PersistentIdentifier] = []
    /// Objects whose position changed.
    public var moved: [PersistentIdentifier] = []
    /// Objects that changed in place.
    public var updated: [PersistentIdentifier] = []
    public init() {}
}
