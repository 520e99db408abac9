import Foundation
import LogbookEngine

extension ManagedObjectContext {
    /// The plan a request would use (which index, which filter, whether it sorts).
    ///
    /// ```swift
    /// var request = FetchRequest<Person>()
    /// request.predicate = try FetchPredicate(format: "lastName == 'Appleseed' AND age > 40")
    /// print(try context.explain(request))
    /// // FETCH Person: INDEX (lastName, age): equal lastName, range on age [...]; FILTER ... (on records); ...
    /// ```
    public func explain<T: ManagedObject>(_ request: FetchRequest<T>) throws -> FetchPlan {
        try plan(request, layout: try model.layout(named: request.entityName)).explained
    }
    /// Plans a request: its predicate's top-level conjuncts, conditions through a to-one
    /// relationship turned into sets of destination objects (found with the destination's own
    /// plan), then `FetchPlanner` over the context's snapshot.
    func plan<T: ManagedObject>(_ request: FetchRequest<T>, layout: EntityLayout) throws -> ExecutionPlan {
        try container.checkConfiguration(layout)
        let conjuncts = try relationshipPathsResolved(Self.conjuncts(of: request.predicate), layout: layout)
        let planner = FetchPlanner(entity: layout, store: storeLayout, snapshot: readSnapshot())
        return planner.plan(
            conjuncts, sortDescriptors: request.sortDescriptors, window: request.window,
            predicateFormat: request.predicate?.format)
    }

    /// Step 1: the top-level AND parts of a predicate (a `TRUEPREDICATE` part drops out).
    static func conjuncts(of predicate: FetchPredicate?) -> [PredicateNode] {
        var conjuncts: [PredicateNode] = []
        func flatten(_ n: PredicateNode) {
            if case .and(let parts) = n {
                parts.forEach(flatten)
            } else if case .constant(true) = n {
            } else {
                conjuncts.append(n)
            }
        }
        if let predicate { flatten(predicate.node) }
        return conjuncts
    }

    /// Step 1b: a comparison of a key path through a to-one relationship with a constant
    /// (`manager.lastName == 'X'`) becomes `manager IN {the managers whose lastName is 'X'}`,
    /// with nil in the set when the comparison holds for no destination. The destinations are
    /// found with their entity's own plan (an index, or a scan on records); then the to-one
    /// relationship's index (or a filter on records) finds the objects. Only when the
    /// destination entity has no unsaved changes here (they are judged on objects otherwise).
    func relationshipPathsResolved(_ conjuncts: [PredicateNode], layout: EntityLayout) throws -> [PredicateNode] {
        guard parent == nil else { return conjuncts }
        return try conjuncts.map { node in
            guard case .comparison(let c) = node, c.modifier == .direct else { return node }
            var path: [String]
            var constantFirst = false
            let constant: Any?
            if case .keyPath(let p, _) = c.lhs, let v = RecordFilter.Compiler.constant(c.rhs) {
                path = p
                constant = v
            } else if case .keyPath(let p, _) = c.rhs, let v = RecordFilter.Compiler.constant(c.lhs) {
                path = p
                constant = v
                constantFirst = true
            } else {
                return node
            }
            guard path.count >= 2, let slot = layout.slotByName[path[0]], slot >= layout.attributeCount,
                !path[1...].contains(where: { $0.hasPrefix("@") })
            else { return node }
            let destination = model.layouts[layout.relationshipDestination[slot - layout.attributeCount]]
            guard !destination.descendants.contains(where: { hasUnsavedChanges(model.layouts[$0]) }) else {
                return node
            }
            path.removeFirst()
            var inner = c
            if constantFirst {
                inner.rhs = .keyPath(path, column: c.column)
            } else {
                inner.lhs = .keyPath(path, column: c.column)
            }
            var request = FetchRequest<ManagedObject>(entityName: destination.name)
            request.predicate = FetchPredicate(node: .comparison(inner), format: "")
            let ids: [ObjectID]
            do { ids = try fetchObjectIDs(request) } catch let e as LogbookError where e.code == .invalidPredicate {
                return node  // judged on objects, where the error names the whole key path
            }
            // The comparison's result for no destination (the path's value is nil then).
            let evaluator = PredicateEvaluator(format: "")
            let whenNil =
                (try? (constantFirst ? evaluator.apply(c, constant, nil) : evaluator.apply(c, nil, constant))) ?? false
            var items: [Any?] = ids
            if whenNil { items.append(nil) }
            return .comparison(
                Comparison(
                    modifier: .direct, lhs: .keyPath([layout.slotNames[slot]], column: c.column), op: .in,
                    rhs: .value(items), column: c.column))
        }
    }
}
