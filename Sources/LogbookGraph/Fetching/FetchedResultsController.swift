import Foundation

/// A position in a fetched-results controller: a section and an item within it.
public struct FetchedIndexPath: Hashable, Sendable, CustomStringConvertible {
    /// The section, from 0.
    public var section: Int
    /// The object's position in its section, from 0.
    public var item: Int

    /// The path of the `item`th object of section `section`.
    public init(item: Int, section: Int) {
        self.item = item
        self.section = section
    }

    public var description: String { "[\(section), \(item)]" }
}

/// What happened to an object or a section between two states of a controller.
public enum FetchedResultsChangeType: Sendable, Hashable {
    /// The object or section appeared.
    case insert
    /// The object or section went away.
    case delete
    /// The object moved to another index path (its sort key or section changed).
    case move
    /// The object changed in place.
    case update
}

/// The objects of one section.
public struct FetchedResultsSection<Result: ManagedObject> {
    /// The section's value of the section key path, as text ("" for no value).
    public let name: String
    /// The section's objects, in the request's order.
    public let objects: [Result]
    /// How many objects the section has.
    public var numberOfObjects: Int { objects.count }
}

/// Told of a controller's changes, in Core Data's order: will change, the section and object
/// changes (deletions and moves at their old index paths, insertions and moves at their new
/// ones), did change. Every method has an empty default.
public protocol FetchedResultsControllerDelegate: AnyObject {
    /// Called before the first change of a batch.
    func controllerWillChangeContent(_ controller: AnyObject)
    /// A section appeared (`.insert`) or went away (`.delete`).
    func controller(
        _ controller: AnyObject, didChangeSection name: String, atSectionIndex index: Int,
        for type: FetchedResultsChangeType)
    /// An object was inserted (at `newIndexPath`), deleted (from `indexPath`), moved (from
    /// `indexPath` to `newIndexPath`) or updated in place (at `indexPath`).
    func controller(
        _ controller: AnyObject, didChange object: ManagedObject, at indexPath: FetchedIndexPath?,
        for type: FetchedResultsChangeType, newIndexPath: FetchedIndexPath?)
    /// Called after the last change of a batch: the controller's sections are up to date.
    func controllerDidChangeContent(_ controller: AnyObject)
}

extension FetchedResultsControllerDelegate {
    /// Does nothing.
    public func controllerWillChangeContent(_ controller: AnyObject) {}
    /// Does nothing.
    public func controller(
        _ controller: AnyObject, didChangeSection name: String, atSectionIndex index: Int,
        for type: FetchedResultsChangeType
    ) {}
    /// Does nothing.
    public func controller(
        _ controller: AnyObject, didChange object: ManagedObject, at indexPath: FetchedIndexPath?,
        for type: FetchedResultsChangeType, newIndexPath: FetchedIndexPath?
    ) {}
    /// Does nothing.
    public func controllerDidChangeContent(_ controller: AnyObject) {}
}

/// Keeps the result of a fetch request, grouped in sections, up to date with its context
/// (Core Data's `NSFetchedResultsController`), and tells a delegate what changed.
///
/// ```swift
/// var request = FetchRequest<Person>()
/// request.sortDescriptors = [FetchSortDescriptor(key: "age"), FetchSortDescriptor(key: "firstName")]
/// let controller = FetchedResultsController(fetchRequest: request, managedObjectContext: context,
///                                           sectionNameKeyPath: "age")
/// controller.delegate = screen
/// try controller.performFetch()
/// let first = controller.object(at: FetchedIndexPath(item: 0, section: 0))
/// ```
///
/// The controller follows its context: after the context saves, merges another context's save,
/// or is asked to `processPendingChanges()` (what Core Data does at the end of each run-loop
/// turn), it fetches again and reports insertions, deletions, moves and updates. Use it on the
/// context's queue. The first sort descriptor should order by the section key path, as in
/// Core Data, so that each section's objects are contiguous.
public final class FetchedResultsController<Result: ManagedObject> {
    /// The request whose result the controller follows.
    public let fetchRequest: FetchRequest<Result>
    /// The context it follows.
    public let managedObjectContext: ManagedObjectContext
    /// The key path whose value names each object's section (nil: one section).
    public let sectionNameKeyPath: String?
    /// Told of each change after the context changes (weak).
    public weak var delegate: (any FetchedResultsControllerDelegate)?
    /// Every object of the result, in order (nil before `performFetch()`).
    public private(set) var fetchedObjects: [Result]?
    /// The sections, in order (nil before `performFetch()`).
    public private(set) var sections: [FetchedResultsSection<Result>]?
    private var positions: [ObjectIdentifier: FetchedIndexPath] = [:]
    private var observing = false

    /// A controller over `fetchRequest` in `managedObjectContext`; call `performFetch()` to fill it.
    public init(
        fetchRequest: FetchRequest<Result>, managedObjectContext: ManagedObjectContext,
        sectionNameKeyPath: String? = nil
    ) {
        self.fetchRequest = fetchRequest
        self.managedObjectContext = managedObjectContext
        self.sectionNameKeyPath = sectionNameKeyPath
    }

    /// Fetches, and from then on follows the context's changes.
    public func performFetch() throws {
        try apply(try fetch(), changed: [], notify: false)
        if !observing {
            observing = true
            managedObjectContext.observeChanges { [weak self] changes in self?.contextDidChange(changes) }
        }
    }

    /// The object at an index path (which must be valid).
    public func object(at indexPath: FetchedIndexPath) -> Result {
        sections![indexPath.section].objects[indexPath.item]
    }

    /// Where an object is in the result, or nil.
    public func indexPath(forObject object: Result) -> FetchedIndexPath? {
        positions[ObjectIdentifier(object)]
    }

    // MARK: Following the context

    private func fetch() throws -> [Result] {
        var request = fetchRequest
        request.fetchBatchSize = 0
        return try managedObjectContext.fetch(request)
    }

    private func sectionName(_ object: Result) -> String {
        guard let path = sectionNameKeyPath else { return "" }
        var current: Any? = object
        for key in path.split(separator: ".") {
            guard let o = current as? ManagedObject else { return "" }
            current = (try? o.value(forKey: String(key))) ?? nil
        }
        guard let value = current else { return "" }
        if let o = value as? ManagedObject { return o.objectID.description }
        return "\(value)"
    }

    private func contextDidChange(_ changes: ContextChanges) {
        guard fetchedObjects != nil, let objects = try? fetch() else { return }
        let changed = Set(changes.updated.map(\.self))
        try? apply(objects, changed: changed, notify: true)
    }

    /// Takes a new result and tells the delegate how it differs from the current one.
    private func apply(_ objects: [Result], changed: Set<ObjectID>, notify: Bool) throws {
        let oldSections = sections ?? []
        let oldPositions = positions
        // New sections, in order of first appearance.
        var names: [String] = []
        var grouped: [String: [Result]] = [:]
        for o in objects {
            let name = sectionName(o)
            if grouped[name] == nil { names.append(name) }
            grouped[name, default: []].append(o)
        }
        let newSections = names.map { FetchedResultsSection(name: $0, objects: grouped[$0]!) }
        var newPositions: [ObjectIdentifier: FetchedIndexPath] = [:]
        for (s, section) in newSections.enumerated() {
            for (i, o) in section.objects.enumerated() {
                newPositions[ObjectIdentifier(o)] = FetchedIndexPath(item: i, section: s)
            }
        }
        sections = newSections
        fetchedObjects = newSections.flatMap(\.objects)
        positions = newPositions
        guard notify, let delegate else { return }

        let oldNames = oldSections.map(\.name)
        let newNames = newSections.map(\.name)
        var sectionChanges: [(String, Int, FetchedResultsChangeType)] = []
        for (i, name) in oldNames.enumerated() where !newNames.contains(name) {
            sectionChanges.append((name, i, .delete))
        }
        for (i, name) in newNames.enumerated() where !oldNames.contains(name) {
            sectionChanges.append((name, i, .insert))
        }
        var objectChanges: [(ManagedObject, FetchedIndexPath?, FetchedResultsChangeType, FetchedIndexPath?)] = []
        for section in oldSections {
            for o in section.objects where newPositions[ObjectIdentifier(o)] == nil {
                objectChanges.append((o, oldPositions[ObjectIdentifier(o)], .delete, nil))
            }
        }
        // Among the objects in both states, a changed one moved when its section changed, or
        // its rank among them and its index path did (the others only shift as objects come
        // and go); else it is updated.
        let oldSurvivors = oldSections.flatMap(\.objects).filter { newPositions[ObjectIdentifier($0)] != nil }
        var oldRank: [ObjectIdentifier: Int] = [:]
        for (r, o) in oldSurvivors.enumerated() { oldRank[ObjectIdentifier(o)] = r }
        var rank = 0
        for section in newSections {
            for o in section.objects {
                let id = ObjectIdentifier(o)
                let new = newPositions[id]!
                guard let old = oldPositions[id] else {
                    objectChanges.append((o, nil, .insert, new))
                    continue
                }
                defer { rank += 1 }
                guard changed.contains(o.objectID) else { continue }
                if oldSections[old.section].name != newSections[new.section].name || (oldRank[id] != rank && old != new)
                {
                    objectChanges.append((o, old, .move, new))
                } else {
                    objectChanges.append((o, old, .update, new))
                }
            }
        }
        guard !sectionChanges.isEmpty || !objectChanges.isEmpty else { return }
        delegate.controllerWillChangeContent(self)
        for (name, index, type) in sectionChanges {
            delegate.controller(self, didChangeSection: name, atSectionIndex: index, for: type)
        }
        for (o, old, type, new) in objectChanges {
            delegate.controller(self, didChange: o, at: old, for: type, newIndexPath: new)
        }
        delegate.controllerDidChangeContent(self)
    }
}
