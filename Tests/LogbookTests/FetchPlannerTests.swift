import Foundation
import LogbookEngine
import LogbookTestSupport
import Testing

@testable import LogbookGraph

/// The planner on its own, over a store's layout and a snapshot, with no context; and the
/// window that every fetch path applies.
@Suite struct FetchPlannerTests {
    /// The conjuncts of a predicate, as a context hands them to the planner.
    static func conjuncts(_ format: String) throws -> [PredicateNode] {
        ManagedObjectContext.conjuncts(of: try FetchPredicate(format: format))
    }

    @Test func thePlannerChoosesByTheIndexesCountsWithoutAContext() throws {
        let store = TemporaryStore()
        let container = try makeContainer(store, model: IndexPlanTests.model())
        try IndexPlanTests.populate(container)
        let workers = try container.model.layout(named: "Worker")
        let planner = FetchPlanner(entity: workers, store: container.storeLayout, snapshot: container.store.snapshot())

        // Equal lastName and a range of age: the compound index settles both.
        let compound = planner.plan(
            try Self.conjuncts("lastName == 'L7' AND age >= 30"), sortDescriptors: [], window: .all,
            predicateFormat: "lastName == 'L7' AND age >= 30")
        #expect(compound.access == .compoundIndex(keys: ["lastName", "age"], equalities: 1, range: true))
        #expect(compound.index != nil && compound.lowerBound != nil)
        #expect(compound.explained.description.contains("INDEX (lastName, age)"), "\(compound.explained)")

        // A condition no index answers: a scan with the filter compiled to a test on records,
        // and a limit that stops the walk.
        let scan = planner.plan(
            try Self.conjuncts("firstName BEGINSWITH 'W1'"), sortDescriptors: [],
            window: ResultWindow(offset: 5, limit: 10), predicateFormat: "firstName BEGINSWITH 'W1'")
        #expect(scan.access == .scan)
        #expect(scan.recordFilter != nil && scan.objectResidual == nil)
        #expect(scan.limitPushedDown)
        #expect(!scan.countFromIndex)

        // The same plan as the context's `explain`, which plans through this planner.
        var request = FetchRequest<ManagedObject>(entityName: "Worker")
        request.predicate = try FetchPredicate(format: "lastName == 'L7' AND age >= 30")
        let context = container.newContext(concurrencyType: .confinement)
        #expect(try context.explain(request).description == compound.explained.description)
    }

    @Test func theWindowSkipsTheOffsetAndKeepsTheLimit() {
        let window = ResultWindow(offset: 20, limit: 10)
        #expect(Array(window.apply(to: 0..<100)) == Array(20..<30))
        #expect(Array(window.apply(to: 0..<25)) == Array(20..<25))
        #expect(window.apply(to: 0..<15).isEmpty)
        #expect(window.stopAfter == 30)
        #expect(window.count(of: 100) == 10 && window.count(of: 25) == 5 && window.count(of: 3) == 0)
        var keys = Array(0..<100)
        window.apply(to: &keys)
        #expect(keys == Array(20..<30))

        let offsetOnly = ResultWindow(offset: 3, limit: 0)
        #expect(offsetOnly.stopAfter == nil)
        #expect(Array(offsetOnly.apply(to: 0..<5)) == [3, 4])
        #expect(offsetOnly.count(of: 5) == 2)
        #expect(ResultWindow.all.keepsAll && ResultWindow.all.count(of: 7) == 7)

        var request = FetchRequest<ManagedObject>(entityName: "Worker")
        request.fetchOffset = 4
        request.fetchLimit = 2
        #expect(request.window == ResultWindow(offset: 4, limit: 2))
        request.window = .all
        #expect(request.fetchOffset == 0 && request.fetchLimit == 0)
    }
}
