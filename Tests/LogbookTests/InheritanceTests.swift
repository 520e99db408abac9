import Foundation
import LogbookEngine
import LogbookTestSupport
import Testing

@testable import LogbookGraph

/// Entity inheritance: three levels, an abstract root, fetches across sub-entities with
/// indexes, relationships to a parent entity.
@Suite struct InheritanceTests {
    /// Vehicle (abstract: wheels indexed, owner) ← Car (plate) ← SportsCar (topSpeed);
    /// Vehicle ← Bike; Garage holds vehicles (to-many, inverse `garage`) and a favourite (to-one).
    static func model() throws -> ManagedObjectModel {
        try ManagedObjectModel {
            EntityDescription("Vehicle", abstract: true) {
                AttributeDescription("name", .string)
                AttributeDescription("wheels", .int16, indexed: true)
                RelationshipDescription("garage", to: "Garage", inverse: "vehicles")
            }
            EntityDescription("Car", parent: "Vehicle") {
                AttributeDescription("plate", .string, optional: true)
            }
            EntityDescription("SportsCar", parent: "Car") {
                AttributeDescription("topSpeed", .int32, rules: [.range(0...500)])
            }
            EntityDescription("Bike", parent: "Vehicle") {
                AttributeDescription("gears", .int16, default: 1)
            }
            EntityDescription("Garage") {
                AttributeDescription("city", .string)
                RelationshipDescription("vehicles", to: "Vehicle", inverse: "garage", toMany: true)
                RelationshipDescription("favourite", to: "Vehicle", inverse: nil)
            }
        }
    }

    func fill(_ c: ManagedObjectContext) throws -> (garage: ManagedObject, objects: [String: ManagedObject]) {
        let garage = try c.insertNewObject(forEntityName: "Garage")
        try garage.setValue("Delft", forKey: "city")
        var objects: [String: ManagedObject] = [:]
        for (entity, name, wheels) in [
            ("Car", "sedan", 4), ("SportsCar", "racer", 4), ("Bike", "bmx", 2), ("Car", "van", 6),
            ("SportsCar", "kart", 4)
        ] {
            let o = try c.insertNewObject(forEntityName: entity)
            try o.setValue(name, forKey: "name")
            try o.setValue(Int16(wheels), forKey: "wheels")
            if entity == "SportsCar" { try o.setValue(Int32(300), forKey: "topSpeed") }
            try o.setValue(garage, forKey: "garage")
            objects[name] = o
        }
        try garage.setValue(objects["racer"], forKey: "favourite")
        return (garage, objects)
    }

    /// A container on `store` whose context has `fill`'s objects saved.
    func savedTree(_ store: TemporaryStore) throws -> (
        container: PersistentContainer, context: ManagedObjectContext, garage: ManagedObject,
        objects: [String: ManagedObject]
    ) {
        let container = try makeContainer(store, model: Self.model())
        let context = container.newContext(concurrencyType: .confinement)
        let (garage, objects) = try fill(context)
        try context.save()
        return (container, context, garage, objects)
    }

    func names(_ objects: [ManagedObject]) throws -> [String] {
        try objects.map { try $0.value(forKey: "name") as! String }
    }

    @Test func theModelFlattensInheritedPropertiesAndRefusesCycles() throws {
        let model = try Self.model()
        let sports = try #require(model.allProperties(of: "SportsCar"))
        #expect(sports.attributes.map(\.name) == ["name", "wheels", "plate", "topSpeed"])
        #expect(sports.relationships.map(\.name) == ["garage"])
        #expect(model[entity: "SportsCar"]?.attributes.map(\.name) == ["topSpeed"])
        #expect(model.subentities(of: "Vehicle") == ["Car", "SportsCar", "Bike"])
        #expect(model.subentities(of: "Car") == ["SportsCar"])
        #expect(throws: LogbookError.self) {
            try ManagedObjectModel {
                EntityDescription("A", parent: "B") { AttributeDescription("x", .string) }
                EntityDescription("B", parent: "A") { AttributeDescription("y", .string) }
            }
        }
        #expect(throws: LogbookError.self) {
            try ManagedObjectModel { EntityDescription("A", parent: "Missing") { AttributeDescription("x", .string) } }
        }
    }

    @Test func fetchingAParentReturnsEverySubEntitySortedFilteredAndCounted() throws {
        let store = TemporaryStore()
        let container = try makeContainer(store, model: Self.model())
        let c = container.newContext(concurrencyType: .confinement)
        _ = try fill(c)
        // An abstract entity cannot be instantiated.
        #expect(throws: LogbookError.self) { try c.insertNewObject(forEntityName: "Vehicle") }
        for saved in [false, true] {
            if saved { try c.save() }
            var all = FetchRequest<ManagedObject>(entityName: "Vehicle")
            all.sortDescriptors = [FetchSortDescriptor(key: "name")]
            #expect(try names(c.fetch(all)) == ["bmx", "kart", "racer", "sedan", "van"], "saved: \(saved)")
            #expect(try c.count(for: all) == 5)
            var cars = FetchRequest<ManagedObject>(entityName: "Car")
            cars.sortDescriptors = [FetchSortDescriptor(key: "name", ascending: false)]
            #expect(try names(c.fetch(cars)) == ["van", "sedan", "racer", "kart"])
            cars.includesSubentities = false
            #expect(try names(c.fetch(cars)) == ["van", "sedan"])
            #expect(try c.count(for: cars) == 2)
            // An indexed inherited attribute, across the tree, with a limit.
            var four = FetchRequest<ManagedObject>(entityName: "Vehicle")
            four.predicate = try FetchPredicate(format: "wheels == 4")
            four.sortDescriptors = [FetchSortDescriptor(key: "name")]
            four.fetchLimit = 2
            #expect(try names(c.fetch(four)) == ["kart", "racer"])
            four.fetchLimit = 0
            #expect(try c.count(for: four) == 3)
            var fourCars = FetchRequest<ManagedObject>(entityName: "SportsCar")
            fourCars.predicate = try FetchPredicate(format: "wheels == 4 AND topSpeed > 100")
            #expect(try c.count(for: fourCars) == 2)
            let bikes = try c.fetch(FetchRequest<ManagedObject>(entityName: "Bike"))
            #expect(try bikes.first?.value(forKey: "gears") as? Int16 == 1)
            #expect(bikes.first?.entity.name == "Bike")
        }
        try container.close()
    }

    @Test func relationshipsToAParentHoldAnySubEntityAcrossAReopen() throws {
        let store = TemporaryStore()
        var container = try makeContainer(store, model: Self.model())
        var c = container.newContext(concurrencyType: .confinement)
        let (garage, objects) = try fill(c)
        try c.save()
        let garageID = garage.objectID
        let racerID = try #require(objects["racer"]).objectID
        try container.close()
        container = try makeContainer(store, model: Self.model())
        c = container.newContext(concurrencyType: .confinement)
        let g = try c.existingObject(with: garageID)
        let members = try g.objects(forKey: "vehicles")
        #expect(Set(members.map(\.entity.name)) == ["Car", "SportsCar", "Bike"])
        #expect(
            try Set(members.map { try $0.value(forKey: "name") as! String }) == ["sedan", "racer", "bmx", "van", "kart"]
        )
        // A to-one to the parent entity keeps the sub-entity object it pointed to.
        let favourite = try #require(try g.value(forKey: "favourite") as? ManagedObject)
        #expect(favourite.objectID == racerID)
        #expect(favourite.entity.name == "SportsCar")
        #expect(try favourite.value(forKey: "topSpeed") as? Int32 == 300)
        // The inverse of an inherited relationship, kept on both sides.
        let bmx = try #require(members.first { (try? $0.value(forKey: "name") as? String) == "bmx" })
        #expect((try bmx.value(forKey: "garage") as? ManagedObject)?.objectID == garageID)
        let other = try c.insertNewObject(forEntityName: "Garage")
        try other.setValue("Leiden", forKey: "city")
        try bmx.setValue(other, forKey: "garage")
        #expect(try g.count(forKey: "vehicles") == 4)
        #expect(try other.count(forKey: "vehicles") == 1)
        try c.save()
        // A relationship to a parent refuses unrelated entities.
        #expect(throws: LogbookError.self) { try g.setValue(other, forKey: "favourite") }
        // Serial numbers are unique across the tree (a car and a bike never share one).
        let serials = members.map(\.objectID.serial)
        #expect(Set(serials).count == serials.count)
        // Validation inherited and own: a sports car too fast.
        let fast = try c.insertNewObject(forEntityName: "SportsCar")
        try fast.setValue("rocket", forKey: "name")
        try fast.setValue(Int16(4), forKey: "wheels")
        try fast.setValue(Int32(900), forKey: "topSpeed")
        #expect(throws: LogbookError.self) { try c.save() }
        try container.close()
    }

    @Test func theModelRecordedInTheStoreKeepsTheTree() throws {
        let store = TemporaryStore()
        let (container, _, garage, _) = try savedTree(store)
        let id = garage.objectID
        try container.close()
        // A tool without the app's model reads the store through the schema it records.
        let recorded = try ManagedObjectModel(recordedIn: store.path)
        #expect(recorded[entity: "SportsCar"]?.parentEntity == "Car")
        #expect(recorded[entity: "Vehicle"]?.isAbstract == true)
        #expect(recorded[entity: "SportsCar"]?.attributes.map(\.name) == ["topSpeed"])
        #expect(
            recorded.allProperties(of: "SportsCar")?.attributes.map(\.name) == ["name", "wheels", "plate", "topSpeed"])
        let generic = try makeContainer(store, model: recorded)
        let reader = generic.newContext(concurrencyType: .confinement)
        let g = try reader.existingObject(with: id)
        let favourite = try #require(try g.value(forKey: "favourite") as? ManagedObject)
        #expect(favourite.entity.name == "SportsCar")
        #expect(try favourite.value(forKey: "name") as? String == "racer")
        try generic.close()
    }

    /// A batch update of the whole tree without a predicate: each entity's records are
    /// spliced in turn, and the result names every object of every entity once.
    @Test func batchUpdateOfEveryEntityInTheTree() throws {
        let store = TemporaryStore()
        let (container, c, _, objects) = try savedTree(store)
        var update = BatchUpdateRequest(entityName: "Vehicle")
        update.propertiesToUpdate = ["name": "renamed"]
        update.resultType = .objectIDs
        let result = try c.execute(update)
        #expect(result.count == 5)
        #expect(Set(result.objectIDs) == Set(objects.values.map(\.objectID)))
        #expect(result.objectIDs.count == 5)
        let check = container.newContext(concurrencyType: .confinement)
        let all = try check.fetch(FetchRequest<ManagedObject>(entityName: "Vehicle"))
        #expect(try names(all) == Array(repeating: "renamed", count: 5))
    }

    @Test func batchUpdateAndDeleteRulesAcrossTheTree() throws {
        let store = TemporaryStore()
        let (container, c, garage, objects) = try savedTree(store)
        var update = BatchUpdateRequest(entityName: "Car")
        update.predicate = try FetchPredicate(format: "wheels == 4")
        update.propertiesToUpdate = ["plate": "NL"]
        #expect(try c.execute(update).count == 3)  // sedan, racer, kart
        let check = container.newContext(concurrencyType: .confinement)
        var plated = FetchRequest<ManagedObject>(entityName: "Car")
        plated.predicate = try FetchPredicate(format: "plate == 'NL'")
        plated.sortDescriptors = [FetchSortDescriptor(key: "name")]
        #expect(try names(check.fetch(plated)) == ["kart", "racer", "sedan"])
        // A key the fetched entity lacks is an error naming that entity (not a sub-entity).
        plated.entityName = "Vehicle"
        #expect {
            try check.fetch(plated)
        } throws: { e in
            (e as? LogbookError)?.code == .invalidPredicate && "\(e)".contains("Vehicle")
        }
        // Deleting a sports car nullifies the garage's inverse set.
        c.delete(try #require(objects["kart"]))
        try c.save()
        #expect(try garage.count(forKey: "vehicles") == 4)
        try container.close()
    }
}
