import Foundation
import LogbookTestSupport
import Testing

@testable import LogbookGraph

/// S7 and S10 of the scenarios, and planning on indexes.
@Suite struct FetchingTests {
    /// S7: sort by age ascending, then by firstName ascending.
    @Test func severalSortDescriptorsApplyInOrder() throws {
        let store = TemporaryStore()
        let container = try makeContainer(store)
        let context = container.newContext(concurrencyType: .confinement)
        for (f, a) in [("Richard", 61), ("Anthony", 51), ("Zed", 51), ("Bob", 30), ("Al", 61)] {
            let p = try context.insert(Person.self)
            p.firstName = f
            p.lastName = "L"
            p.age = Int32(a)
        }
        try context.save()
        var request = FetchRequest<Person>()
        request.sortDescriptors = [
            FetchSortDescriptor(key: "age", ascending: true), FetchSortDescriptor(key: "firstName", ascending: true)
        ]
        #expect(try context.fetch(request).map(\.firstName) == ["Bob", "Anthony", "Zed", "Al", "Richard"])
        request.sortDescriptors = [
            FetchSortDescriptor(key: "age", ascending: false), FetchSortDescriptor(key: "firstName", ascending: false)
        ]
        #expect(try context.fetch(request).map(\.firstName) == ["Richard", "Al", "Zed", "Anthony", "Bob"])
        try container.close()
    }

    /// S10: 1,000 persons; a private-queue context fetches the IDs of those aged 100 to 200;
    /// the main context turns the IDs into its own objects.
    @Test func backgroundFetchHandsObjectIDsToTheMainContext() async throws {
        let store = TemporaryStore()
        let container = try makeContainer(store)
        let view = container.viewContext
        try await view.perform {
            for counter in 0..<1000 {
                let p = try view.insert(Person.self)
                p.firstName = "First name \(counter)"
                p.lastName = "Last name \(counter)"
                p.age = Int32(counter)
            }
            try view.save()
        }
        let background = container.newBackgroundContext()
        let ids: [ObjectID] = try await background.perform {
            var request = FetchRequest<Person>()
            request.predicate = try FetchPredicate(format: "(age >= 100) AND (age <= 200)")
            return try background.fetchObjectIDs(request)
        }
        #expect(ids.count == 101)
        let lines: [String] = try await view.perform {
            try ids.map { id in
                let person = try view.object(with: id) as! Person
                return "\(person.firstName), \(person.lastName), \(person.age ?? -1)"
            }
        }
        #expect(lines.first == "First name 100, Last name 100, 100")
        #expect(lines.last == "First name 200, Last name 200, 200")
        try container.close()
    }

    @Test func anIndexedRangeDoesNotScan() throws {
        let store = TemporaryStore()
        let container = try makeContainer(store)
        let context = container.newContext(concurrencyType: .confinement)
        for i in 0..<2000 {
            let p = try context.insert(Person.self)
            p.firstName = "P\(i)"
            p.lastName = i % 2 == 0 ? "Even" : "Odd"
            p.age = Int32(i % 100)
        }
        try context.save()
        var request = FetchRequest<Person>()
        request.predicate = try FetchPredicate(format: "age >= 10 AND age < 13")
        let plan = try context.explain(request)
        #expect(plan.description.contains("INDEX age"), "\(plan)")
        #expect(plan.filter == nil && plan.countFromIndex)
        let found = try context.fetch(request)
        #expect(found.count == 60)
        #expect(context.lastFetchRecordsRead == 60, "only the index range is read, not the 2,000 objects")
        #expect(try context.count(for: request) == 60)
        #expect(context.lastFetchRecordsRead == 0, "the count comes from the index")
        // With a condition the index cannot settle: the index narrows, the rest filters.
        request.predicate = try FetchPredicate(format: "age == 7 AND lastName == 'Odd'")
        #expect(try context.explain(request).filter != nil)
        #expect(try context.fetch(request).count == 20)
        #expect(context.lastFetchRecordsRead == 20)
        // A sort on the indexed key with a limit walks the index and stops.
        var top = FetchRequest<Person>()
        top.sortDescriptors = [FetchSortDescriptor(key: "age", ascending: false)]
        top.fetchLimit = 5
        let topPlan = try context.explain(top)
        #expect(topPlan.orderFromIndex && topPlan.limitPushedDown, "\(topPlan)")
        #expect(try context.fetch(top).map(\.age) == [99, 99, 99, 99, 99])
        #expect(context.lastFetchRecordsRead == 5)
        // No index: a scan.
        var scan = FetchRequest<Person>()
        scan.predicate = try FetchPredicate(format: "lastName == 'Odd'")
        #expect(try context.explain(scan).access == .scan)
        #expect(try context.fetch(scan).count == 1000)
        // Unsaved changes are seen even where the index answers.
        let young = try context.fetch(FetchRequest<Person>()).first { $0.age == 11 }!
        young.age = 50
        let inserted = try context.insert(Person.self)
        inserted.firstName = "new"
        inserted.lastName = "Even"
        inserted.age = 12
        #expect(try context.fetch(request.with(format: "age >= 10 AND age < 13")).count == 60)
        #expect(try context.count(for: request.with(format: "age >= 10 AND age < 13")) == 60)
        try container.close()
    }
}

extension FetchRequest {
    func with(format: String) throws -> FetchRequest {
        var r = self
        r.predicate = try FetchPredicate(format: format)
        return r
    }
}

@Suite struct BatchedFetchTests {
    @Test func objectsLoadBatchByBatchAsTheResultIsWalked() throws {
        let store = TemporaryStore()
        let container = try makeContainer(store)
        let writer = container.newContext(concurrencyType: .confinement)
        for i in 0..<100 {
            let p = try writer.insert(Person.self)
            p.firstName = "P\(i)"
            p.lastName = "L"
            p.age = Int32(i)
        }
        try writer.save()
        let context = container.newContext(concurrencyType: .confinement)
        var request = FetchRequest<Person>()
        request.sortDescriptors = [FetchSortDescriptor(key: "age")]
        request.fetchBatchSize = 20
        let people = try context.fetch(request)
        #expect(people.count == 100)
        let allFaults = people.allSatisfy { $0.isFault }
        #expect(allFaults, "nothing is loaded before it is used")
        #expect(context.lastFetchRecordsRead == 0)
        #expect(people[0].firstName == "P0")
        #expect(context.lastFetchRecordsRead == 20, "touching one object loads its batch")
        #expect(!people[19].isFault && people[20].isFault)
        #expect(people[45].age == 45)
        #expect(!people[40].isFault && !people[59].isFault && people[60].isFault)
        // Every object reads its own values.
        #expect(people.map(\.firstName) == (0..<100).map { "P\($0)" })
        try container.close()
    }
}

extension FetchingTests {
    /// A scan's single-string-test path (`name CONTAINS 'x'` read in place) gives what
    /// `String.contains` gives: short and long ASCII values, values that are not plain ASCII
    /// (decoded and compared as strings), and objects with no value.
    @Test func aContainsScanAgreesWithStringContains() throws {
        let store = TemporaryStore()
        let model = try ManagedObjectModel {
            EntityDescription("Note") { AttributeDescription("name", .string, optional: true) }
        }
        let container = try makeContainer(store, model: model)
        let c = container.newContext(concurrencyType: .confinement)
        var names: [String?] = []
        for i in 0..<400 {
            let name: String? =
                switch i % 5 {
                case 0: "Item \(i)"
                case 1: "A long title that goes past thirty-two bytes, number \(i)"
                case 2: "Ünïcode e\u{301} \(i)"
                case 3: nil
                default: "x\(i)9"
                }
            let o = try c.insertNewObject(forEntityName: "Note")
            try o.setValue(name, forKey: "name")
            names.append(name)
        }
        try c.save()
        c.reset()
        for needle in ["9", "Item 1", "number 39", "e", "é", "Ünï", "39 ", "zzz"] {
            var request = FetchRequest<ManagedObject>(entityName: "Note")
            request.predicate = try FetchPredicate(format: "name CONTAINS %@", needle)
            let expected = names.filter { $0?.contains(needle) ?? false }.count
            #expect(try c.count(for: request) == expected, "CONTAINS '\(needle)'")
            #expect(try c.fetch(request).count == expected)
        }
        try container.close()
    }
}
