import Foundation
import LogbookEngine
import LogbookTestSupport
import Testing

@testable import LogbookGraph

/// Random data and random predicates over every operator, each fetch (whatever its plan: a
/// scan with a filter on records, an index range, index points, a compound index, a
/// relationship resolved to a set of destinations) compared with the predicate evaluated on
/// every object.
@Suite struct PlannerPropertyTests {
    static let base = Date(timeIntervalSince1970: 1_700_000_000)
    static let names = ["", "a", "ab", "abc", "b", "ba", "AB", "Item 1", "Item 10", "Item 2", "x*y", "Zürich", "zurich"]
    static let patterns = ["a*", "*b*", "?b", "Item 1*", "*", "", "z?rich", "Z*", "x*y"]

    static func model() throws -> ManagedObjectModel {
        try ManagedObjectModel {
            EntityDescription("Boss") {
                AttributeDescription("name", .string, indexed: true)
                RelationshipDescription("people", to: "Someone", inverse: "boss", toMany: true)
            }
            EntityDescription("Someone", compoundIndexes: [["name", "age"], ["flag", "score"], ["boss", "rank"]]) {
                AttributeDescription("name", .string, indexed: true)
                AttributeDescription("nick", .string, optional: true)
                AttributeDescription("age", .int32, optional: true, indexed: true)
                AttributeDescription("score", .double, optional: true)
                AttributeDescription("flag", .bool)
                AttributeDescription("born", .date, optional: true, indexed: true)
                AttributeDescription("rank", .int16)
                RelationshipDescription("boss", to: "Boss", inverse: "people")
            }
        }
    }

    /// A store of `count` people and 5 bosses, from `seed`.
    static func populate(_ context: ManagedObjectContext, count: Int, seed: UInt64) throws -> [ManagedObject] {
        var g = SeededGenerator(seed: seed)
        var bosses: [ManagedObject] = []
        for b in 0..<5 {
            let o = try context.insertNewObject(forEntityName: "Boss")
            try o.setValue("B\(b)", forKey: "name")
            bosses.append(o)
        }
        for _ in 0..<count {
            let p = try context.insertNewObject(forEntityName: "Someone")
            try p.setValue(names.randomElement(using: &g)!, forKey: "name")
            if Bool.random(using: &g) { try p.setValue(names.randomElement(using: &g)!, forKey: "nick") }
            if Int.random(in: 0..<5, using: &g) > 0 {
                try p.setValue(Int32.random(in: -5...20, using: &g), forKey: "age")
            }
            if Bool.random(using: &g) {
                try p.setValue([0.5, -1.25, 3.0, 7.75, 0.0].randomElement(using: &g)!, forKey: "score")
            }
            try p.setValue(Bool.random(using: &g), forKey: "flag")
            if Bool.random(using: &g) {
                try p.setValue(
                    base.addingTimeInterval(Double(Int.random(in: 0..<10, using: &g)) * 86_400), forKey: "born")
            }
            try p.setValue(Int16.random(in: 0...5, using: &g), forKey: "rank")
            if Int.random(in: 0..<4, using: &g) > 0 { try p.setValue(bosses.randomElement(using: &g)!, forKey: "boss") }
        }
        try context.save()
        return bosses
    }

    /// A random predicate: a format string and its arguments.
    static func predicate(_ g: inout SeededGenerator, bosses: [ManagedObject], depth: Int = 0) -> (String, [Any?]) {
        let roll = Int.random(in: 0..<10, using: &g)
        if depth < 2 && roll < 3 {
            let n = Int.random(in: 2...3, using: &g)
            let parts = (0..<n).map { _ in predicate(&g, bosses: bosses, depth: depth + 1) }
            let joiner = roll == 0 ? " OR " : " AND "
            return ("(" + parts.map(\.0).joined(separator: joiner) + ")", parts.flatMap(\.1))
        }
        if depth < 2 && roll == 3 {
            let inner = predicate(&g, bosses: bosses, depth: depth + 1)
            return ("NOT " + inner.0, inner.1)
        }
        let order = ["==", "!=", "<", "<=", ">", ">="]
        func pick<T>(_ xs: [T]) -> T { xs.randomElement(using: &g)! }
        let date = { (g: inout SeededGenerator) -> Date in
            base.addingTimeInterval(Double(Int.random(in: -1...10, using: &g)) * 86_400)
        }
        switch Int.random(in: 0..<16, using: &g) {
        case 0: return ("name \(pick(order)) %@", [pick(names)])
        case 1:
            let op = pick(["BEGINSWITH", "ENDSWITH", "CONTAINS", "LIKE", "MATCHES", "=="])
            let modifier = pick(["", "", "[c]", "[cd]", "[d]"])
            let value = op == "LIKE" ? pick(patterns) : (op == "MATCHES" ? pick(["a.*", ".*b", "Z.*|a"]) : pick(names))
            return ("\(pick(["name", "nick"])) \(op)\(modifier) %@", [value])
        case 2: return ("age \(pick(order)) %@", [Int.random(in: -6...21, using: &g)])
        case 3: return ("age \(pick(order)) %@", [pick([5.5, -0.5, 20.0, 3.0])])
        case 4:
            let a = Int.random(in: -6...21, using: &g)
            return ("age BETWEEN %@", [[a, a + Int.random(in: -2...8, using: &g)]])
        case 5:
            return (
                "age IN %@", [(0..<Int.random(in: 0...4, using: &g)).map { _ in Int.random(in: -5...20, using: &g) }]
            )
        case 6:
            return (pick(["age == nil", "age != nil", "nick == nil", "nick != nil", "score == nil", "born != nil"]), [])
        case 7: return ("score \(pick(order)) %@", [pick([0.5, -1.25, 3.0, 0.0, 10])])
        case 8: return ("flag == \(pick(["YES", "NO"]))", [])
        case 9: return ("born \(pick(order)) %@", [date(&g)])
        case 10:
            return (
                "rank IN %@", [(0..<Int.random(in: 1...3, using: &g)).map { _ in Int16.random(in: 0...6, using: &g) }]
            )
        case 11: return ("boss \(pick(["==", "!="])) %@", [pick(bosses + [nil] as [ManagedObject?]) as Any?])
        case 12: return ("boss.name \(pick(order + ["BEGINSWITH"])) %@", [pick(["B0", "B3", "B", "C"])])
        case 13: return ("%@ \(pick(order)) age", [Int.random(in: -6...21, using: &g)])
        case 14:
            // Two bounds on one attribute, the case a planner must merge keeping inclusiveness.
            let v = Int.random(in: 0...10, using: &g)
            return ("age \(pick(order)) %@ AND age \(pick(order)) %@", [v, v])
        default:
            return (
                "name \(pick(order)) %@ AND age \(pick(order)) %@", [pick(names), Int.random(in: -6...21, using: &g)]
            )
        }
    }

    /// The keys a plain evaluation of `p` selects among `all`; nil when evaluating throws.
    static func expected(_ p: FetchPredicate, _ all: [ManagedObject]) -> [UInt64]? {
        try? all.filter { try p.evaluate(with: $0) }.map(\.engineKey).sorted()
    }

    static func check(
        _ context: ManagedObjectContext, _ format: String, _ args: [Any?], seed: UInt64, all: [ManagedObject]
    ) throws -> Bool {
        let p = try FetchPredicate(format: format, argumentArray: args)
        guard let want = expected(p, all) else { return false }
        var request = FetchRequest<ManagedObject>(entityName: "Someone")
        request.predicate = p
        let plan = try context.explain(request)
        let got = try context.fetch(request).map(\.engineKey).sorted()
        #expect(got == want, "seed \(seed): \(format) \(args) — \(plan)")
        #expect(try context.count(for: request) == want.count, "count, seed \(seed): \(format) — \(plan)")
        #expect(try context.fetchObjectIDs(request).map(\.key).sorted() == want, "IDs, seed \(seed): \(format)")
        // Sorted and limited: a prefix of the sorted whole, which holds exactly the matches.
        request.sortDescriptors = [FetchSortDescriptor(key: "age"), FetchSortDescriptor(key: "name")]
        let sorted = try context.fetch(request)
        #expect(sorted.map(\.engineKey).sorted() == want, "sorted, seed \(seed): \(format)")
        request.fetchLimit = 5
        request.fetchOffset = 2
        let limited = try context.fetch(request).map(\.engineKey)
        #expect(limited == Array(sorted.map(\.engineKey).dropFirst(2).prefix(5)), "limit, seed \(seed): \(format)")
        // One sort key, either way (an index may give the order, walked backwards): the ages
        // come in the order a sort of the expected objects gives.
        let wanted = Set(want)
        for ascending in [true, false] {
            request.sortDescriptors = [FetchSortDescriptor(key: "age", ascending: ascending)]
            request.fetchLimit = 0
            request.fetchOffset = 0
            func age(_ o: ManagedObject) -> Int32? { (try? o.value(forKey: "age")) as? Int32 }
            let ages = try context.fetch(request).map(age)
            let expectedAges = all.filter { wanted.contains($0.engineKey) }.map(age).sorted { a, b in
                guard let a else { return b != nil && ascending }
                guard let b else { return !ascending }
                return ascending ? a < b : a > b
            }
            #expect(ages == expectedAges, "order, seed \(seed): \(format) ascending \(ascending)")
        }
        request.fetchLimit = 5
        request.fetchOffset = 2
        // Unsorted with a limit: the first matches in the plan's order, all of them matches.
        request.sortDescriptors = []
        let some = try context.fetch(request).map(\.engineKey)
        #expect(some.count == min(5, max(0, want.count - 2)), "unsorted limit, seed \(seed): \(format) — \(plan)")
        #expect(Set(some).isSubset(of: want), "unsorted limit, seed \(seed): \(format)")
        return true
    }

    @Test(arguments: [1, 2, 3] as [UInt64])
    func everyPlanSelectsWhatThePredicateSays(seed: UInt64) throws {
        let store = TemporaryStore()
        let container = try makeContainer(store, model: Self.model())
        let context = container.newContext(concurrencyType: .confinement)
        let bosses = try Self.populate(context, count: 400, seed: seed)
        context.reset()
        let reader = container.newContext(concurrencyType: .confinement)
        let all = try reader.fetch(FetchRequest<ManagedObject>(entityName: "Someone"))
        let bossesHere = try bosses.map { try reader.existingObject(with: $0.objectID) }
        var g = SeededGenerator(seed: seed &* 7919)
        var checked = 0
        for _ in 0..<250 {
            let (format, args) = Self.predicate(&g, bosses: bossesHere)
            if try Self.check(reader, format, args, seed: seed, all: all) { checked += 1 }
        }
        #expect(checked > 200, "most random predicates evaluate without an error")
        // Unsaved changes: the same agreement over the context's current objects.
        for o in all.prefix(30) { try o.setValue(Int32(7), forKey: "age") }
        reader.delete(all[40])
        let added = try reader.insertNewObject(forEntityName: "Someone")
        try added.setValue("ab", forKey: "name")
        try added.setValue(Int32(7), forKey: "age")
        let current = try reader.fetch(FetchRequest<ManagedObject>(entityName: "Someone"))
        #expect(current.count == all.count)
        for _ in 0..<60 {
            let (format, args) = Self.predicate(&g, bosses: bossesHere)
            let p = try FetchPredicate(format: format, argumentArray: args)
            guard let want = Self.expected(p, current) else { continue }
            var request = FetchRequest<ManagedObject>(entityName: "Someone")
            request.predicate = p
            #expect(try reader.fetch(request).map(\.engineKey).sorted() == want, "pending, seed \(seed): \(format)")
            #expect(try reader.count(for: request) == want.count, "pending count, seed \(seed): \(format)")
        }
        try container.close()
    }

    @Test func twoBoundsOnOneIndexedAttributeKeepTheStricterOne() throws {
        let store = TemporaryStore()
        let container = try makeContainer(store, model: Self.model())
        let context = container.newContext(concurrencyType: .confinement)
        for age in 0..<10 {
            let p = try context.insertNewObject(forEntityName: "Someone")
            try p.setValue("p\(age)", forKey: "name")
            try p.setValue(Int32(age), forKey: "age")
            try p.setValue(false, forKey: "flag")
            try p.setValue(Int16(0), forKey: "rank")
        }
        try context.save()
        func ages(_ format: String) throws -> [Int32] {
            var r = FetchRequest<ManagedObject>(entityName: "Someone")
            r.predicate = try FetchPredicate(format: format)
            r.sortDescriptors = [FetchSortDescriptor(key: "age")]
            return try context.fetch(r).map { try $0.value(forKey: "age") as! Int32 }
        }
        #expect(try ages("age > 5 AND age >= 5") == [6, 7, 8, 9])
        #expect(try ages("age >= 5 AND age > 5") == [6, 7, 8, 9])
        #expect(try ages("age <= 5 AND age < 5") == [0, 1, 2, 3, 4])
        #expect(try ages("age < 5 AND age <= 5") == [0, 1, 2, 3, 4])
        #expect(try ages("age >= 3 AND age > 2 AND age < 6 AND age <= 7") == [3, 4, 5])
        try container.close()
    }

    /// A scan large enough to be split across workers: key order, limits and counts hold.
    @Test func aParallelScanKeepsKeyOrderAndStopsAtItsLimit() throws {
        let store = TemporaryStore()
        let container = try makeContainer(store, model: Self.model())
        let context = container.newContext(concurrencyType: .confinement)
        let n = StoreScan.parallelThreshold * 2 + 1234
        _ = try context.execute(
            BatchInsertRequest(entityName: "Someone", count: n) { i, row in
                row.set(i % 3 == 0 ? "Item \(i)" : "other", forKey: "name")
                row.set(i % 2 == 0, forKey: "flag")
                row.set(Int16(i % 6), forKey: "rank")
            })
        var r = FetchRequest<ManagedObject>(entityName: "Someone")
        r.predicate = try FetchPredicate(format: "rank == 3 AND nick == nil")
        #expect(try context.explain(r).access == .scan)
        let found = try context.fetch(r)
        #expect(found.count == (n + 2) / 6)
        #expect(found.map(\.engineKey) == found.map(\.engineKey).sorted(), "key order across the parts")
        #expect(try context.count(for: r) == found.count)
        r.fetchLimit = 10
        r.fetchOffset = 3
        #expect(try context.fetch(r).map(\.engineKey) == Array(found.map(\.engineKey)[3..<13]))
        #expect(context.lastFetchRecordsRead < n, "the limit stops the scan: \(context.lastFetchRecordsRead) read")
        r = FetchRequest<ManagedObject>(entityName: "Someone")
        r.predicate = try FetchPredicate(format: "name CONTAINS '99'")
        let contains = try context.fetch(r).map { try $0.value(forKey: "name") as! String }
        let want = (0..<n).filter { $0 % 3 == 0 && "Item \($0)".contains("99") }.map { "Item \($0)" }
        #expect(contains == want)
        try container.close()
    }
}
