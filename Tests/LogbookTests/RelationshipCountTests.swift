import Foundation
import LogbookTestSupport
import Testing

@testable import LogbookGraph

/// `count(forKey:)` counts a to-many relationship without reading the owner's record: a
/// fault stays one, and unsaved changes count.
@Suite struct RelationshipCountTests {
    @Test func aFaultCountsItsRelationshipAndStaysAFault() throws {
        let store = TemporaryStore()
        let container = try makeContainer(store)
        do {
            let context = container.newContext(concurrencyType: .confinement)
            var managers: [ManagedObject] = []
            for m in 0..<5 {
                let manager = try context.insertNewObject(forEntityName: "Manager")
                try manager.setValue("M\(m)", forKey: "firstName")
                try manager.setValue("Manager", forKey: "lastName")
                managers.append(manager)
            }
            for e in 0..<40 {
                let employee = try context.insertNewObject(forEntityName: "Employee")
                try employee.setValue("E\(e)", forKey: "firstName")
                try employee.setValue("Employee", forKey: "lastName")
                // Manager m gets the employees whose number is a multiple of m + 1.
                try employee.add(
                    managers.indices.filter { e % ($0 + 1) == 0 }.map { managers[$0] }, toRelationship: "managers")
            }
            try context.save()
        }
        let context = container.newContext(concurrencyType: .confinement)
        // Unsorted: the fetch leaves its objects faults.
        var managers = try context.fetch(FetchRequest<ManagedObject>(entityName: "Manager"))
        #expect(managers.count == 5)
        for manager in managers {
            #expect(manager.isFault)
            let count = try manager.count(forKey: "employees")
            #expect(manager.isFault, "counting read no record")
            let m = Int(try #require(manager.value(forKey: "firstName") as? String).dropFirst())!
            #expect(count == (0..<40).filter { $0 % (m + 1) == 0 }.count)
        }
        managers.sort { ($0.objectID.serial) < ($1.objectID.serial) }
        // Unsaved changes count; the values read afterwards are the stored ones.
        let newcomer = try context.insertNewObject(forEntityName: "Employee")
        try newcomer.setValue("New", forKey: "firstName")
        try newcomer.setValue("Employee", forKey: "lastName")
        try newcomer.add(managers[4], toRelationship: "managers")
        #expect(try managers[4].count(forKey: "employees") == 9)
        #expect(try managers[4].value(forKey: "firstName") as? String == "M4")
        #expect { try managers[0].count(forKey: "reportsTo") } throws: {
            ($0 as? LogbookError)?.code == .unknownKey
        }
        try container.close()
    }
}
