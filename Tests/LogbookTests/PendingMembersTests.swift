import Foundation
import LogbookEngine
import LogbookTestSupport
import Testing

@testable import LogbookGraph

/// The unsaved members of a to-many relationship: a sorted list while members come in order
/// (or few come out of it), a hash set once many do; either way a set's behaviour.
@Suite struct PendingMembersTests {
    /// Random inserts and removes (ascending runs, shuffled runs, repeats) compared step by
    /// step with `Set`, through both representations.
    @Test(arguments: [UInt64(1), 2, 3, 4, 5, 6, 7, 8])
    func behavesAsASet(seed: UInt64) {
        var random = SeededGenerator(seed: seed)
        var members = PendingMembers()
        var expected = Set<UInt64>()
        var next: UInt64 = 1
        for _ in 0..<2_000 {
            switch random.next() % 8 {
            case 0...3:
                // Mostly ascending, as new objects' serials come.
                next += 1 + random.next() % 3
                #expect(members.insert(next) == expected.insert(next).inserted)
            case 4:
                let m = 1 + random.next() % (next + 1)
                #expect(members.insert(m) == expected.insert(m).inserted)
            case 5, 6:
                let m = 1 + random.next() % (next + 1)
                #expect(members.remove(m) == expected.remove(m))
            default:
                let m = 1 + random.next() % (next + 1)
                #expect(members.contains(m) == expected.contains(m))
            }
            #expect(members.count == expected.count)
            #expect(members.isEmpty == expected.isEmpty)
        }
        #expect(Set(members) == expected)
        #expect(members.ascending == expected.sorted())
        #expect(members.withAscending { Array($0) } == expected.sorted())
        #expect(PendingMembers(expected).ascending == expected.sorted())
    }

    /// Sets of a few members (held inline, up to three, then a list): every sequence of four
    /// inserts and removes over five values reads as a `Set` does after each step, ascending.
    @Test func fewMembersInEveryOrder() {
        let operations: [(insert: Bool, member: UInt64)] = (1...5).flatMap { [(true, UInt64($0)), (false, UInt64($0))] }
        var sequences: [[Int]] = [[]]
        for _ in 0..<4 { sequences = sequences.flatMap { s in operations.indices.map { s + [$0] } } }
        var mismatches = 0
        for sequence in sequences {
            var members = PendingMembers()
            var expected = Set<UInt64>()
            for i in sequence {
                let (insert, m) = operations[i]
                let same =
                    insert ? members.insert(m) == expected.insert(m).inserted : members.remove(m) == expected.remove(m)
                if !same || members.count != expected.count || Array(members) != expected.sorted()
                    || members.withAscending({ Array($0) }) != expected.sorted()
                    || (1...6).contains(where: { members.contains($0) != expected.contains($0) })
                {
                    mismatches += 1
                }
            }
        }
        #expect(sequences.count == 10_000)
        #expect(mismatches == 0)
    }

    @Test func inOrderMembersStayAListAndIterateAscending() {
        var members: PendingMembers = [5, 3, 9]
        #expect(Array(members) == [3, 5, 9])
        for m in UInt64(10)..<1_010 { members.insert(m) }
        #expect(members.insert(500) == false)
        #expect(Array(members) == [3, 5, 9] + Array(10..<1_010))
        #expect(members.remove(4) == nil)
        #expect(members.remove(3) == 3)
        #expect(members.count == 1_002)
        #expect(members.ascending.first == 5)
    }

    /// A relationship built from both sides, in and out of order, with removals and re-adds,
    /// reads the same before the save, after it, and after a reopen.
    @Test func aRelationshipBuiltOutOfOrderSavesWhatItShows() throws {
        let store = TemporaryStore()
        var expected: [Int: Set<Int>] = [:]
        do {
            let container = try makeContainer(store)
            let context = container.newContext(concurrencyType: .confinement)
            var managers: [Manager] = []
            for m in 0..<3 {
                let o = try context.insert(Manager.self)
                o.firstName = "M\(m)"
                o.lastName = "Manager"
                managers.append(o)
            }
            var employees: [Employee] = []
            for e in 0..<300 {
                let o = try context.insert(Employee.self)
                o.firstName = "E\(e)"
                o.lastName = "Employee"
                employees.append(o)
            }
            var random = SeededGenerator(seed: 42)
            // Manager 0 gains employees from its own side in a shuffled order; manager 1 from
            // the employees' side, in order; manager 2 both, then loses some.
            for e in employees.indices.shuffled(using: &random) {
                try managers[0].add(employees[e], toRelationship: "employees")
            }
            for e in employees.indices where e % 2 == 0 {
                try employees[e].add(managers[1], toRelationship: "managers")
            }
            for e in employees.indices.reversed() where e % 3 == 0 {
                try managers[2].add(employees[e], toRelationship: "employees")
            }
            for e in employees.indices where e % 9 == 0 {
                try employees[e].remove(managers[2], fromRelationship: "managers")
            }
            try managers[2].add(employees[9], toRelationship: "employees")
            expected[0] = Set(0..<300)
            expected[1] = Set(stride(from: 0, to: 300, by: 2))
            expected[2] = Set(stride(from: 0, to: 300, by: 3)).filter { $0 % 9 != 0 }.union([9])
            func check() throws {
                for (m, want) in expected {
                    let got = Set(managers[m].employees.map { Int($0.firstName.dropFirst())! })
                    #expect(got == want, "manager \(m)")
                    #expect(try managers[m].count(forKey: "employees") == want.count)
                }
                for e in [0, 9, 18, 150, 299] {
                    let got = Set(employees[e].managers.map { Int($0.firstName.dropFirst())! })
                    let want = Set(expected.filter { $0.value.contains(e) }.keys)
                    #expect(got == want, "employee \(e)")
                }
            }
            try check()
            try context.save()
            try check()
            try container.close()
        }
        let container = try makeContainer(store)
        let context = container.newContext(concurrencyType: .confinement)
        for manager in try context.fetch(FetchRequest<Manager>()) {
            let m = Int(manager.firstName.dropFirst())!
            let got = Set(manager.employees.map { Int($0.firstName.dropFirst())! })
            #expect(got == expected[m], "manager \(m) after a reopen")
        }
        try container.close()
    }
}
