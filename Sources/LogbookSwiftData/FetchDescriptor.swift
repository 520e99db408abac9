import Foundation
import LogbookEngine
import LogbookGraph

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
        try self.init(
            translating: predicate, models: ModelPredicateSupport(),
            resolveValue: { value in
                // A model object compares as its managed object (nil while unattached); an
                // identifier as the object it names (one of no object matches nothing).
                if let model = value as? any PersistentModel { return .some(model.persistentBackingData.object) }
                if let id = value as? PersistentIdentifier { return .some(resolve?(id) ?? id) }
                return nil
            })
    }
}

extension FetchSortDescriptor {
    /// The order of a key-path `SortDescriptor` of a `@Model` class: a stored property, or a
    /// key path through to-one relationships (`\.author?.name`), with the descriptor's string
    /// comparator (`.localizedStandard`, `.localized`, `.lexical`).
    public init<T: PersistentModel>(_ descriptor: SortDescriptor<T>) throws {
        let info = try ModelEntityInfo.info(for: T.self)
        guard let keyPath = descriptor.keyPath,
            let key = try info.names[keyPath] ?? Self.relationshipPath(String(describing: keyPath), in: info)
        else {
            throw LogbookError(
                .invalidPredicate, "the sort descriptor \(descriptor) does not name a persisted property of \(T.self)")
        }
        self.init(
            key: key, ascending: descriptor.order == .forward,
            comparison: descriptor.stringComparator.map(StringComparison.init) ?? .plain)
    }

    /// The key (`author.name`) of a key path through to-one relationships, found by the text
    /// of its components (a composed key path cannot be taken apart otherwise); nil when it is
    /// not one.
    static func relationshipPath(_ text: String, in info: ModelEntityInfo) throws -> String? {
        func components(_ info: ModelEntityInfo) -> [(text: String, name: String)] {
            info.names.compactMap { keyPath, name in
                let whole = String(describing: keyPath)
                guard let dot = whole.firstIndex(of: ".") else { return nil }
                return (String(whole[whole.index(after: dot)...]), name)
            }
        }
        func walk(_ rest: Substring, _ info: ModelEntityInfo) throws -> String? {
            for (component, name) in components(info) where rest.hasPrefix(component) {
                var tail = rest.dropFirst(component.count)
                if tail.isEmpty || tail == "?" { return name }
                if tail.hasPrefix("?") { tail = tail.dropFirst() }
                guard tail.hasPrefix("."), case .toOne(let related, _) = info.kinds[name] else { continue }
                if let inner = try walk(tail.dropFirst(), try ModelEntityInfo.info(for: related)) {
                    return name + "." + inner
                }
            }
            return nil
        }
        guard let dot = text.firstIndex(of: ".") else { return nil }
        return try walk(text[text.index(after: dot)...], info)
    }
}

extension StringComparison {
    /// The comparison a `SortDescriptor`'s string comparator asks for.
    init(_ comparator: String.StandardComparator) {
        var localized = false
        var options = String.CompareOptions()
        for child in Mirror(reflecting: comparator).children {
            switch child.label {
            case "isLocalized": localized = child.value as? Bool ?? false
            case "options": options = child.value as? String.CompareOptions ?? []
            default: break
            }
        }
        if localized {
            self = options.contains(.numeric) ? .localizedStandard : .localized
        } else if options.contains(.caseInsensitive) {
            self = options.contains(.diacriticInsensitive) ? .caseAndDiacriticInsensitive : .caseInsensitive
        } else {
            self = options.contains(.diacriticInsensitive) ? .diacriticInsensitive : .plain
        }
    }
}

#if !canImport(Darwin)
    extension String.StandardComparator {
        /// The Finder's order (numbers by value, case- and diacritic-insensitive), which Foundation
        /// on Apple platforms offers and Foundation on Linux does not: a fetch sorts by it in the
        /// store, as `localizedStandardCompare(_:)` orders. Foundation on Linux has no public way
        /// to make such a comparator and compares only lexically in memory (`sorted(using:)`
        /// orders by it as `.lexical` does there); Logbook makes one with the layout Foundation's
        /// has, checked when first used.
        public static var localizedStandard: String.StandardComparator { LocalizedComparators.standard }
        /// The current locale's order (`localizedCompare(_:)`), as `localizedStandard` is made.
        public static var localized: String.StandardComparator { LocalizedComparators.localized }
    }

    /// Comparators Foundation on Linux cannot make, made with its layout (three stored
    /// properties: options, whether localized, order) and read back to check it.
    enum LocalizedComparators {
        struct Layout {
            var options: String.CompareOptions
            var isLocalized: Bool
            var order: SortOrder
        }
        static let standard = make([.numeric])
        static let localized = make([])

        static func make(_ options: String.CompareOptions) -> String.StandardComparator {
            precondition(
                MemoryLayout<Layout>.size == MemoryLayout<String.StandardComparator>.size
                    && MemoryLayout<Layout>.alignment == MemoryLayout<String.StandardComparator>.alignment,
                "Foundation's String.StandardComparator changed its layout")
            let made = unsafeBitCast(
                Layout(options: options, isLocalized: true, order: .forward), to: String.StandardComparator.self)
            let read = StringComparison(made)
            precondition(
                read == (options.contains(.numeric) ? .localizedStandard : .localized),
                "Foundation's String.StandardComparator changed its layout")
            return made
        }
    }
#endif

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

/// The `@Model` classes, as the predicate translator of the object graph asks for them.
struct ModelPredicateSupport: PredicateModelSupport {
    func isModel(_ type: Any.Type) -> Bool { type is any PersistentModel.Type }

    func key(of keyPath: AnyKeyPath, root: Any.Type) throws -> String? {
        guard let modelType = root as? any PersistentModel.Type else { return nil }
        if modelType.isIdentity(keyPath) { return "" }
        return try ModelEntityInfo.info(for: modelType).names[keyPath]
    }

    func entityNames(of type: Any.Type) -> [String] {
        guard let model = type as? any PersistentModel.Type else { return [] }
        return ModelEntityInfo.entityNames(ofSubclassesOf: model)
    }
}
