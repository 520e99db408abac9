import Foundation
import LogbookEngine
import LogbookTestSupport
import Testing

@testable import LogbookGraph

/// The rest of the predicate language: SELF, arithmetic and bitwise expressions, CAST,
/// functions, NOT IN, collection subscripts, @distinctUnionOfObjects, variables, and
/// predicates built and inspected without strings. Expected values are NSPredicate's.
@Suite struct PredicateLanguageTests {
    struct Fixture {
        let store = TemporaryStore()
        let container: PersistentContainer
        let c: ManagedObjectContext
        let ada: Person
        let boss: Manager

        init() throws {
            container = try makeContainer(store)
            c = container.newContext(concurrencyType: .confinement)
            ada = try c.insert(Person.self)
            ada.firstName = "Ada"
            ada.lastName = "Lovelace"
            ada.age = 36
            boss = try c.insert(Manager.self)
            boss.firstName = "Grace"
            boss.lastName = "Hopper"
            boss.age = 85
            for (name, age) in [("Al", 30), ("Bo", 40), ("Al", 50)] {
                let e = try c.insert(Employee.self)
                e.firstName = name
                e.lastName = "E"
                e.age = Int32(age)
                e.manager = boss
            }
            try c.save()
        }

        func test(_ format: String, _ args: Any?..., on object: ManagedObject? = nil) throws -> Bool {
            try FetchPredicate(format: format, argumentArray: args).evaluate(with: object ?? ada)
        }
    }

    @Test func arithmeticAndBitwiseExpressions() throws {
        let f = try Fixture()
        #expect(try f.test("age + 4 == 40"))
        #expect(try f.test("age - 6 == 30"))
        #expect(try f.test("age * 2 == 72"))
        #expect(try f.test("age / 8 == 4.5"))  // division gives a double, as NSExpression's divide:by:
        #expect(try f.test("2 + 3 * 4 == 14"))
        #expect(try f.test("(2 + 3) * 4 == 20"))
        #expect(try f.test("2 ** 3 ** 2 == 512"))  // right-associative
        #expect(try f.test("-age == -36"))
        #expect(try f.test("age - -4 == 40"))
        #expect(try f.test("(age & 4) == 4 AND (age | 1) == 37 AND (age ^ 36) == 0"))
        #expect(try f.test("~0 == -1"))
        #expect(try f.test("age > 10 * 3"))
        #expect(try !f.test("age + 1 < %d", 30))
        #expect(throws: LogbookError.self) { try f.test("firstName + 1 == 2") }
        #expect(throws: LogbookError.self) { try f.test("age / 0 == 1") }
    }

    @Test func functionsCastsAndSelf() throws {
        let f = try Fixture()
        #expect(try f.test("FUNCTION(firstName, 'uppercase:') == 'ADA'"))
        #expect(try f.test("lowercase:(lastName) == 'lovelace'"))
        #expect(try f.test("abs:(-5) == 5 AND sqrt:(16) == 4 AND floor:(2.7) == 2 AND ceiling:(2.1) == 3"))
        #expect(try f.test("sum:({1, 2, 3}) == 6 AND count:({1, 2}) == 2 AND max:({4, 9, 2}) == 9"))
        #expect(try f.test("average:({2, 4}) == 3 AND min:({4, 9, 2}) == 2"))
        #expect(try f.test("modulus:by:(age, 5) == 1"))
        #expect(try f.test("now() > CAST(0, 'NSDate')"))
        #expect(try f.test("CAST(%@, 'NSNumber') == 0", Date(timeIntervalSinceReferenceDate: 0)))
        #expect(try f.test("CAST('12', 'NSNumber') == 12 AND CAST(age, 'NSString') == '36'"))
        #expect(try f.test("SELF == %@", f.ada))
        #expect(try f.test("SELF == %@", f.ada.objectID))
        #expect(try f.test("SELF IN %@", [f.ada.objectID]))
        #expect(try !f.test("SELF IN %@", [f.boss]))
        #expect(try f.test("SELF.firstName == 'Ada'"))
        #expect(throws: LogbookError.self) { try f.test("FUNCTION(age, 'noSuchFunction:') == 1") }
        #expect(throws: LogbookError.self) { try f.test("CAST(age, 'NSArray') == 1") }
    }

    @Test func notInSubscriptsAndDistinctUnions() throws {
        let f = try Fixture()
        #expect(try f.test("firstName NOT IN {'Bob', 'Cy'}"))
        #expect(try !f.test("firstName NOT IN %@", ["Ada"]))
        #expect(try f.test("age NOT BETWEEN {40, 50}"))
        #expect(try f.test("lastName NOT BEGINSWITH 'X'"))
        let boss = f.boss
        #expect(try f.test("reports[SIZE] == 3", on: boss))
        #expect(try f.test("reports[FIRST].firstName == 'Al' AND reports[LAST].age == 50", on: boss))
        #expect(try f.test("reports[1].firstName == 'Bo'", on: boss))
        #expect(try f.test("reports.@distinctUnionOfObjects.firstName[SIZE] == 2", on: boss))
        #expect(try f.test("reports.@unionOfObjects.firstName[SIZE] == 3", on: boss))
        #expect(try f.test("reports.@max.age - reports.@min.age == 20", on: boss))
        #expect(throws: LogbookError.self) { try f.test("reports[7].age == 1", on: boss) }
        // An index too large for an integer is an error, not a trap (found by the fuzzer).
        #expect(throws: LogbookError.self) { try FetchPredicate(format: "reports[666666666666666666666666] == 1") }
        #expect(throws: LogbookError.self) { try f.test("modulus:by:(age, 0) == 1") }
        #expect(try f.test("modulus:by:(%@, -1) == 0", Int64.min))
        // In a fetch: the planner leaves computed sides to the evaluator.
        var r = FetchRequest<Person>()
        r.predicate = try FetchPredicate(format: "age * 2 > 70 AND firstName NOT IN {'X'}")
        #expect(try f.c.fetch(r).count == 1)
    }

    @Test func variablesAreSubstituted() throws {
        let f = try Fixture()
        let template = try FetchPredicate(format: "firstName == $name AND age > $min")
        #expect(try template.substituting(["name": "Ada", "min": 30]).evaluate(with: f.ada))
        #expect(try !template.substituting(["name": "Ada", "min": 40]).evaluate(with: f.ada))
        #expect(throws: LogbookError.self) { try template.evaluate(with: f.ada) }
    }

    @Test func predicatesBuiltAndInspectedWithoutStrings() throws {
        let f = try Fixture()
        let adults = FetchPredicate.compare("age", .greaterOrEqual, 18)
        let named = FetchPredicate.compare("lastName", .beginsWith, "lo", options: .caseInsensitive)
        let p = FetchPredicate.and([adults, .not(named)])
        #expect(try !p.evaluate(with: f.ada))
        #expect(try FetchPredicate.or([adults, named]).evaluate(with: f.ada))
        #expect(try FetchPredicate.compare("age", .between, [30, 40]).evaluate(with: f.ada))
        #expect(try FetchPredicate.compare("reports.age", .greater, 45, quantifier: .any).evaluate(with: f.boss))
        #expect(try FetchPredicate.and([]).evaluate(with: f.ada))
        // The format of a built predicate parses back to the same meaning.
        let again = try FetchPredicate(format: p.format)
        #expect(try again.evaluate(with: f.ada) == p.evaluate(with: f.ada))
        // The tree of a parsed predicate.
        let parsed = try FetchPredicate(format: "age > 3 AND NOT (firstName ==[c] 'x' OR age * 2 < 10)")
        guard case .and(let parts) = parsed.tree, parts.count == 2, case .comparison(let first) = parts[0],
            case .not(.or(let inner)) = parts[1], case .comparison(let last) = inner[1]
        else {
            Issue.record("unexpected tree \(parsed.tree)")
            return
        }
        #expect(first.operator == .greater)
        #expect("\(first.left)" == "age")
        #expect(first.right.description == "3")
        #expect(last.left.description == "(age * 2)")
        // Used in a fetch like any other predicate (the index plan included).
        var r = FetchRequest<Person>()
        r.predicate = .and([.compare("age", .greater, 30), .compare("firstName", .equal, "Ada")])
        #expect(try f.c.fetch(r).map(\.firstName) == ["Ada"])
        #expect(try f.c.explain(r).description.contains("age"))
    }
}
