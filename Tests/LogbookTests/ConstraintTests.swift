import Foundation
import LogbookEngine
import LogbookTestSupport
import Testing

@testable import LogbookGraph

/// Uniqueness constraints: single and compound, against the store and within a save, under
/// each merge policy (errors, or upserts), through batch inserts, inherited by sub-entities.
@Suite struct ConstraintTests {
    static func model() throws -> ManagedObjectModel {
        var car = EntityDescription("Car") {
            AttributeDescription("plate", .string)
            AttributeDescription("color", .string, optional: true)
            AttributeDescription("km", .int32, optional: true)
        }
        car.uniquenessConstraints = [["plate"]]
        var person = EntityDescription("Person") {
            AttributeDescription("first", .string)
            AttributeDescription("last", .string)
            AttributeDescription("age", .int16, optional: true)
        }
        person.uniquenessConstraints = [["first", "last"]]
        let sports = EntityDescription("SportsCar", parent: "Car") {
            AttributeDescription("speed", .int32, optional: true)
        }
        return try ManagedObjectModel(entities: [car, person, sports])
    }

    struct Fixture {
        let store = TemporaryStore()
        let container: PersistentContainer
        let c: ManagedObjectContext

        init() throws {
            container = try makeContainer(store, model: ConstraintTests.model())
            c = container.newContext(concurrencyType: .confinement)
            _ = try car(c, "AB-12", color: "red", km: 100)
            _ = try person(c, "Ada", "Lovelace", age: 36)
            try c.save()
        }

        @discardableResult
        func car(
            _ c: ManagedObjectContext, _ plate: String, color: String? = nil, km: Int32? = nil, entity: String = "Car"
        )
            throws -> ManagedObject
        {
            let o = try c.insertNewObject(forEntityName: entity)
            try o.setValue(plate, forKey: "plate")
            try o.setValue(color, forKey: "color")
            try o.setValue(km, forKey: "km")
            return o
        }

        @discardableResult
        func person(_ c: ManagedObjectContext, _ first: String, _ last: String, age: Int16? = nil) throws
            -> ManagedObject
        {
            let o = try c.insertNewObject(forEntityName: "Person")
            try o.setValue(first, forKey: "first")
            try o.setValue(last, forKey: "last")
            try o.setValue(age, forKey: "age")
            return o
        }

        func count(_ entity: String) throws -> Int {
            try container.newContext(concurrencyType: .confinement).count(
                for: FetchRequest<ManagedObject>(entityName: entity))
        }

        func storedCar(_ plate: String) throws -> [String: Any?] {
            let check = container.newContext(concurrencyType: .confinement)
            var r = FetchRequest<ManagedObject>(entityName: "Car")
            r.predicate = try FetchPredicate(format: "plate == %@", plate)
            let found = try check.fetch(r)
            #expect(found.count == 1)
            guard let o = found.first else { return [:] }
            return ["color": try o.value(forKey: "color"), "km": try o.value(forKey: "km")]
        }
    }

    @Test func aClashIsAnErrorNamingTheObjectsAndValues() throws {
        let f = try Fixture()
        let dup = try f.car(f.c, "AB-12", color: "blue")
        do {
            try f.c.save()
            Issue.record("the save should have failed")
        } catch let e as LogbookError {
            #expect(e.code == .constraintConflict)
            let c = try #require(e.constraintConflicts.first)
            #expect(c.objectID == dup.objectID)
            #expect(c.keys == ["plate"])
            #expect(c.values["plate"] as? String == "AB-12")
            #expect(c.conflictingObjectIDs.count == 1)
            #expect(!c.isWithinSave)
        }
        #expect(try f.count("Car") == 1)
        // Compound: the same first name with another last name is fine; both is a clash.
        f.c.rollback()
        try f.person(f.c, "Ada", "Byron")
        try f.c.save()
        try f.person(f.c, "Ada", "Byron")
        #expect(throws: LogbookError.self) { try f.c.save() }
        f.c.rollback()
        // Within one save.
        try f.car(f.c, "ZZ-1")
        try f.car(f.c, "ZZ-1")
        #expect {
            try f.c.save()
        } throws: { e in
            (e as? LogbookError)?.constraintConflicts.first?.isWithinSave == true
        }
        f.c.rollback()
        // A sub-entity shares its parent's constraint.
        try f.car(f.c, "AB-12", entity: "SportsCar")
        #expect(throws: LogbookError.self) { try f.c.save() }
        f.c.rollback()
        // Moving the stored value away in the same save frees it.
        let stored = try #require(try f.c.fetch(FetchRequest<ManagedObject>(entityName: "Car")).first)
        try stored.setValue("OLD-1", forKey: "plate")
        try f.car(f.c, "AB-12")
        try f.c.save()
        #expect(try f.count("Car") == 2)
        try f.container.close()
    }

    @Test(arguments: [MergePolicy.mergeByPropertyObjectTrump, .mergeByPropertyStoreTrump, .overwrite, .rollback])
    func anInsertThatClashesBecomesTheStoredObject(policy: MergePolicy) throws {
        let f = try Fixture()
        let other = f.container.newContext(concurrencyType: .confinement)
        other.mergePolicy = policy
        let existingID = try #require(try other.fetch(FetchRequest<ManagedObject>(entityName: "Car")).first).objectID
        let new = try f.car(other, "AB-12", color: "blue")
        try other.save()
        #expect(try f.count("Car") == 1)
        #expect(new.objectID == existingID)  // the inserted object is the stored one now
        let stored = try f.storedCar("AB-12")
        switch policy {
        case .mergeByPropertyObjectTrump:
            #expect(stored["color"] as? String == "blue")
            #expect(stored["km"] as? Int32 == 100)  // not set on the new object: the store's
        case .overwrite:
            #expect(stored["color"] as? String == "blue")
            #expect((stored["km"] ?? nil) == nil)
        case .mergeByPropertyStoreTrump, .rollback:
            #expect(stored["color"] as? String == "red")
            #expect(stored["km"] as? Int32 == 100)
        default: break
        }
        #expect(try new.value(forKey: "color") as? String == stored["color"] as? String)
        try f.container.close()
    }

    @Test func aBatchInsertUpserts() throws {
        let f = try Fixture()
        let insert = BatchInsertRequest(
            entityName: "Car",
            objects: [
                ["plate": "AB-12", "color": "green", "km": Int32(5)], ["plate": "NEW-1", "color": "white"],
                ["plate": "NEW-1", "color": "black"]
            ])
        var request = insert
        request.resultType = .objectIDs
        let result = try f.c.execute(request)
        #expect(result.count == 3)
        #expect(result.objectIDs[1] == result.objectIDs[2])
        #expect(try f.count("Car") == 2)
        #expect(try f.storedCar("AB-12")["color"] as? String == "green")
        #expect(try f.storedCar("NEW-1")["color"] as? String == "black")
        try f.container.close()
    }

    @Test func aNewConstraintOverDuplicatesIsRefusedAtOpen() throws {
        let store = TemporaryStore()
        var loose = try ConstraintTests.model().entities
        loose[0].uniquenessConstraints = []
        var container = try makeContainer(store, model: ManagedObjectModel(entities: loose))
        let c = container.newContext(concurrencyType: .confinement)
        for _ in 0..<2 {
            let o = try c.insertNewObject(forEntityName: "Car")
            try o.setValue("SAME", forKey: "plate")
        }
        try c.save()
        try container.close()
        #expect {
            _ = try makeContainer(store, model: ConstraintTests.model())
        } throws: { e in
            (e as? LogbookError)?.code == .incompatibleModel
        }
        // Without the duplicates, the constraint's index is built and used.
        container = try makeContainer(store, model: ManagedObjectModel(entities: loose))
        let again = container.newContext(concurrencyType: .confinement)
        again.delete(try #require(try again.fetch(FetchRequest<ManagedObject>(entityName: "Car")).first))
        try again.save()
        try container.close()
        container = try makeContainer(store, model: ConstraintTests.model())
        let checked = container.newContext(concurrencyType: .confinement)
        let dup = try checked.insertNewObject(forEntityName: "Car")
        try dup.setValue("SAME", forKey: "plate")
        #expect(throws: LogbookError.self) { try checked.save() }
        try container.close()
    }
}
