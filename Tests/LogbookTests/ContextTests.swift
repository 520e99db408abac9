import Foundation
import LogbookEngine
import LogbookTestSupport
import Testing

@testable import LogbookGraph

@Suite struct ContextTests {
    func person(_ context: ManagedObjectContext, _ first: String, _ last: String = "L", age: Int32? = nil) throws
        -> Person
    {
        let p = try context.insert(Person.self)
        p.firstName = first
        p.lastName = last
        p.age = age
        return p
    }

    @Test func changeTrackingFlagsAndValues() throws {
        let store = TemporaryStore()
        let container = try makeContainer(store)
        let context = container.newContext(concurrencyType: .confinement)
        let p = try person(context, "Ann", age: 30)
        #expect(p.isInserted && !p.isUpdated && p.hasChanges)
        #expect(p.changedValues()["firstName"] as? String == "Ann")
        try context.save()
        #expect(!p.isInserted && !p.hasChanges && p.changedValues().isEmpty)
        p.age = 31
        #expect(p.isUpdated && context.updatedObjects == [p])
        #expect(p.changedValues().count == 1)
        #expect(p.changedValues()["age"] as? Int32 == 31)
        #expect(p.committedValues(forKeys: ["age"])["age"] as? Int32 == 30)
        #expect(p.entity.name == "Person")
        #expect(p.managedObjectContext === context)
        try context.save()
        #expect(p.committedValues(forKeys: ["age"])["age"] as? Int32 == 31)
        try container.close()
    }

    @Test func rollbackForgetsEverythingUnsaved() throws {
        let store = TemporaryStore()
        let container = try makeContainer(store)
        let context = container.newContext(concurrencyType: .confinement)
        let kept = try person(context, "Kept", age: 1)
        try context.save()
        let added = try person(context, "Added")
        kept.age = 99
        let other = try person(context, "Other")
        try context.save()
        context.delete(other)
        kept.firstName = "Changed"
        context.rollback()
        #expect(!context.hasChanges)
        #expect(kept.firstName == "Kept" && kept.age == 99)
        #expect(!other.isDeleted)
        #expect(added.managedObjectContext === context)
        let fresh = try person(context, "Fresh")
        context.rollback()
        #expect(fresh.managedObjectContext == nil, "a rolled-back insert is gone")
        #expect(try context.fetch(FetchRequest<Person>()).count == 3)
        try container.close()
    }

    @Test func anObjectUsedAfterResetIsATypedError() throws {
        let store = TemporaryStore()
        let container = try makeContainer(store)
        let context = container.newContext(concurrencyType: .confinement)
        let p = try person(context, "Gone")
        try context.save()
        context.reset()
        #expect(!context.hasChanges)
        #expect { try p.value(forKey: "firstName") } throws: { e in
            let e = e as? LogbookError
            return e?.code == .objectInvalidated && e?.entity == "Person" && e?.key == "firstName"
        }
        #expect { try p.setValue("x", forKey: "firstName") } throws: {
            ($0 as? LogbookError)?.code == .objectInvalidated
        }
        // The store still has it, and a fetch brings a new, usable object.
        let again = try context.fetch(FetchRequest<Person>())
        #expect(again.count == 1 && again[0] !== p && again[0].firstName == "Gone")
        try container.close()
    }

    @Test func undoAndRedoOfUnsavedChanges() throws {
        let store = TemporaryStore()
        let container = try makeContainer(store)
        let context = container.newContext(concurrencyType: .confinement)
        let history = UndoHistory()
        context.undoHistory = history
        let a = try person(context, "A")
        try context.save()
        #expect(!history.canUndo, "saving clears the history")
        a.firstName = "B"
        a.firstName = "C"
        context.undo()
        #expect(a.firstName == "B")
        context.undo()
        #expect(a.firstName == "A" && !context.hasChanges)
        context.redo()
        #expect(a.firstName == "B")
        // A group is one step; a delete with its effects is one step.
        history.beginUndoGrouping()
        a.firstName = "X"
        a.age = 5
        history.endUndoGrouping()
        context.undo()
        #expect(a.firstName == "B" && a.age == nil)
        context.delete(a)
        #expect(a.isDeleted)
        context.undo()
        #expect(!a.isDeleted)
        // Undoing an insert (grouped with setting its values) removes it; redo brings it back.
        history.beginUndoGrouping()
        let n = try person(context, "New")
        history.endUndoGrouping()
        #expect(context.insertedObjects.contains(n))
        context.undo()
        #expect(context.insertedObjects.isEmpty)
        context.redo()
        #expect(context.insertedObjects.contains(n))
        try context.save()
        #expect(try context.fetch(FetchRequest<Person>()).map(\.firstName).sorted() == ["B", "New"])
        try container.close()
    }

    @Test func relationshipsToTheWrongEntityContextOrStoreAreErrors() throws {
        let store = TemporaryStore()
        let otherStore = TemporaryStore()
        let container = try makeContainer(store)
        let other = try makeContainer(otherStore)
        let context = container.newContext(concurrencyType: .confinement)
        let second = container.newContext(concurrencyType: .confinement)
        let foreign = other.newContext(concurrencyType: .confinement)
        let e = try context.insert(Employee.self)
        let p = try context.insert(Person.self)
        #expect { try e.setValue(p, forKey: "manager") } throws: { err in
            let err = err as? LogbookError
            return err?.code == .invalidRelationship && err?.key == "manager" && "\(err!)".contains("Manager")
        }
        let m2 = try second.insert(Manager.self)
        #expect { try e.setValue(m2, forKey: "manager") } throws: { "\($0)".contains("another context") }
        let m3 = try foreign.insert(Manager.self)
        #expect { try e.setValue(m3, forKey: "manager") } throws: { "\($0)".contains("another store") }
        #expect { try context.existingObject(with: m3.objectID) } throws: {
            ($0 as? LogbookError)?.code == .invalidRelationship
        }
        // Through a typed setter the error waits for save.
        e.manager = m2
        #expect { try context.save() } throws: { ($0 as? LogbookError)?.code == .invalidRelationship }
        try container.close()
        try other.close()
    }

    @Test func aTransformerThatCannotDecodeIsATypedError() throws {
        struct Picky: LogbookGraph.AttributeTransformer {
            struct No: Error {}
            func transformedValue(_ value: Any) throws -> Data { Data((value as? String ?? "").utf8) }
            func reverseTransformedValue(_ data: Data) throws -> Any { throw No() }
        }
        AttributeTransformers.register(Picky(), name: "Picky")
        let model = try ManagedObjectModel {
            EntityDescription("Thing") {
                AttributeDescription("blob", .transformable(transformer: "Picky"), optional: true)
            }
        }
        let store = TemporaryStore()
        let container = try makeContainer(store, model: model)
        let context = container.newContext(concurrencyType: .confinement)
        let t = try context.insertNewObject(forEntityName: "Thing")
        try t.setValue("abc", forKey: "blob")
        #expect { try t.value(forKey: "blob") } throws: { ($0 as? LogbookError)?.code == .transformFailed }
        #expect { try t.setValue("x", forKey: "nothing") } throws: { ($0 as? LogbookError)?.code == .unknownKey }
        try context.save()
        try container.close()
    }

    @Test func objectIDsAreStableSendableAndRoundTripAsURIs() throws {
        let store = TemporaryStore()
        var id: ObjectID
        var uri: URL
        do {
            let container = try makeContainer(store)
            let context = container.newContext(concurrencyType: .confinement)
            let p = try person(context, "Ann")
            id = p.objectID
            try context.save()
            uri = id.uriRepresentation
            #expect(uri.scheme == "x-logbook")
            #expect(container.objectID(forURIRepresentation: uri) == id)
            #expect(Set([id, id]).count == 1)
            try container.close()
        }
        let container = try makeContainer(store)
        let back = try #require(
            container.objectID(forURIRepresentation: uri), "the URI names the object after a relaunch")
        let context = container.newContext(concurrencyType: .confinement)
        #expect((try context.existingObject(with: back) as? Person)?.firstName == "Ann")
        #expect(
            container.objectID(
                forURIRepresentation: URL(string: "x-logbook://00000000-0000-0000-0000-000000000000/Person/p1")!) == nil
        )
        // Serial numbers are never reused, even when the last object is deleted.
        context.delete(try context.existingObject(with: back))
        try context.save()
        let next = try person(context, "Next")
        #expect(next.objectID.serial > back.serial)
        try container.close()
    }

    @Test func backgroundContextsHandIDsToTheMainContextAndSavesMerge() async throws {
        let store = TemporaryStore()
        let container = try makeContainer(store)
        let view = container.viewContext
        let existing: ObjectID = try await view.perform {
            let p = try view.insert(Person.self)
            p.firstName = "Main"
            p.lastName = "Thread"
            try view.save()
            return p.objectID
        }
        let background = container.newBackgroundContext()
        let ids: [ObjectID] = try await background.perform {
            for i in 0..<10 {
                let p = try background.insert(Person.self)
                p.firstName = "BG \(i)"
                p.lastName = "Queue"
                p.age = Int32(i)
            }
            let mine = try background.existingObject(with: existing) as! Person
            mine.age = 77
            try background.save()
            return try background.fetch(FetchRequest<Person>()).map(\.objectID)
        }
        #expect(ids.count == 11)
        // The view context merges the save on its queue: its registered object sees the new age.
        let (names, age): ([String], Int32?) = try await view.perform {
            let objects = try ids.map { try view.object(with: $0) as! Person }
            let main = try view.existingObject(with: existing) as! Person
            return (objects.map(\.firstName), main.age)
        }
        #expect(names.filter { $0.hasPrefix("BG") }.count == 10)
        #expect(age == 77)
        // A deletion in the background marks the main context's object deleted.
        try await background.perform {
            background.delete(try background.existingObject(with: existing))
            try background.save()
        }
        let deleted: Bool = try await view.perform { (try? view.existingObject(with: existing)) == nil }
        #expect(deleted)
        try container.close()
    }
}

@Suite struct QueueTests {
    @Test func performAndWaitRunsOnThePrivateQueueAndReturns() throws {
        let store = TemporaryStore()
        let container = try makeContainer(store)
        let background = container.newBackgroundContext()
        #expect(background.concurrencyType == .privateQueue)
        let count = try background.performAndWait {
            #expect(background.isOnQueue)
            for i in 0..<5 {
                let p = try background.insert(Person.self)
                p.firstName = "P\(i)"
                p.lastName = "Q"
            }
            try background.save()
            // Nested: runs inline instead of deadlocking.
            return try background.performAndWait { try background.fetch(FetchRequest<Person>()).count }
        }
        #expect(count == 5)
        #expect(!background.isOnQueue)
        try container.close()
    }
}

extension QueueTests {
    /// After a large save the objects only the context held are freed on another thread; the
    /// ones the caller still holds must not be among them: when the caller lets them go, they
    /// leave the context's registry then, on its own queue (their release on the other thread
    /// raced the context's queue, and crashed a benchmark run).
    @Test func objectsHeldElsewhereAreReleasedOnTheContextsQueueAfterALargeSave() throws {
        let store = TemporaryStore()
        let container = try makeContainer(store)
        let context = container.newContext(concurrencyType: .confinement)
        for round in 0..<2 {
            var kept: [Person] = []
            for i in 0..<60_000 {
                let p = try context.insert(Person.self)
                p.firstName = "P\(round)-\(i)"
                p.lastName = "Q"
                if i % 10 == 0 { kept.append(p) }
            }
            try context.save()
            // Let go at once, while the other thread may still be freeing the rest.
            kept = []
            #expect(context.registeredObjects.isEmpty)
            context.reset()
            #expect(try context.count(for: FetchRequest<Person>()) == 60_000 * (round + 1))
        }
        try container.close()
    }
}

@Suite struct RegistryTableTests {
    @Test func pagedAndOverflowKeysBehaveAlike() throws {
        let store = TemporaryStore()
        let container = try makeContainer(store)
        let context = container.newContext(concurrencyType: .confinement)
        let a = try context.insert(Person.self)
        let b = try context.insert(Person.self)
        var table = RegistryTable()
        let small: UInt64 = 1 << 48 | 5
        let huge: UInt64 = 1 << 48 | (1 << 40)
        table[small] = Unmanaged.passUnretained(a)
        table[huge] = Unmanaged.passUnretained(b)
        #expect(table.count == 2)
        #expect(table[small]?.takeUnretainedValue() === a)
        #expect(table[huge]?.takeUnretainedValue() === b)
        #expect(table[1 << 48 | 6] == nil && table[2 << 48 | 5] == nil)
        #expect(
            Set(table.all().map { ObjectIdentifier($0.takeUnretainedValue()) }) == [
                ObjectIdentifier(a), ObjectIdentifier(b)
            ])
        table.removeValue(forKey: small)
        table[huge] = nil
        #expect(table.isEmpty && table[small] == nil && table[huge] == nil)
        table[huge] = nil
        #expect(table.count == 0)
        try container.close()
    }
}
