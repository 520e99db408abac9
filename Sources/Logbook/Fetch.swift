import Foundation
import LogbookEngine

/// How to order fetched objects: by an attribute (or to-one relationship), ascending or not.
public struct FetchSortDescriptor: Sendable, Hashable {
    public var key: String
    public var ascending: Bool

    public init(key: String, ascending: Bool = true) {
        self.key = key
        self.ascending = ascending
    }
}

/// A request for the objects of one entity, ordered by sort descriptors applied in turn.
///
/// ```swift
/// var request = FetchRequest<Person>()                      // entity from the class name
/// request.sortDescriptors = [FetchSortDescriptor(key: "age"), FetchSortDescriptor(key: "firstName")]
/// let people = try context.fetch(request)
/// ```
///
/// A fetch sees the context's unsaved inserts, changes and deletions.
public struct FetchRequest<Result: ManagedObject> {
    public var entityName: String
    /// Only the objects that satisfy it (all when nil).
    public var predicate: FetchPredicate?
    public var sortDescriptors: [FetchSortDescriptor] = []
    /// At most this many objects (0: no limit).
    public var fetchLimit = 0
    /// Skip this many objects first.
    public var fetchOffset = 0

    public init(entityName: String) { self.entityName = entityName }
    public init() { self.entityName = Result.entityName }
}

extension ManagedObjectContext {
    /// The objects a request asks for. An unknown entity is an error; no match is an empty array.
    public func fetch<T: ManagedObject>(_ request: FetchRequest<T>) throws -> [T] {
        let layout = try model.layout(named: request.entityName)
        var sortSlots: [(Int, Bool, AttributeType?)] = []
        for s in request.sortDescriptors {
            guard let slot = layout.slotByName[s.key] else {
                throw LogbookError(.unknownKey, "cannot sort by \(s.key): \(layout.name) has no such attribute", entity: layout.name, key: s.key)
            }
            sortSlots.append((slot, s.ascending, slot < layout.attributeCount ? layout.entity.attributes[slot].type : nil))
        }
        let snapshot = container.store.snapshot()
        let keyspace = storeLayout.keyspace[layout.index]
        var objects: [ManagedObject] = []
        objects.reserveCapacity(snapshot.count(inKeyspace: keyspace) + inserted.count)
        var failure: (any Error)?
        snapshot.forEachKey(inKeyspace: keyspace) { key in
            if let o = registered(key) {
                if !o.flags.contains(.deleted) { objects.append(o) }
                return true
            }
            do {
                guard let slots = try decode(snapshot, key: key, layout: layout) else { return true }
                objects.append(materialize(key: key, layout: layout, slots: slots))
            } catch {
                failure = error
                return false
            }
            return true
        }
        if let failure { throw failure }
        for o in inserted.values where o.layout === layout { objects.append(o) }
        for o in objects where o.flags.contains(.fault) { try fulfill(o) }
        if let predicate = request.predicate {
            var evaluator = PredicateEvaluator(format: predicate.format)
            objects = try objects.filter { try evaluator.test(predicate.node, object: $0) }
        }
        if !sortSlots.isEmpty {
            objects.sort { a, b in
                for (slot, ascending, _) in sortSlots {
                    let c = Slot.compare(a.slots[slot], b.slots[slot])
                    if c != 0 { return ascending ? c < 0 : c > 0 }
                }
                return false
            }
        } else {
            objects.sort { $0.objectID.key < $1.objectID.key }
        }
        var result = objects[...]
        if request.fetchOffset > 0 { result = result.dropFirst(request.fetchOffset) }
        if request.fetchLimit > 0 { result = result.prefix(request.fetchLimit) }
        return try result.map { o in
            guard let t = o as? T else {
                throw LogbookError(.typeMismatch, "\(layout.name) objects are \(type(of: o)), not \(T.self)", entity: layout.name)
            }
            return t
        }
    }

    /// The number of objects a request would return, without materializing them when it can.
    public func count<T: ManagedObject>(for request: FetchRequest<T>) throws -> Int {
        let layout = try model.layout(named: request.entityName)
        if request.predicate != nil { return try fetch(request).count }
        let stored = container.store.snapshot().count(inKeyspace: storeLayout.keyspace[layout.index])
        let added = inserted.values.filter { $0.layout === layout }.count
        let removed = deleted.values.filter { $0.layout === layout }.count
        var n = stored + added - removed
        if request.fetchOffset > 0 { n = max(0, n - request.fetchOffset) }
        if request.fetchLimit > 0 { n = min(n, request.fetchLimit) }
        return n
    }
}

extension Slot {
    /// Orders slots of one attribute: no value first, then by value.
    static func compare(_ a: Slot, _ b: Slot) -> Int {
        switch (a, b) {
        case (.null, .null): return 0
        case (.null, _): return -1
        case (_, .null): return 1
        case let (.string(x), .string(y)): return x == y ? 0 : (x < y ? -1 : 1)
        case let (.int(x), .int(y)): return x == y ? 0 : (x < y ? -1 : 1)
        case let (.double(x), .double(y)): return x == y ? 0 : (x < y ? -1 : 1)
        case let (.bool(x), .bool(y)): return x == y ? 0 : (!x ? -1 : 1)
        case let (.object(x), .object(y)): return x == y ? 0 : (x < y ? -1 : 1)
        case let (.data(x), .data(y)):
            return x.lexicographicallyPrecedes(y) ? -1 : (x == y ? 0 : 1)
        case let (.boxed(x), .boxed(y)):
            switch (x.value, y.value) {
            case let (.uuid(p), .uuid(q)): return p.uuidString == q.uuidString ? 0 : (p.uuidString < q.uuidString ? -1 : 1)
            case let (.url(p), .url(q)): return p.absoluteString == q.absoluteString ? 0 : (p.absoluteString < q.absoluteString ? -1 : 1)
            case let (.decimal(p), .decimal(q)): return p == q ? 0 : (p < q ? -1 : 1)
            default: return 0
            }
        default: return 0
        }
    }
}
