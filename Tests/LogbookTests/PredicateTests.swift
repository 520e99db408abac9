import Foundation
import LogbookTestSupport
import Testing

@testable import LogbookGraph

/// The predicate language, checked against plain Swift filtering of the same objects.
@Suite struct PredicateTests {
    final class Fixture {
        let store = TemporaryStore()
        let container: PersistentContainer
        let context: ManagedObjectContext
        var people: [Person] = []
        var managers: [Manager] = []
        var employees: [Employee] = []
        var laptops: [Laptop] = []

        init() throws {
            container = try makeContainer(store)
            context = container.newContext(concurrencyType: .confinement)
            let names = [
                ("Anthony", "Robbins"), ("Richard", "Branson"), ("Élodie", "Rousseau"), ("anna", "Ödegaard"),
                ("Bob", "Marley"), ("Chloé", "Robert"), ("Dan", "Brown"), ("Eve", "Online")
            ]
            for (i, (f, l)) in names.enumerated() {
                let p = try context.insert(Person.self)
                p.firstName = f
                p.lastName = l
                p.age = i == 3 ? nil : Int32(20 + i * 7)
                people.append(p)
            }
            for i in 0..<3 {
                let m = try context.insert(Manager.self)
                m.firstName = "M\(i)"
                m.lastName = ["Smith", "Jones", "Stone"][i]
                m.age = Int32(40 + i * 10)
                managers.append(m)
            }
            for i in 0..<9 {
                let e = try context.insert(Employee.self)
                e.firstName = "E\(i)"
                e.lastName = "Worker"
                e.age = Int32(18 + i * 5)
                e.manager = managers[i % 3]
                try e.add(Array(managers.prefix(i % 3 + 1)), toRelationship: "managers")
                employees.append(e)
            }
            AttributeTransformers.register(ColorTransformer(), name: "ColorTransformer")
            for (i, c) in [Color.red, Color.blue, Color.red].enumerated() {
                let l = try context.insert(Laptop.self)
                l.model = "L\(i)"
                l.color = c
                laptops.append(l)
            }
            try context.save()
        }

        func check<T: ManagedObject>(
            _ format: String, _ args: Any?..., among objects: [T], _ expected: (T) -> Bool,
            sourceLocation: SourceLocation = #_sourceLocation
        ) throws {
            let p = try FetchPredicate(format: format, argumentArray: args)
            let got = try objects.filter { try p.evaluate(with: $0) }
            let want = objects.filter(expected)
            #expect(got.map(\.objectID) == want.map(\.objectID), "\(format)", sourceLocation: sourceLocation)
            #expect(
                !want.isEmpty || format.contains("FALSE") || format.contains("NONE") || format.contains("nil"),
                "a check should select something: \(format)", sourceLocation: sourceLocation)
        }
    }

    @Test func comparisonsAndLogic() throws {
        let f = try Fixture()
        let p = f.people
        try f.check("age == 27", among: p) { $0.age == 27 }
        try f.check("age = 27", among: p) { $0.age == 27 }
        try f.check("age != 27", among: p) { $0.age != 27 }
        try f.check("age <> 27", among: p) { $0.age != 27 }
        try f.check("age < 34", among: p) { ($0.age ?? .max) < 34 }
        try f.check("age <= 34", among: p) { ($0.age ?? .max) <= 34 }
        try f.check("age > 34", among: p) { ($0.age ?? .min) > 34 }
        try f.check("age >= 34", among: p) { ($0.age ?? .min) >= 34 }
        try f.check("age =< 34", among: p) { ($0.age ?? .max) <= 34 }
        try f.check("age => 34", among: p) { ($0.age ?? .min) >= 34 }
        try f.check("age BETWEEN {27, 48}", among: p) { (27...48).contains($0.age ?? -1) }
        try f.check("age IN {20, 34, 69}", among: p) { [20, 34, 69].contains($0.age ?? -1) }
        try f.check("age == nil", among: p) { $0.age == nil }
        try f.check("age != NULL", among: p) { $0.age != nil }
        try f.check("(age > 30 AND age < 60) OR firstName == 'Bob'", among: p) {
            (($0.age ?? 0) > 30 && ($0.age ?? 0) < 60) || $0.firstName == "Bob"
        }
        try f.check("age > 30 && NOT (age > 50) || firstName == \"anna\"", among: p) {
            (($0.age ?? 0) > 30 && !(($0.age ?? 0) > 50)) || $0.firstName == "anna"
        }
        try f.check("!(age < 40)", among: p) { !(($0.age ?? .max) < 40) }
        try f.check("TRUEPREDICATE", among: p) { _ in true }
        try f.check("FALSEPREDICATE", among: p) { _ in false }
        try f.check("age > 100 OR TRUE == YES", among: p) { _ in true }
        try f.check("age > 25.5", among: p) { Double($0.age ?? 0) > 25.5 }
    }

    @Test func stringOperatorsAndOptions() throws {
        let f = try Fixture()
        let p = f.people
        func folded(_ s: String) -> String {
            s.folding(options: [.caseInsensitive, .diacriticInsensitive], locale: nil)
        }
        try f.check("lastName BEGINSWITH 'Ro'", among: p) { $0.lastName.hasPrefix("Ro") }
        try f.check("lastName BEGINSWITH[c] 'ro'", among: p) { $0.lastName.lowercased().hasPrefix("ro") }
        try f.check("lastName ENDSWITH 'son'", among: p) { $0.lastName.hasSuffix("son") }
        try f.check("lastName CONTAINS 'ar'", among: p) { $0.lastName.contains("ar") }
        try f.check("firstName CONTAINS[cd] 'E'", among: p) { folded($0.firstName).contains("e") }
        try f.check("firstName == [d] 'Elodie'", among: p) { $0.firstName == "Élodie" }
        try f.check("firstName ==[cd] 'elodie'", among: p) { $0.firstName == "Élodie" }
        try f.check("lastName BEGINSWITH[d] 'Ode'", among: p) { $0.lastName == "Ödegaard" }
        try f.check("lastName LIKE 'R*'", among: p) { $0.lastName.hasPrefix("R") }
        try f.check("lastName LIKE[c] '?ROWN'", among: p) { $0.lastName == "Brown" }
        try f.check("firstName MATCHES '[A-D].*'", among: p) { $0.firstName.first.map { "ABCD".contains($0) } ?? false }
        try f.check("firstName MATCHES[c] 'a.*'", among: p) { $0.firstName.lowercased().hasPrefix("a") }
        try f.check("firstName IN {'Bob', 'Eve'}", among: p) { ["Bob", "Eve"].contains($0.firstName) }
        try f.check("'Rob' IN lastName", among: p) { $0.lastName.contains("Rob") }
        try f.check("lastName < 'C'", among: p) { $0.lastName < "C" }
        try f.check("firstName == 'Dan' AND lastName == 'Brown'", among: p) { $0.firstName == "Dan" }
    }

    @Test func argumentsAndKeyPaths() throws {
        let f = try Fixture()
        let p = f.people
        try f.check("age >= %d AND age <= %d", 27, 48, among: p) { (27...48).contains($0.age ?? -1) }
        try f.check("age > %i", 40, among: p) { ($0.age ?? 0) > 40 }
        try f.check("age > %ld", 40, among: p) { ($0.age ?? 0) > 40 }
        try f.check("age < %f", 30.5, among: p) { Double($0.age ?? 99) < 30.5 }
        try f.check("age < %lf", 30.5, among: p) { Double($0.age ?? 99) < 30.5 }
        try f.check("%K == %@", "firstName", "Bob", among: p) { $0.firstName == "Bob" }
        try f.check("lastName IN %@", ["Brown", "Marley"], among: p) { ["Brown", "Marley"].contains($0.lastName) }
        try f.check("age BETWEEN %@", [30, 50], among: p) { (30...50).contains($0.age ?? -1) }
        let e = f.employees
        try f.check("manager.lastName == 'Jones'", among: e) { $0.manager?.lastName == "Jones" }
        try f.check("manager.age > 45", among: e) { ($0.manager?.age ?? 0) > 45 }
        try f.check("manager == %@", f.managers[2], among: e) { $0.manager === f.managers[2] }
        try f.check("manager == %@", f.managers[2].objectID, among: e) { $0.manager === f.managers[2] }
        try f.check("ANY managers.lastName == 'Stone'", among: e) { $0.managers.contains { $0.lastName == "Stone" } }
        try f.check("ALL managers.age < 55", among: e) { $0.managers.allSatisfy { ($0.age ?? 0) < 55 } }
        try f.check("NONE managers.lastName == 'Jones'", among: e) { !$0.managers.contains { $0.lastName == "Jones" } }
        try f.check("SOME managers.age > 55", among: e) { $0.managers.contains { ($0.age ?? 0) > 55 } }
        try f.check("managers.@count == 2", among: e) { $0.managers.count == 2 }
        let m = f.managers
        try f.check("employees.@count >= 6", among: m) { $0.employees.count >= 6 }
        try f.check("employees.@sum.age > 200", among: m) { $0.employees.reduce(0) { $0 + Int($1.age ?? 0) } > 200 }
        try f.check("employees.@avg.age > 40", among: m) { m in
            Double(m.employees.reduce(0) { $0 + Int($1.age ?? 0) }) / Double(m.employees.count) > 40
        }
        try f.check("employees.@min.age == 18", among: m) { $0.employees.map { $0.age ?? 0 }.min() == 18 }
        try f.check("employees.@max.age > 50", among: m) { ($0.employees.map { $0.age ?? 0 }.max() ?? 0) > 50 }
        try f.check("SUBQUERY(employees, $e, $e.age < 30).@count >= 2", among: m) {
            $0.employees.filter { ($0.age ?? 0) < 30 }.count >= 2
        }
        try f.check("SUBQUERY(employees, $e, $e.manager.lastName == 'Smith' AND $e.age > 20).@count > 0", among: m) {
            $0.employees.contains { $0.manager?.lastName == "Smith" && ($0.age ?? 0) > 20 }
        }
        // A transformable attribute compares by its transformed value.
        try f.check("color == %@", Color.red, among: f.laptops) { $0.color == .red }
        try f.check("color != %@", Color.red, among: f.laptops) { $0.color != .red }
    }

    @Test func errorsSayWhatAndWhere() throws {
        func message(_ format: String, _ args: Any?...) -> String? {
            do {
                _ = try FetchPredicate(format: format, argumentArray: args)
                return nil
            } catch let e as LogbookError {
                #expect(e.code == .invalidPredicate)
                return e.message
            } catch { return "\(error)" }
        }
        #expect(message("age >") == "the predicate ends where a value or key was expected at column 6 of \"age >\"")
        #expect(message("age ~ 3")?.contains("expected a comparison operator, found '~' at column 5") == true)
        #expect(message("age # 3")?.contains("at column 5") == true)
        #expect(message("age \\ 3")?.contains("unexpected character") == true)
        #expect(message("age == 'unterminated")?.contains("unterminated string at column 8") == true)
        #expect(message("age 3")?.contains("expected a comparison operator, found number 3.0 at column 5") == true)
        #expect(message("(age > 3")?.contains("expected ')' at column 9") == true)
        #expect(message("age > 3 age")?.contains("unexpected 'age' after the predicate at column 9") == true)
        #expect(message("name BEGINSWITH[x] 'a'")?.contains("unknown option 'x'") == true)
        #expect(message("age > %@")?.contains("needs more arguments") == true)
        #expect(message("age > %@", 1, 2)?.contains("2 arguments given") == true)
        #expect(message("%K == 1", 5)?.contains("%K needs a key name") == true)
        #expect(message("age > %d", "x")?.contains("%d needs an integer") == true)
        #expect(message("age > %q")?.contains("unknown format specifier") == true)
        #expect(message("age BETWEEN 3")?.contains("BETWEEN needs two bounds") == true)
        // Errors found while evaluating name the key and the column.
        let f = try Fixture()
        let p = try FetchPredicate(format: "age > 3 AND shoeSize > 40")
        #expect { try p.evaluate(with: f.people[0]) } throws: { e in
            let e = e as? LogbookError
            return e?.key == "shoeSize" && e?.message.contains("column 13") == true
                && e?.message.contains("Person has no key shoeSize") == true
        }
        let q = try FetchPredicate(format: "firstName > 3")
        #expect { try q.evaluate(with: f.people[0]) } throws: { "\($0)".contains("cannot order String and Int") }
    }

    @Test func fetchRequestsUseThePredicate() throws {
        let f = try Fixture()
        var request = FetchRequest<Person>()
        request.predicate = try FetchPredicate(format: "(age >= %d) AND (age <= %d)", 27, 48)
        request.sortDescriptors = [FetchSortDescriptor(key: "age", ascending: false)]
        let found = try f.context.fetch(request)
        #expect(found.map(\.age) == [48, 34, 27])
        #expect(try f.context.count(for: request) == 3)
        // Unsaved changes are seen.
        f.people[0].age = 30
        #expect(try f.context.fetch(request).map(\.age) == [48, 34, 30, 27])
    }
}

/// Inputs the predicate fuzzer found: nesting deep enough to run the recursive parser out of
/// stack is refused with an error instead.
@Suite struct PredicateNestingTests {
    @Test func nestingPastTheLimitIsAnErrorNotACrash() {
        let deep = PredicateParser.maxNesting * 50
        let inputs = [
            String(repeating: "(", count: deep) + "age == 1" + String(repeating: ")", count: deep),
            String(repeating: "NOT ", count: deep) + "age == 1",
            "age IN " + String(repeating: "{", count: deep) + "1" + String(repeating: "}", count: deep),
            String(repeating: "{{  { ", count: deep)
        ]
        for input in inputs {
            #expect {
                try FetchPredicate(format: input)
            } throws: { error in
                (error as? LogbookError)?.code == .invalidPredicate
                    && (error as? LogbookError)?.message.contains("nests more than") == true
            }
        }
    }

    @Test func nestingWithinTheLimitParses() throws {
        let depth = PredicateParser.maxNesting - 5
        let predicate = try FetchPredicate(
            format: String(repeating: "(", count: depth) + "age == 1" + String(repeating: ")", count: depth))
        #expect(predicate.format.hasSuffix(")"))
    }
}
