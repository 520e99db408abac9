import Foundation
import LogbookEngine

/// What a fetch of model objects asks for (SwiftData's `FetchDescriptor`): a `#Predicate`, an
/// order, a window.
///
/// ```swift
/// var descriptor = FetchDescriptor<Book>(predicate: #Predicate { $0.pages > 300 && $0.author?.name == "Le Guin" },
///                                        sortBy: [SortDescriptor(\.title)])
/// descriptor.fetchLimit = 20
/// let books = try context.fetch(descriptor)
/// ```
///
/// The predicate is translated into Logbook's own (the same planner, indexes and evaluation
/// as format strings); what it cannot translate (arithmetic, `??`, conditionals, calls other
/// than those `FetchPredicate.init(_:)` lists) makes the fetch throw `.invalidPredicate` naming
/// the construct. `propertiesToFetch` and `relationshipKeyPathsForPrefetching` are hints
/// SwiftData may ignore; Logbook reads whole records and relationships on demand, so it
/// ignores them.
public struct FetchDescriptor<T: PersistentModel>: @unchecked Sendable {
    // @unchecked Sendable: a predicate, sort descriptors and key paths, all immutable values.
    /// Which objects; nil for all.
    public var predicate: Predicate<T>?
    /// Their order (by stored properties).
    public var sortBy: [SortDescriptor<T>]
    /// At most this many; nil for no limit.
    public var fetchLimit: Int?
    /// Skip this many first.
    public var fetchOffset: Int?
    /// Whether unsaved inserts, changes and deletions of the context count (yes by default).
    public var includePendingChanges = true
    /// Hint: the properties the caller will read (ignored, see above).
    public var propertiesToFetch: [PartialKeyPath<T>] = []
    /// Hint: relationships the caller will follow (ignored, see above).
    public var relationshipKeyPathsForPrefetching: [PartialKeyPath<T>] = []
    /// Whether objects of subclasses' entities count too.
    public var includeSubclasses = true

    public init(predicate: Predicate<T>? = nil, sortBy: [SortDescriptor<T>] = []) {
        self.predicate = predicate
        self.sortBy = sortBy
    }

    /// The Core Data–style request it makes, for `info`'s entity.
    func request(_ info: ModelEntityInfo, in container: ModelContainer) throws -> FetchRequest<ManagedObject> {
        var request = FetchRequest<ManagedObject>(entityName: info.name)
        if let predicate {
            request.predicate = try FetchPredicate(predicate, resolvingIdentifiers: container.objectID(for:))
        }
        request.sortDescriptors = try sortBy.map { try FetchSortDescriptor($0) }
        request.fetchLimit = max(0, fetchLimit ?? 0)
        request.fetchOffset = max(0, fetchOffset ?? 0)
        request.includesPendingChanges = includePendingChanges
        request.includesSubentities = includeSubclasses
        return request
    }
}

extension FetchPredicate {
    /// A `#Predicate` over a `@Model` class (see `init(_:)` for typed classes: the same
    /// constructs translate).
    public init<T: PersistentModel>(_ predicate: Predicate<T>) throws {
        try self.init(predicate, resolvingIdentifiers: nil)
    }

    init<T: PersistentModel>(
        _ predicate: Predicate<T>, resolvingIdentifiers resolve: ((PersistentIdentifier) -> ObjectID?)?
    ) throws {
        var translator = SwiftPredicateTranslator()
        translator.resolveIdentifier = resolve
        translator.variables[predicate.variable.key] = .keyPath([], column: 0)
        let node = try translator.node(predicate.expression)
        self.init(node: node, format: node.formatDescription)
    }
}

extension FetchSortDescriptor {
    /// The order of a key-path `SortDescriptor` of a `@Model` class.
    public init<T: PersistentModel>(_ descriptor: SortDescriptor<T>) throws {
        guard let keyPath = descriptor.keyPath, let key = try ModelEntityInfo.info(for: T.self).names[keyPath] else {
            throw LogbookError(
                .invalidPredicate, "the sort descriptor \(descriptor) does not name a persisted property of \(T.self)")
        }
        self.init(key: key, ascending: descriptor.order == .forward)
    }
}

extension ModelContext {
    /// The objects the descriptor asks for.
    public func fetch<T: PersistentModel>(_ descriptor: FetchDescriptor<T>) throws -> [T] {
        let request = try descriptor.request(try container.info(for: T.self), in: container)
        return try managedObjectContext.fetch(request).map { model(for: $0) as! T }
    }

    /// How many objects the descriptor would return (from the index when it settles the
    /// predicate: no object is read).
    public func fetchCount<T: PersistentModel>(_ descriptor: FetchDescriptor<T>) throws -> Int {
        try managedObjectContext.count(for: try descriptor.request(try container.info(for: T.self), in: container))
    }

    /// The identifiers of the objects the descriptor asks for, without making the objects.
    public func fetchIdentifiers<T: PersistentModel>(_ descriptor: FetchDescriptor<T>) throws -> [PersistentIdentifier]
    {
        try managedObjectContext.fetchObjectIDs(try descriptor.request(try container.info(for: T.self), in: container))
            .map(PersistentIdentifier.init(objectID:))
    }

    /// Calls `block` with each object the descriptor asks for, `batchSize` at a time: objects of
    /// a batch that `block` did not change are let go before the next batch is read, so memory
    /// stays bounded whatever the count. Unless `allowEscapingMutations`, a block that leaves
    /// unsaved changes behind makes it throw (as SwiftData's does): save inside the block.
    ///
    /// ```swift
    /// try context.enumerate(FetchDescriptor<Book>(), batchSize: 1_000) { book in
    ///     total += book.pages
    /// }
    /// ```
    public func enumerate<T: PersistentModel>(
        _ descriptor: FetchDescriptor<T>, batchSize: Int = 5000, allowEscapingMutations: Bool = false,
        block: (T) throws -> Void
    ) throws {
        let info = try container.info(for: T.self)
        let ids = try managedObjectContext.fetchObjectIDs(try descriptor.request(info, in: container))
        let size = max(1, batchSize)
        var start = 0
        while start < ids.count {
            let end = min(ids.count, start + size)
            for id in ids[start..<end] {
                let object = try managedObjectContext.existingObject(with: id)
                try block(model(for: object) as! T)
            }
            if !allowEscapingMutations && managedObjectContext.hasChanges {
                throw LogbookError(
                    .invalidArgument,
                    "enumerate's block left unsaved changes; save them in the block or pass allowEscapingMutations: true"
                )
            }
            for id in ids[start..<end] {
                if let object = managedObjectContext.registered(id.key), !object.hasChanges {
                    managedObjectContext.refresh(object, mergeChanges: false)
                }
            }
            start = end
        }
    }
}
