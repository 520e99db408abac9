import Foundation
import LogbookEngine

// A child context's fetch: the store's objects with its parents' unsaved changes over them.
extension ManagedObjectContext {
    func pendingOverlay(entity: Int) -> PendingOverlay {
        var overlay = parent.map { p in p.performAndWait { p.pendingOverlay(entity: entity) } } ?? PendingOverlay()
        for o in inserted.values where o.layout.index == entity {
            overlay.changed[o.engineKey] = o.slots
            overlay.deleted.remove(o.engineKey)
        }
        for (k, o) in updated where o.layout.index == entity && !o.flags.contains(.fault) {
            overlay.changed[k] = o.slots
        }
        for (k, o) in deleted where o.layout.index == entity {
            overlay.deleted.insert(k)
            overlay.changed[k] = nil
        }
        return overlay
    }

    /// A fetch in a child context: the store's objects with the parents' unsaved changes over
    /// them, then this context's own; every condition checked on the current values.
    func fetchInChild<T: ManagedObject>(
        _ request: FetchRequest<T>, layout: EntityLayout, parent: ManagedObjectContext
    ) throws -> [ManagedObject] {
        let sortKeys = try SortKey.resolve(request.sortDescriptors, layout: layout, model: model)
        let overlay = parent.performAndWait { parent.pendingOverlay(entity: layout.index) }
        let snapshot = readSnapshot()
        var keys = Set(snapshot.keys(inKeyspace: storeLayout.keyspace[layout.index]))
        keys.formUnion(overlay.changed.keys)
        keys.subtract(overlay.deleted)
        for o in inserted.values where o.layout === layout { keys.insert(o.engineKey) }
        let ordered = keys.sorted()
        let known = registered(keys: ordered)
        var fromStore: [UInt64] = []
        for (i, k) in ordered.enumerated() where known[i] == nil && overlay.changed[k] == nil { fromStore.append(k) }
        var read: [UInt64: ManagedObject] = [:]
        for o in try materialize(fromStore, layout: layout, snapshot: snapshot) { read[o.engineKey] = o }
        var evaluator = PredicateEvaluator(format: request.predicate?.format ?? "")
        var objects: [ManagedObject] = []
        for (i, k) in ordered.enumerated() {
            let o: ManagedObject
            if let r = known[i] {
                o = r
                if o.flags.contains(.deleted) { continue }
                if o.flags.contains(.fault) { try fulfill(o) }
            } else if let slots = overlay.changed[k] {
                o = materialize(key: k, layout: layout, slots: slots, version: 0)
            } else if let r = read[k] {
                o = r
            } else {
                continue
            }
            if let p = request.predicate, try !evaluator.test(p.node, object: o) { continue }
            objects.append(o)
        }
        if !sortKeys.isEmpty { SortKey.sort(&objects, by: sortKeys) }
        let result = request.window.apply(to: objects)
        lastFetchRecordsRead = read.count
        return Array(result)
    }
}
