import Foundation
import LogbookTestSupport
import Testing

@testable import LogbookGraph

/// A typed class whose properties are not named like their keys.
final class Chore: ManagedObject {
    @Managed("name") var title: String
    @Managed("createdAt") var created: Date
    @Managed("done") var isDone: Bool
}

/// Foundation's `#Predicate` and key-path `SortDescriptor`, translated into the same tree as
/// format strings: same results as plain Swift filtering, same plans.
@Suite struct SwiftPredicateTests {
    typealias Fixture = PredicateTests.Fixture

    func check<T: ManagedObject>(
        _ predicate: Predicate<T>, among objects: [T], _ expected: (T) -> Bool,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let p = try FetchPredicate(predicate)
        let got = try objects.filter { try p.evaluate(with: $0) }
        let want = objects.filter(expected)
        #expect(!want.isEmpty, "a check should select something: \(p)", sourceLocation: sourceLocation)
        #expect(got.map(\.objectID) == want.map(\.objectID), "\(p)", sourceLocation: sourceLocation)
    }

    @Test func comparisonsLogicAndStrings() throws {
        let f = try Fixture()
        let people = f.people
        try check(#Predicate<Person> { $0.firstName == "Bob" }, among: people) { $0.firstName == "Bob" }
        try check(#Predicate<Person> { $0.firstName != "Bob" && $0.lastName != "Brown" }, among: people) {
            $0.firstName != "Bob" && $0.lastName != "Brown"
        }
        try check(#Predicate<Person> { $0.age! > 40 || $0.firstName == "anna" }, among: people) {
            ($0.age ?? 0) > 40 || $0.firstName == "anna"
        }
        try check(#Predicate<Person> { $0.age! >= 34 && $0.age! < 55 }, among: people) {
            (34..<55).contains($0.age ?? -1)
        }
        try check(#Predicate<Person> { !($0.age! <= 41) }, among: people) { $0.age.map { $0 > 41 } ?? true }
        try check(#Predicate<Person> { $0.age == nil }, among: people) { $0.age == nil }
        try check(#Predicate<Person> { $0.age != nil }, among: people) { $0.age != nil }
        try check(#Predicate<Person> { $0.lastName.starts(with: "Ro") }, among: people) { $0.lastName.hasPrefix("Ro") }
        try check(#Predicate<Person> { $0.lastName.contains("o") && !$0.firstName.contains("h") }, among: people) {
            $0.lastName.contains("o") && !$0.firstName.contains("h")
        }
        let names = ["Bob", "Dan", "Nobody"]
        try check(#Predicate<Person> { names.contains($0.firstName) }, among: people) { names.contains($0.firstName) }
        let low: Int32 = 27
        let high: Int32 = 48
        try check(#Predicate<Person> { (low...high).contains($0.age!) }, among: people) {
            (low...high).contains($0.age ?? -1)
        }
        try check(#Predicate<Person> { (low..<high).contains($0.age!) }, among: people) {
            (low..<high).contains($0.age ?? -1)
        }
        let captured = low...high
        try check(#Predicate<Person> { captured.contains($0.age!) }, among: people) { captured.contains($0.age ?? -1) }
    }

    @Test func relationshipsThroughKeyPaths() throws {
        let f = try Fixture()
        try check(#Predicate<Employee> { $0.manager?.lastName == "Jones" }, among: f.employees) {
            $0.manager?.lastName == "Jones"
        }
        try check(#Predicate<Employee> { $0.manager!.age! >= 50 }, among: f.employees) { ($0.manager?.age ?? 0) >= 50 }
        try check(#Predicate<Employee> { $0.managers.count >= 2 }, among: f.employees) { $0.managers.count >= 2 }
        try check(#Predicate<Manager> { $0.employees.contains { $0.age! > 50 } }, among: f.managers) { m in
            m.employees.contains { ($0.age ?? 0) > 50 }
        }
        try check(#Predicate<Manager> { $0.employees.allSatisfy { $0.age! > 20 } }, among: f.managers) { m in
            m.employees.allSatisfy { ($0.age ?? 0) > 20 }
        }
        try check(#Predicate<Manager> { !$0.employees.isEmpty }, among: f.managers) { !$0.employees.isEmpty }
    }

    @Test func propertiesMapToTheirKeysAndBooleansAreConditions() throws {
        let store = TemporaryStore()
        let model = try ManagedObjectModel {
            EntityDescription("Chore", class: Chore.self) {
                AttributeDescription("name", .string)
                AttributeDescription("createdAt", .date, indexed: true)
                AttributeDescription("done", .bool)
            }
        }
        let container = try makeContainer(store, model: model)
        let context = container.newContext(concurrencyType: .confinement)
        let base = Date(timeIntervalSince1970: 1_700_000_000)
        for i in 1...50 {
            let t = try context.insert(Chore.self)
            t.title = "Chore \(i)"
            t.created = base + Double(i)
            t.isDone = i % 2 == 0
        }
        try context.save()
        let from = base + 10
        let to = base + 20
        let request = try FetchRequest<Chore>(
            predicate: #Predicate { $0.created >= from && $0.created < to && $0.isDone },
            sortBy: [SortDescriptor(\.created, order: .reverse)])
        let plan = try context.explain(request)
        #expect(plan.description.contains("INDEX createdAt"), "the translated range uses the index: \(plan)")
        #expect(plan.filter?.contains("done") == true, "\(plan)")
        #expect(try context.fetch(request).map(\.title) == [18, 16, 14, 12, 10].map { "Chore \($0)" })
        #expect(try FetchPredicate(#Predicate<Chore> { $0.title == "x" }).description == "name == \"x\"")
        #expect(try FetchSortDescriptor(SortDescriptor(\Chore.title)) == FetchSortDescriptor(key: "name"))
        try container.close()
    }

    @Test func sortDescriptorsWithKeyPathsApplyInOrder() throws {
        let f = try Fixture()
        let request = try FetchRequest<Person>(sortBy: [
            SortDescriptor(\.lastName, order: .reverse), SortDescriptor(\.firstName)
        ])
        #expect(
            request.sortDescriptors == [
                FetchSortDescriptor(key: "lastName", ascending: false), FetchSortDescriptor(key: "firstName")
            ])
        let want = f.people.sorted { ($0.lastName, $0.firstName) > ($1.lastName, $1.firstName) }.map(\.lastName)
        #expect(try f.context.fetch(request).map(\.lastName) == want)
    }

    @Test func whatCannotBeTranslatedIsAClearError() throws {
        func message(_ body: () throws -> Void) -> String? {
            do {
                try body()
                return nil
            } catch let e as LogbookError { return e.code == .invalidPredicate ? e.message : "\(e.code)" } catch {
                return "\(error)"
            }
        }
        // Arithmetic translates; a choice of values by a condition on the object does not.
        let arithmetic = try FetchPredicate(#Predicate<Person> { $0.age! + 1 > 30 })
        #expect(arithmetic.format == "(age + 1) > 30", "\(arithmetic.format)")
        let conditional = message { _ = try FetchPredicate(#Predicate<Person> { ($0.age == nil ? 0 : 1) > 0 }) }
        #expect(conditional?.contains("chooses between values") == true, "\(conditional ?? "no error")")
        // `??` translates (a missing age counts as the fallback).
        let coalesce = try FetchPredicate(#Predicate<Person> { ($0.age ?? 40) > 30 })
        #expect(coalesce.format == "(age ?? 40) > 30")
    }

    @Test func nilCoalescingGivesTheFallbackWhereAValueIsMissing() throws {
        let store = TemporaryStore()
        let container = try makeContainer(store)
        let context = container.newContext(concurrencyType: .confinement)
        for (name, age) in [("a", 20), ("b", 35), ("c", nil)] as [(String, Int32?)] {
            let p = try context.insert(Person.self)
            p.firstName = name
            p.lastName = "L"
            p.age = age
        }
        try context.save()
        let request = try FetchRequest<Person>(
            predicate: #Predicate { ($0.age ?? 40) > 30 }, sortBy: [SortDescriptor(\.firstName)])
        #expect(try context.fetch(request).map(\.firstName) == ["b", "c"])
    }
}

/// Sort options, dictionary results, and batches when the plan filters or sorts in memory.
@Suite struct FetchResultTests {
    @Test func stringsSortPlainlyCaseOrDiacriticInsensitivelyOrLocalized() throws {
        let store = TemporaryStore()
        let container = try makeContainer(store)
        let context = container.newContext(concurrencyType: .confinement)
        for name in ["bob", "Alice", "Émile", "eve", "Item 10", "Item 9"] {
            let p = try context.insert(Person.self)
            p.firstName = name
            p.lastName = "L"
        }
        try context.save()
        func sorted(_ comparison: StringComparison) throws -> [String] {
            var r = FetchRequest<Person>()
            r.sortDescriptors = [FetchSortDescriptor(key: "firstName", comparison: comparison)]
            return try context.fetch(r).map(\.firstName)
        }
        #expect(try sorted(.plain) == ["Alice", "Item 10", "Item 9", "bob", "eve", "Émile"])
        #expect(try sorted(.caseInsensitive) == ["Alice", "bob", "eve", "Item 10", "Item 9", "Émile"])
        #expect(try sorted(.caseAndDiacriticInsensitive) == ["Alice", "bob", "Émile", "eve", "Item 10", "Item 9"])
        #expect(try sorted(.diacriticInsensitive) == ["Alice", "Émile", "Item 10", "Item 9", "bob", "eve"])
        #expect(try sorted(.localizedStandard) == ["Alice", "bob", "Émile", "eve", "Item 9", "Item 10"])
        try container.close()
    }

    @Test func aStringSortWithOptionsDoesNotUseThePlainIndexOrder() throws {
        let store = TemporaryStore()
        let model = try ManagedObjectModel {
            EntityDescription("Chore", class: Chore.self) {
                AttributeDescription("name", .string, indexed: true)
                AttributeDescription("createdAt", .date)
                AttributeDescription("done", .bool)
            }
        }
        let container = try makeContainer(store, model: model)
        let context = container.newContext(concurrencyType: .confinement)
        for name in ["b", "A", "c"] {
            let t = try context.insert(Chore.self)
            t.title = name
            t.created = Date()
            t.isDone = false
        }
        try context.save()
        var r = FetchRequest<Chore>()
        r.sortDescriptors = [FetchSortDescriptor(key: "name")]
        #expect(try context.explain(r).orderFromIndex)
        #expect(try context.fetch(r).map(\.title) == ["A", "b", "c"])
        r.sortDescriptors = [FetchSortDescriptor(key: "name", ascending: false, comparison: .caseInsensitive)]
        #expect(try !context.explain(r).orderFromIndex)
        #expect(try context.fetch(r).map(\.title) == ["c", "b", "A"])
        try container.close()
    }

    @Test func dictionariesWithPropertiesExpressionsAndGroupBy() throws {
        let f = try PredicateTests.Fixture()
        let context = f.context
        // Chosen properties, one dictionary per object, sorted; nil values left out.
        var r = FetchRequest<Person>()
        r.propertiesToFetch = [.attribute("firstName"), .attribute("age")]
        r.sortDescriptors = [FetchSortDescriptor(key: "firstName")]
        let rows = try context.fetchDictionaries(r)
        #expect(rows.count == 8)
        #expect(rows.first?["firstName"] as? String == "Anthony" && rows.first?["age"] as? Int32 == 20)
        let anna = rows.first { $0["firstName"] as? String == "anna" }
        #expect(anna != nil && anna?["age"] == nil && anna?.count == 1)
        // Expressions over everything: one dictionary.
        r.propertiesToFetch = [
            .count(as: "n"), .count("age", as: "withAge"), .sum("age", as: "total"), .average("age", as: "mean"),
            .min("age", as: "youngest"), .max("firstName", as: "last")
        ]
        r.sortDescriptors = []
        let ages = f.people.compactMap(\.age).map(Int64.init)
        let all = try context.fetchDictionaries(r)
        #expect(all.count == 1)
        #expect(all[0]["n"] as? Int == 8 && all[0]["withAge"] as? Int == 7)
        #expect(all[0]["total"] as? Int64 == ages.reduce(0, +))
        #expect(all[0]["mean"] as? Double == Double(ages.reduce(0, +)) / 7)
        #expect(all[0]["youngest"] as? Int32 == 20 && all[0]["last"] as? String == "Élodie")
        // Group by: one dictionary per distinct value, expressions per group, sorted by a result key.
        var g = FetchRequest<Employee>()
        g.propertiesToFetch = [.attribute("manager"), .count(as: "staff"), .max("age", as: "oldest")]
        g.propertiesToGroupBy = ["manager"]
        g.sortDescriptors = [FetchSortDescriptor(key: "oldest", ascending: false)]
        let groups = try context.fetchDictionaries(g)
        #expect(groups.count == 3)
        #expect(groups.map { $0["staff"] as? Int } == [3, 3, 3])
        #expect(groups.map { $0["oldest"] as? Int32 } == [58, 53, 48])
        #expect(groups[0]["manager"] as? ObjectID == f.managers[2].objectID)
        // With a predicate, offset and limit.
        g.predicate = try FetchPredicate(format: "age > 30")
        g.fetchLimit = 1
        g.fetchOffset = 1
        #expect(try context.fetchDictionaries(g).map { $0["staff"] as? Int } == [2])
        // Errors: unknown key, an ungrouped attribute, a sum of strings.
        var bad = FetchRequest<Employee>()
        bad.propertiesToFetch = [.attribute("firstName"), .count(as: "n")]
        bad.propertiesToGroupBy = ["manager"]
        #expect(throws: LogbookError.self) { try context.fetchDictionaries(bad) }
        bad.propertiesToFetch = [.sum("lastName", as: "s")]
        #expect(throws: LogbookError.self) { try context.fetchDictionaries(bad) }
        bad.propertiesToFetch = [.attribute("salary")]
        #expect(throws: LogbookError.self) { try context.fetchDictionaries(bad) }
    }

    @Test func batchesAlsoWhenThePlanFiltersAndSortsInMemory() throws {
        let store = TemporaryStore()
        let container = try makeContainer(store)
        let writer = container.newContext(concurrencyType: .confinement)
        for i in 0..<100 {
            let p = try writer.insert(Person.self)
            p.firstName = "P\(i)"
            p.lastName = i % 2 == 0 ? "Even" : "Odd"
            p.age = Int32(i)
        }
        try writer.save()
        let context = container.newContext(concurrencyType: .confinement)
        var request = FetchRequest<Person>()
        request.predicate = try FetchPredicate(format: "lastName == 'Even'")
        request.sortDescriptors = [FetchSortDescriptor(key: "firstName", ascending: false)]
        request.fetchBatchSize = 10
        request.fetchOffset = 5
        let people = try context.fetch(request)
        let want = (0..<100).filter { $0 % 2 == 0 }.map { "P\($0)" }.sorted(by: >).dropFirst(5)
        #expect(people.count == want.count)
        let allFaults = people.allSatisfy { $0.isFault }
        #expect(allFaults, "the values read to filter and sort are not kept")
        #expect(people[0].firstName == want.first)
        #expect(!people[9].isFault && people[10].isFault, "touching one loads its batch of 10")
        #expect(people.map(\.firstName) == Array(want))
        try container.close()
    }

    @Test func aBackgroundFetchReadsOneSnapshotWhileAnotherContextSaves() async throws {
        let store = TemporaryStore()
        let container = try makeContainer(store)
        let writer = container.newBackgroundContext()
        let reader = container.newBackgroundContext()
        // Each save inserts 50 persons and renames every earlier one: a fetch that mixed two
        // states would see a count that is not a multiple of 50, or two generations of names.
        let writing = Task.detached {
            try await writer.perform {
                for generation in 0..<30 {
                    let all = try writer.fetch(FetchRequest<Person>())
                    for p in all { p.lastName = "G\(generation)" }
                    for i in 0..<50 {
                        let p = try writer.insert(Person.self)
                        p.firstName = "P\(generation)-\(i)"
                        p.lastName = "G\(generation)"
                    }
                    try writer.save()
                }
            }
        }
        var fetches = 0
        while fetches < 200 {
            let (count, generations): (Int, Set<String>) = try await reader.perform {
                reader.reset()
                var request = FetchRequest<Person>()
                request.sortDescriptors = [FetchSortDescriptor(key: "firstName", ascending: false)]
                request.fetchBatchSize = 7
                let people = try reader.fetch(request)
                return (people.count, Set(people.map(\.lastName)))
            }
            #expect(count % 50 == 0, "a fetch saw part of a save: \(count)")
            #expect(generations.count <= 1, "a fetch mixed states: \(generations)")
            fetches += 1
            if count == 1500 { break }
        }
        try await writing.value
        try container.close()
    }

    /// Objects of a direct fetch keep their record's bytes: typed reads decode one value and
    /// leave them faults; anything else decodes the record; a merge drops the stale bytes.
    @Test func fetchedObjectsReadValuesFromTheirRecords() async throws {
        let store = TemporaryStore()
        let container = try makeContainer(store)
        let writer = container.newContext(concurrencyType: .confinement)
        for i in 0..<50 {
            let p = try writer.insert(Person.self)
            p.firstName = "P\(i)"
            p.lastName = "L\(i)"
            p.age = i % 3 == 0 ? nil : Int32(i)
        }
        try writer.save()
        let context = container.newBackgroundContext()
        let other = container.newBackgroundContext()
        try await context.perform {
            var request = FetchRequest<Person>()
            request.sortDescriptors = [FetchSortDescriptor(key: "age", ascending: false)]
            let people = try context.fetch(request)
            #expect(people.count == 50)
            let p = people[0]
            #expect(p.isFault, "a fetched object is a fault that holds its record")
            #expect(p.firstName == "P49" && p.lastName == "L49" && p.age == 49)
            #expect(people.last!.age == nil, "a missing value reads as nil")
            #expect(p.isFault, "typed reads decode single values")
            #expect(try p.value(forKey: "lastName") as? String == "L49")
            #expect(p.isFault, "reading an attribute by key decodes that value alone too")
            #expect(try p.value(forKey: "firstName") as? String == "P49")
            people[1].firstName = "Changed"
            #expect(people[1].lastName == "L47" && people[1].hasChanges)
            try context.save()
        }
        // Another context changes a record: the fetched object shows the new value.
        try await other.perform {
            var request = FetchRequest<Person>()
            request.predicate = try FetchPredicate(format: "firstName == 'P49'")
            try other.fetch(request)[0].lastName = "Renamed"
            try other.save()
        }
        let (renamed, changed): (String, String) = try await context.perform {
            var request = FetchRequest<Person>()
            request.predicate = try FetchPredicate(format: "firstName == 'P49' OR firstName == 'Changed'")
            request.sortDescriptors = [FetchSortDescriptor(key: "age", ascending: false)]
            let found = try context.fetch(request)
            return (found[0].lastName, found[1].firstName)
        }
        #expect(renamed == "Renamed" && changed == "Changed")
        try container.close()
    }
}
