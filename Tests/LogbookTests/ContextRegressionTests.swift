import Foundation
import LogbookEngine
import LogbookTestSupport
import Testing

@testable import Logbook

/// The defects the context checker (`ContextModelCheckTests`) and the contexts issue found,
/// each as the steps that showed it, with the public API only.
@Suite struct ContextRegressionTests {
    /// A container of the checker's model, and two contexts that do not merge.
    struct Fixture {
        let store = TemporaryStore()
        let container: PersistentContainer
        init() throws {
            try FileManager.default.createDirectory(atPath: store.directory, withIntermediateDirectories: true)
            container = try PersistentContainer(name: "Check", model: CheckedModel.make(), directory: store.path)
        }
        func context(_ policy: MergePolicy = .error) -> ManagedObjectContext {
            let c = container.newContext(concurrencyType: .confinement)
            c.mergePolicy = policy
            return c
        }
    }

    /// Another context deletes a folder after an item was put in it: the deletion's save takes
    /// the item out of the folder in the store too, though this context never read the item.
    @Test func deletingAnObjectUnlinksWhatAnotherSaveLinkedToIt() throws {
        // Checker seed 131: C2 saves a folder, C1 puts a new item in it and saves, C2 deletes
        // the folder and saves. The store's item pointed at the deleted folder.
        let f = try Fixture()
        let c1 = f.context(.mergeByPropertyObjectTrump)
        let c2 = f.context(.mergeByPropertyStoreTrump)
        let folder = try c2.insertNewObject(forEntityName: "Folder")
        try folder.setValue("a", forKey: "name")
        let item = try c1.insertNewObject(forEntityName: "Item")
        try item.setValue("a", forKey: "name")
        try c2.save()
        try c1.existingObject(with: folder.objectID).insert(item, at: 0, inRelationship: "items")
        try c1.save()
        c2.delete(folder)
        try c2.save()
        let check = f.context()
        let stored = try check.existingObject(with: item.objectID)
        #expect(try stored.value(forKey: "folder") == nil)
    }

    // MARK: The cases of the contexts issue, each with Core Data's default settings

    /// Two contexts of the document model (Manager, Employee) that merge automatically.
    struct Staff {
        let store = TemporaryStore()
        let container: PersistentContainer
        init() throws { container = try makeContainer(store) }
        func context(_ type: ManagedObjectContext.ConcurrencyType = .privateQueue) -> ManagedObjectContext {
            container.newContext(concurrencyType: type)
        }
        func reader() -> ManagedObjectContext { container.newContext(concurrencyType: .confinement) }
    }

    /// Case 1: A renames; B sets `done`-like age and saves; A merges, undoes, renames again and
    /// saves: B's saved change stays (undo reverts A's own changes, property by property).
    @Test func undoAfterAMergeNeverRevertsTheMergedValues() throws {
        let f = try Staff()
        let setup = f.reader()
        let p = try setup.insert(Person.self)
        p.firstName = "Ada"
        p.lastName = "Lovelace"
        p.age = 36
        try setup.save()
        let a = f.context(.confinement)
        a.undoHistory = UndoHistory()
        let b = f.context(.confinement)
        let mine = try a.existingObject(with: p.objectID) as! Person
        mine.firstName = "Augusta"
        var saved: ContextChanges?
        let observation = b.observeEvents { if case .didSave(let c) = $0 { saved = c } }
        (try b.existingObject(with: p.objectID) as! Person).age = 37
        try b.save()
        observation.cancel()
        a.mergeChanges(try #require(saved))
        #expect(mine.age == 37)
        a.undo()
        #expect(mine.firstName == "Ada")
        #expect(mine.age == 37, "undo reverts only what this context changed")
        mine.firstName = "Countess"
        try a.save()
        let stored = try f.reader().existingObject(with: p.objectID) as! Person
        #expect(stored.firstName == "Countess")
        #expect(stored.age == 37, "B's saved change is kept")
    }

    /// Case 2: a to-one change and a sibling's save of another value for it, merged
    /// automatically, then saved under `.error`: a conflict, and the inverse sets never hold
    /// the employee twice.
    @Test func aMergedToOneChangeKeepsBothInversesConsistent() throws {
        let f = try Staff()
        let setup = f.reader()
        let m1 = try setup.insert(Manager.self)
        let m2 = try setup.insert(Manager.self)
        let m3 = try setup.insert(Manager.self)
        for (m, name) in [(m1, "M1"), (m2, "M2"), (m3, "M3")] {
            m.firstName = name
            m.lastName = name
        }
        let emp = try setup.insert(Employee.self)
        emp.firstName = "E"
        emp.lastName = "E"
        emp.manager = m1
        try setup.save()
        let a = f.context()
        let b = f.context()
        try a.performAndWait {
            let e = try a.existingObject(with: emp.objectID) as! Employee
            e.manager = (try a.existingObject(with: m2.objectID) as! Manager)
        }
        try b.performAndWait {
            let e = try b.existingObject(with: emp.objectID) as! Employee
            e.manager = (try b.existingObject(with: m3.objectID) as! Manager)
            try b.save()
        }
        a.performAndWait {}  // the automatic merge
        let outcome = a.performAndWait { Result { try a.save() } }
        let check = f.reader()
        let e = try check.existingObject(with: emp.objectID) as! Employee
        let holders = try [m1, m2, m3].filter { m in
            try check.existingObject(with: m.objectID).objects(forKey: "reports").contains {
                $0.objectID == emp.objectID
            }
        }
        #expect(holders.count == 1, "exactly one manager's reports hold the employee")
        #expect(holders.first?.objectID == e.manager?.objectID)
        if case .failure(let error) = outcome {
            #expect((error as? LogbookError)?.code == .mergeConflict)
        }
    }

    /// Case 4: B deletes a department (a manager here) and saves; A, not merging, links an
    /// employee to it and saves under `.error`: a conflict, never a dangling reference.
    @Test func aLinkToAnObjectAnotherSaveDeletedIsAConflict() throws {
        let f = try Staff()
        let setup = f.reader()
        let m = try setup.insert(Manager.self)
        m.firstName = "M"
        m.lastName = "M"
        let emp = try setup.insert(Employee.self)
        emp.firstName = "E"
        emp.lastName = "E"
        try setup.save()
        let a = f.context(.confinement)
        let b = f.context(.confinement)
        let e = try a.existingObject(with: emp.objectID) as! Employee
        let manager = try a.existingObject(with: m.objectID) as! Manager
        b.delete(try b.existingObject(with: m.objectID))
        try b.save()
        e.manager = manager
        #expect(throws: LogbookError.self) { try a.save() }
        do { try a.save() } catch let error as LogbookError { #expect(error.code == .mergeConflict) }
        let stored = try f.reader().existingObject(with: emp.objectID) as! Employee
        #expect(stored.manager == nil)
        // Under a policy that resolves it, the link is dropped and the rest is saved.
        a.mergePolicy = .mergeByPropertyObjectTrump
        e.firstName = "Eve"
        try a.save()
        let after = try f.reader().existingObject(with: emp.objectID) as! Employee
        #expect(after.manager == nil && after.firstName == "Eve")
    }

    /// Case 8: two new objects with the same constrained value in one save, under a policy
    /// that resolves conflicts, become one (Core Data's in-memory constraint conflict).
    @Test func constrainedDuplicatesOfOneSaveBecomeOneUnderTrumpPolicies() throws {
        let f = try Fixture()
        let c = f.context(.mergeByPropertyObjectTrump)
        let first = try c.insertNewObject(forEntityName: "Tag")
        try first.setValue("x", forKey: "code")
        let item = try c.insertNewObject(forEntityName: "Item")
        try item.setValue("i", forKey: "name")
        let second = try c.insertNewObject(forEntityName: "Tag")
        try second.setValue("x", forKey: "code")
        try item.add(second, toRelationship: "tags")
        try c.save()
        var request = FetchRequest<ManagedObject>(entityName: "Tag")
        request.predicate = try FetchPredicate(format: "code == 'x'")
        let check = f.context()
        let tags = try check.fetch(request)
        #expect(tags.count == 1)
        let storedItem = try check.existingObject(with: item.objectID)
        #expect(try storedItem.objects(forKey: "tags").map(\.objectID) == tags.map(\.objectID))
        // Under `.error` it is still a conflict.
        let strict = f.context(.error)
        for _ in 0..<2 { try strict.insertNewObject(forEntityName: "Tag").setValue("y", forKey: "code") }
        #expect(throws: LogbookError.self) { try strict.save() }
    }

    /// A refresh that drops an object's changes drops the other side of its relationship
    /// changes too (checker seed 1056).
    @Test func refreshingWithoutMergingDropsBothSidesOfALink() throws {
        let f = try Fixture()
        let c = f.context()
        let folder = try c.insertNewObject(forEntityName: "Folder")
        try folder.setValue("f", forKey: "name")
        let item = try c.insertNewObject(forEntityName: "Item")
        try item.setValue("i", forKey: "name")
        try c.save()
        try folder.insert(item, at: 0, inRelationship: "items")
        c.refresh(item, mergeChanges: false)
        #expect(try folder.objects(forKey: "items").isEmpty)
        try c.save()
        let check = f.context()
        #expect(try check.existingObject(with: folder.objectID).objects(forKey: "items").isEmpty)
        #expect(try check.existingObject(with: item.objectID).value(forKey: "folder") == nil)
    }
}
