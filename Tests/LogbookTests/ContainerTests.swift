import Foundation
import LogbookEngine
import LogbookTestSupport
import Testing

@testable import LogbookGraph

@Suite struct ContainerTests {
    func v1() throws -> ManagedObjectModel {
        try ManagedObjectModel {
            EntityDescription("Note") {
                AttributeDescription("title", .string)
                AttributeDescription("body", .string, optional: true)
                AttributeDescription("stars", .int16, optional: true)
            }
        }
    }

    func fill(_ container: PersistentContainer) throws {
        let context = container.newContext(concurrencyType: .confinement)
        for i in 0..<20 {
            let n = try context.insertNewObject(forEntityName: "Note")
            try n.setValue("note \(i)", forKey: "title")
            try n.setValue("body \(i)", forKey: "body")
            try n.setValue(i % 5, forKey: "stars")
        }
        try context.save()
    }

    @Test func theStoreRecordsItsSchema() throws {
        let store = TemporaryStore()
        let container = try makeContainer(store, model: try v1())
        try fill(container)
        try container.close()
        // Without the app's model: the engine alone reads the schema the store describes itself with.
        var options = StoreOptions()
        options.readOnly = true
        let engine = try Store.open(at: store.path, options: options)
        let schema = try StoredSchema.decode(try #require(try engine.snapshot().value(forKey: StoredSchema.schemaKey)))
        #expect(schema.entities.map(\.name) == ["Note"])
        #expect(schema.entities[0].attributes.map(\.name) == ["title", "body", "stars"])
        #expect(schema.entities[0].attributes.map(\.type) == ["String", "String", "Integer 16"])
    }

    @Test func lightweightChangesMigrateAutomatically() throws {
        let store = TemporaryStore()
        do {
            let c = try makeContainer(store, model: try v1())
            try fill(c)
            try c.close()
        }
        // v2: an attribute added (with a default), one removed, one renamed, an index added,
        // and a new entity.
        let v2 = try ManagedObjectModel {
            EntityDescription("Note") {
                AttributeDescription("heading", .string, renamedFrom: "title")
                AttributeDescription("stars", .int16, optional: true, indexed: true)
                AttributeDescription("archived", .bool, default: false)
            }
            EntityDescription("Tag") { AttributeDescription("name", .string) }
        }
        let c = try makeContainer(store, model: v2)
        let context = c.newContext(concurrencyType: .confinement)
        var request = FetchRequest<ManagedObject>(entityName: "Note")
        request.sortDescriptors = [FetchSortDescriptor(key: "heading")]
        let notes = try context.fetch(request)
        #expect(notes.count == 20)
        #expect(try notes[0].value(forKey: "heading") as? String == "note 0")
        #expect(try notes[0].value(forKey: "archived") as? Bool == false)
        let three = try #require(try notes.first { try $0.value(forKey: "heading") as? String == "note 3" })
        #expect(try three.value(forKey: "stars") as? Int16 == 3)
        #expect { try notes[0].value(forKey: "body") } throws: { ($0 as? LogbookError)?.code == .unknownKey }
        // The new index holds every note.
        let stars = c.storeLayout.slotIndex[0][1]!
        #expect(try c.store.snapshot().indexCount(index: stars) == 20)
        let tag = try context.insertNewObject(forEntityName: "Tag")
        try tag.setValue("new entity", forKey: "name")
        try context.save()
        try c.close()
        // And the migrated store reopens as is.
        let again = try makeContainer(store, model: v2)
        let c3 = again.newContext(concurrencyType: .confinement)
        #expect(try c3.fetch(FetchRequest<ManagedObject>(entityName: "Tag")).count == 1)
        try again.close()
    }

    @Test func anIncompatibleModelIsAClearError() throws {
        let store = TemporaryStore()
        do {
            let c = try makeContainer(store, model: try v1())
            try fill(c)
            try c.close()
        }
        let changedType = try ManagedObjectModel {
            EntityDescription("Note") {
                AttributeDescription("title", .int64)
                AttributeDescription("body", .string, optional: true)
                AttributeDescription("stars", .int16, optional: true)
            }
        }
        #expect { try makeContainer(store, model: changedType) } throws: { e in
            let e = e as? LogbookError
            return e?.code == .incompatibleModel && e?.key == "title" && "\(e!)".contains("changed type")
        }
        let requiredWithoutDefault = try ManagedObjectModel {
            EntityDescription("Note") {
                AttributeDescription("title", .string)
                AttributeDescription("body", .string, optional: true)
                AttributeDescription("stars", .int16, optional: true)
                AttributeDescription("author", .string)
            }
        }
        #expect { try makeContainer(store, model: requiredWithoutDefault) } throws: { "\($0)".contains("author") }
        // The refused opens changed nothing.
        let c = try makeContainer(store, model: try v1())
        #expect(
            try c.newContext(concurrencyType: .confinement).count(for: FetchRequest<ManagedObject>(entityName: "Note"))
                == 20)
        try c.close()
    }

    /// A second container on a store open in this process shares it: one engine store, one
    /// save lock, one sequence of serial numbers, and each container's contexts merge the
    /// other's saves. The store closes with the last container.
    @Test func aSecondContainerOnTheSameStoreSharesIt() throws {
        let store = TemporaryStore()
        let first = try makeContainer(store)
        let second = try makeContainer(store)
        #expect(first.store === second.store)
        let a = first.newContext(concurrencyType: .privateQueue)
        let b = second.newContext(concurrencyType: .privateQueue)
        b.automaticallyMergesChangesFromOtherContexts = true
        let idA = try a.performAndWait {
            let p = try a.insert(Manager.self)
            p.firstName = "Ada"
            p.lastName = "L"
            try a.save()
            return p.objectID
        }
        let seen = try b.performAndWait { try b.existingObject(with: idA) as! Manager }
        #expect(b.performAndWait { seen.lastName } == "L")
        // A save in the first container reaches the second's context (it merges automatically).
        try a.performAndWait {
            (try a.existingObject(with: idA) as! Manager).lastName = "Lovelace"
            try a.save()
        }
        b.performAndWait {}
        #expect(b.performAndWait { seen.lastName } == "Lovelace")
        // Objects inserted in both get distinct serial numbers.
        let ids = try [a, b].map { c in
            try c.performAndWait {
                let m = try c.insert(Manager.self)
                m.firstName = "M"
                m.lastName = "M"
                try c.save()
                return m.objectID
            }
        }
        #expect(Set(ids + [idA]).count == 3)
        // Closing the first leaves the second working; the last close closes the store.
        try first.close()
        try b.performAndWait {
            #expect(try b.count(for: FetchRequest<Manager>()) == 3)
            let m = try b.insert(Manager.self)
            m.firstName = "After"
            m.lastName = "Close"
            try b.save()
        }
        try second.close()
        let again = try makeContainer(store)
        #expect(try again.newContext(concurrencyType: .confinement).count(for: FetchRequest<Manager>()) == 4)
        // Another model, or other options, on a store open here: a clear error.
        let other = try ManagedObjectModel { EntityDescription("Other") { AttributeDescription("x", .string) } }
        #expect { try makeContainer(store, model: other) } throws: { e in
            (e as? LogbookError)?.code == .incompatibleModel
        }
        #expect { try makeContainer(store, durability: .normal) } throws: { e in
            (e as? LogbookError)?.code == .invalidArgument
        }
        try again.close()
    }

    @Test func toManyChangesAreWrittenAsDeltas() throws {
        let store = TemporaryStore()
        let container = try makeContainer(store)
        let context = container.newContext(concurrencyType: .confinement)
        let m = try context.insert(Manager.self)
        m.firstName = "M"
        m.lastName = "M"
        var employees: [Employee] = []
        for i in 0..<2000 {
            let e = try context.insert(Employee.self)
            e.firstName = "E\(i)"
            e.lastName = "E"
            employees.append(e)
        }
        try m.add(employees, toRelationship: "employees")
        try context.save()
        let before = container.store.statistics().totalBytes
        let extra = try context.insert(Employee.self)
        extra.firstName = "late"
        extra.lastName = "E"
        try m.add(extra, toRelationship: "employees")
        try context.save()
        let written = container.store.statistics().totalBytes - before
        // One new member: a small delta, not the 2,000 members again.
        #expect(written < 200, "adding one member wrote \(written) bytes")
        #expect(m.employees.count == 2001)
        // The set is encoded sorted and delta-compressed: about a byte or two per member.
        let setKey = container.storeLayout.setKey(entity: 1, relationship: 0, owner: m.objectID.key)
        #expect(container.store.snapshot().memberCount(ofSet: setKey) == 2001)
        try container.close()
    }
}
