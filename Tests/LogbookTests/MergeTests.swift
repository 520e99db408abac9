import Foundation
import LogbookEngine
import LogbookTestSupport
import Testing

@testable import LogbookGraph

/// Two contexts editing the same objects: merges keep both sides, saves detect conflicts,
/// and each merge policy resolves them as Core Data documents.
@Suite struct MergeTests {
    /// A store with one person saved (Ada Lovelace, 36) and two confined contexts on it.
    struct Fixture {
        let store = TemporaryStore()
        let container: PersistentContainer
        let a: ManagedObjectContext
        let b: ManagedObjectContext
        let id: ObjectID

        init() throws {
            container = try makeContainer(store)
            let setup = container.newContext(concurrencyType: .confinement)
            let p = try setup.insert(Person.self)
            p.firstName = "Ada"
            p.lastName = "Lovelace"
            p.age = 36
            try setup.save()
            id = p.objectID
            a = container.newContext(concurrencyType: .confinement)
            b = container.newContext(concurrencyType: .confinement)
        }

        /// What the store holds for the person, read by a new context.
        func stored() throws -> (first: String, last: String, age: Int32?)? {
            let c = container.newContext(concurrencyType: .confinement)
            guard let p = try? c.existingObject(with: id) as? Person else { return nil }
            return (p.firstName, p.lastName, p.age)
        }

        func person(_ c: ManagedObjectContext) throws -> Person { try c.existingObject(with: id) as! Person }
    }

    @Test func aMergedSaveKeepsTheLocalEditAndTheOtherSidesValue() throws {
        // The issue's scenario: A renames (unsaved), B saves another change, A merges B's save
        // and then saves its rename. Both changes are in the store.
        let f = try Fixture()
        let mine = try f.person(f.a)
        mine.firstName = "Augusta"
        let theirs = try f.person(f.b)
        var saved: ContextChanges?
        let observation = f.b.observeEvents { if case .didSave(let c) = $0 { saved = c } }
        theirs.age = 37
        try f.b.save()
        observation.cancel()
        f.a.mergeChanges(fromContextDidSave: try #require(saved))
        #expect(mine.age == 37)
        #expect(mine.firstName == "Augusta")
        #expect(mine.isUpdated)
        try f.a.save()
        let s = try #require(try f.stored())
        #expect(s.first == "Augusta")
        #expect(s.age == 37)
        #expect(s.last == "Lovelace")
        try f.container.close()
    }

    @Test func automaticMergingBetweenQueueContextsLosesNothing() async throws {
        let store = TemporaryStore()
        let container = try makeContainer(store)
        let setup = container.newContext(concurrencyType: .confinement)
        let p = try setup.insert(Person.self)
        p.firstName = "Task"
        p.lastName = "One"
        p.age = 0
        try setup.save()
        let id = p.objectID
        let view = container.newBackgroundContext()
        let background = container.newBackgroundContext()
        // The view context holds the object with an unsaved rename.
        try await view.perform {
            let o = try view.existingObject(with: id) as! Person
            o.firstName = "Renamed"
        }
        try await background.perform {
            let o = try background.existingObject(with: id) as! Person
            o.age = 1
            try background.save()
        }
        // The merge reaches the view context's queue before this block (queues are serial).
        let age: Int32? = try await view.perform {
            let o = try view.existingObject(with: id) as! Person
            let age = o.age
            try view.save()
            return age
        }
        #expect(age == 1)
        let check = container.newContext(concurrencyType: .confinement)
        let stored = try check.existingObject(with: id) as! Person
        #expect(stored.firstName == "Renamed")
        #expect(stored.age == 1)
        try container.close()
    }

    @Test func aConflictIsAnErrorThatListsItAndWritesNothing() throws {
        let f = try Fixture()
        let mine = try f.person(f.a)
        mine.firstName = "Augusta"
        let other = try f.a.insert(Person.self)
        other.firstName = "New"
        other.lastName = "Person"
        let theirs = try f.person(f.b)
        theirs.age = 40
        try f.b.save()
        #expect(f.a.mergePolicy == .error)
        do {
            try f.a.save()
            Issue.record("the save should have failed")
        } catch let e as LogbookError {
            #expect(e.code == .mergeConflict)
            #expect(e.conflicts.count == 1)
            let c = try #require(e.conflicts.first)
            #expect(c.objectID == f.id)
            #expect(c.changedKeys == ["age"])
            #expect(c.cachedValues["age"] as? Int32 == 36)
            #expect(c.storeValues?["age"] as? Int32 == 40)
            #expect(!c.isDeletedInStore)
        }
        // Nothing of the failed save was written, and the context keeps its changes.
        let s = try #require(try f.stored())
        #expect(s.first == "Ada")
        #expect(s.age == 40)
        #expect(f.a.hasChanges)
        let check = f.container.newContext(concurrencyType: .confinement)
        #expect(try check.count(for: FetchRequest<Person>()) == 1)
        // After a refresh that merges, the save goes through with both changes.
        f.a.refresh(mine, mergeChanges: true)
        try f.a.save()
        let after = try #require(try f.stored())
        #expect(after.first == "Augusta")
        #expect(after.age == 40)
        try f.container.close()
    }

    /// A changes first name and age, B changes age and last name and saves first.
    func resolve(_ policy: MergePolicy) throws -> (first: String, last: String, age: Int32?) {
        let f = try Fixture()
        f.a.mergePolicy = policy
        let mine = try f.person(f.a)
        mine.firstName = "Augusta"
        mine.age = 50
        let theirs = try f.person(f.b)
        theirs.age = 40
        theirs.lastName = "King"
        try f.b.save()
        try f.a.save()
        // The object in A now shows what was written.
        let s = try #require(try f.stored())
        #expect(mine.firstName == s.first)
        #expect(mine.lastName == s.last)
        #expect(mine.age == s.age)
        #expect(!f.a.hasChanges)
        try f.container.close()
        return s
    }

    @Test func mergeByPropertyObjectTrump() throws {
        let s = try resolve(.mergeByPropertyObjectTrump)
        #expect(s.first == "Augusta")
        #expect(s.age == 50)  // changed on both sides: this context's value
        #expect(s.last == "King")  // changed by the other side only
    }

    @Test func mergeByPropertyStoreTrump() throws {
        let s = try resolve(.mergeByPropertyStoreTrump)
        #expect(s.first == "Augusta")
        #expect(s.age == 40)
        #expect(s.last == "King")
    }

    @Test func overwrite() throws {
        let s = try resolve(.overwrite)
        #expect(s.first == "Augusta")
        #expect(s.age == 50)
        #expect(s.last == "Lovelace")
    }

    @Test func rollback() throws {
        let s = try resolve(.rollback)
        #expect(s.first == "Ada")
        #expect(s.age == 40)
        #expect(s.last == "King")
    }

    @Test(arguments: [
        MergePolicy.error, .mergeByPropertyObjectTrump, .mergeByPropertyStoreTrump, .overwrite, .rollback
    ])
    func changingAnObjectAnotherContextDeleted(policy: MergePolicy) throws {
        let f = try Fixture()
        f.a.mergePolicy = policy
        let mine = try f.person(f.a)
        mine.age = 99
        f.b.delete(try f.person(f.b))
        try f.b.save()
        if policy == .error {
            #expect {
                try f.a.save()
            } throws: { e in
                let e = e as! LogbookError
                return e.code == .mergeConflict && e.conflicts.first?.isDeletedInStore == true
            }
            #expect(try f.stored() == nil)
            return
        }
        // The deletion stands under every other policy: the object is not brought back.
        try f.a.save()
        #expect(try f.stored() == nil)
        #expect(mine.isDeleted)
        #expect(mine.managedObjectContext == nil)
        try f.container.close()
    }

    @Test(arguments: [
        MergePolicy.error, .mergeByPropertyObjectTrump, .mergeByPropertyStoreTrump, .overwrite, .rollback
    ])
    func deletingAnObjectAnotherContextChanged(policy: MergePolicy) throws {
        let f = try Fixture()
        f.a.mergePolicy = policy
        f.a.delete(try f.person(f.a))
        let theirs = try f.person(f.b)
        theirs.age = 41
        try f.b.save()
        if policy == .error {
            #expect {
                try f.a.save()
            } throws: { e in
                let e = e as! LogbookError
                return e.code == .mergeConflict && e.conflicts.first?.isDeletedInContext == true
            }
            #expect(try f.stored()?.age == 41)
            return
        }
        try f.a.save()
        #expect(try f.stored() == nil)
        try f.container.close()
    }

    /// An employee reporting to `first`, and a second manager, saved; two confined contexts.
    struct Staff {
        let store = TemporaryStore()
        let container: PersistentContainer
        let employee: ObjectID
        let first: ObjectID
        let second: ObjectID
        let third: ObjectID

        init() throws {
            container = try makeContainer(store)
            let c = container.newContext(concurrencyType: .confinement)
            func manager(_ name: String) throws -> Manager {
                let m = try c.insert(Manager.self)
                m.firstName = name
                m.lastName = "M"
                return m
            }
            let m1 = try manager("First")
            let m2 = try manager("Second")
            let m3 = try manager("Third")
            let e = try c.insert(Employee.self)
            e.firstName = "Eve"
            e.lastName = "E"
            e.manager = m1
            try c.save()
            (employee, first, second, third) = (e.objectID, m1.objectID, m2.objectID, m3.objectID)
        }

        func context(_ policy: MergePolicy = .error) -> ManagedObjectContext {
            let c = container.newContext(concurrencyType: .confinement)
            c.mergePolicy = policy
            return c
        }

        /// The employee's manager and each manager's reports, as the store holds them.
        func stored() throws -> (manager: ObjectID?, reports: [ObjectID: Set<ObjectID>], name: String) {
            let c = context()
            let e = try c.existingObject(with: employee) as! Employee
            var reports: [ObjectID: Set<ObjectID>] = [:]
            for m in [first, second, third] {
                reports[m] = Set(try (c.existingObject(with: m)).objects(forKey: "reports").map(\.objectID))
            }
            return (e.manager?.objectID, reports, e.firstName)
        }
    }

    @Test(arguments: [
        MergePolicy.error, .mergeByPropertyObjectTrump, .mergeByPropertyStoreTrump, .overwrite, .rollback
    ])
    func anAttributeAgainstARelationship(policy: MergePolicy) throws {
        // A renames the employee; B moves it to the second manager and saves first.
        let s = try Staff()
        let a = s.context(policy)
        let b = s.context()
        let mine = try a.existingObject(with: s.employee) as! Employee
        mine.firstName = "Eva"
        let theirs = try b.existingObject(with: s.employee) as! Employee
        theirs.manager = try b.existingObject(with: s.second) as? Manager
        try b.save()
        if policy == .error {
            #expect(throws: LogbookError.self) { try a.save() }
            #expect(try s.stored().name == "Eve")
            return
        }
        try a.save()
        let stored = try s.stored()
        // Overwrite writes A's whole object back (its manager too); rollback drops A's rename.
        #expect(stored.name == (policy == .rollback ? "Eve" : "Eva"))
        let manager = policy == .overwrite ? s.first : s.second
        #expect(stored.manager == manager)
        for m in [s.first, s.second, s.third] {
            #expect(stored.reports[m] == (m == manager ? [s.employee] : []), "reports of \(m)")
        }
        try s.container.close()
    }

    @Test(arguments: [
        MergePolicy.error, .mergeByPropertyObjectTrump, .overwrite, .mergeByPropertyStoreTrump, .rollback
    ])
    func bothSidesOfAnInverse(policy: MergePolicy) throws {
        // A moves the employee to the second manager, B to the third and saves first.
        let s = try Staff()
        let a = s.context(policy)
        let b = s.context()
        (try a.existingObject(with: s.employee) as! Employee).manager =
            try a.existingObject(with: s.second) as? Manager
        (try b.existingObject(with: s.employee) as! Employee).manager =
            try b.existingObject(with: s.third) as? Manager
        try b.save()
        if policy == .error {
            #expect(throws: LogbookError.self) { try a.save() }
            #expect(try s.stored().manager == s.third)
            #expect(try s.stored().reports[s.second] == [])
            return
        }
        try a.save()
        let stored = try s.stored()
        let winner = policy == .mergeByPropertyObjectTrump || policy == .overwrite ? s.second : s.third
        #expect(stored.manager == winner)
        // Exactly one manager lists the employee: the inverse follows the chosen side.
        for m in [s.first, s.second, s.third] {
            #expect(stored.reports[m] == (m == winner ? [s.employee] : []), "reports of \(m)")
        }
        try s.container.close()
    }

    @Test func toManyChangesOfBothSidesAreKept() throws {
        let s = try Staff()
        let a = s.context()
        let b = s.context()
        let mine = try a.existingObject(with: s.second) as! Manager
        let theirs = try b.existingObject(with: s.second) as! Manager
        let e1 = try a.insert(Employee.self)
        e1.firstName = "From A"
        e1.lastName = "A"
        try mine.add(e1, toRelationship: "employees")
        let e2 = try b.insert(Employee.self)
        e2.firstName = "From B"
        e2.lastName = "B"
        try theirs.add(e2, toRelationship: "employees")
        try b.save()
        // Only the set changed on both sides: no record conflict, both members stay.
        try a.save()
        let check = s.context()
        let m = try check.existingObject(with: s.second)
        #expect(Set(try m.objects(forKey: "employees").map(\.objectID)) == [e1.objectID, e2.objectID])
        try s.container.close()
    }

    @Test func refreshWithoutMergingReadsTheStoresCurrentValues() throws {
        let f = try Fixture()
        // An object that came from a fetch (it keeps its record's bytes until touched).
        let fetched = try #require(try f.a.fetch(FetchRequest<Person>()).first)
        let theirs = try f.person(f.b)
        theirs.age = 70
        try f.b.save()
        #expect(fetched.age == 36)  // not merged: confined contexts merge by hand
        f.a.refresh(fetched, mergeChanges: false)
        #expect(fetched.isFault)
        #expect(fetched.age == 70)
        // Unsaved changes are dropped by `false`, kept and re-applied by `true`.
        fetched.firstName = "Changed"
        f.a.refresh(fetched, mergeChanges: false)
        #expect(fetched.firstName == "Ada")
        #expect(!f.a.hasChanges)
        fetched.firstName = "Kept"
        theirs.lastName = "Byron"
        try f.b.save()
        f.a.refresh(fetched, mergeChanges: true)
        #expect(fetched.firstName == "Kept")
        #expect(fetched.lastName == "Byron")
        #expect(fetched.isUpdated)
        try f.a.save()
        #expect(try f.stored()?.first == "Kept")
        #expect(try f.stored()?.last == "Byron")
        try f.container.close()
    }

    @Test func aBatchUpdateMergedByIDReachesAnotherContext() throws {
        let f = try Fixture()
        let mine = try f.person(f.a)
        #expect(mine.age == 36)
        var update = BatchUpdateRequest(entityName: "Person")
        update.propertiesToUpdate = ["age": Int32(12)]
        update.resultType = .objectIDs
        let result = try f.b.execute(update)
        #expect(result.objectIDs == [f.id])
        var refreshed: Set<ObjectID> = []
        let observation = f.a.observeEvents { if case .objectsDidChange(let c) = $0 { refreshed = c.refreshed } }
        f.a.mergeChanges(ContextChanges(updated: Set(result.objectIDs)))
        #expect(refreshed == [f.id])
        #expect(mine.age == 12)
        _ = observation
        try f.container.close()
    }

    @Test func eventsArriveAsAnAsyncSequence() async throws {
        let store = TemporaryStore()
        let container = try makeContainer(store)
        let context = container.newBackgroundContext()
        let stream = context.events()
        let collector = Task {
            var seen: [String] = []
            for await event in stream {
                switch event {
                case .willSave: seen.append("willSave")
                case .didSave(let c): seen.append("didSave \(c.inserted.count)")
                case .objectsDidChange: seen.append("objectsDidChange")
                }
                if seen.count == 2 { break }
            }
            return seen
        }
        try await context.perform {
            for i in 0..<3 {
                let p = try context.insert(Person.self)
                p.firstName = "P\(i)"
                p.lastName = "Q"
            }
            try context.save()
        }
        #expect(await collector.value == ["willSave", "didSave 3"])
        try container.close()
    }
}
