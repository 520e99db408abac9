import Dispatch
import Foundation
import LogbookEngine
import LogbookTestSupport
import Testing

@testable import LogbookGraph

/// Child contexts, fetches with pending changes, query generations and the main actor.
@Suite struct ChildContextTests {
    func names(_ c: ManagedObjectContext, sorted: Bool = true) throws -> [String] {
        var request = FetchRequest<Person>()
        if sorted { request.sortDescriptors = [FetchSortDescriptor(key: "firstName")] }
        return try c.fetch(request).map(\.firstName)
    }

    func insert(_ c: ManagedObjectContext, _ name: String, age: Int32? = nil) throws -> Person {
        let p = try c.insert(Person.self)
        p.firstName = name
        p.lastName = "L"
        p.age = age
        return p
    }

    @Test func threeLevelsSaveUpwardAndCancelDropsEverything() throws {
        let store = TemporaryStore()
        let container = try makeContainer(store)
        let root = container.newContext(concurrencyType: .confinement)
        let saved = try insert(root, "Root")
        try root.save()
        let child = root.newChildContext(concurrencyType: .confinement)
        let grandchild = child.newChildContext(concurrencyType: .confinement)
        #expect(grandchild.parent === child)
        #expect(child.parent === root)

        // The grandchild edits the saved object, inserts one, and saves into the child.
        let edited = try grandchild.existingObject(with: saved.objectID) as! Person
        edited.firstName = "Root edited"
        let made = try insert(grandchild, "Grandchild")
        try grandchild.save()
        #expect(try names(child) == ["Grandchild", "Root edited"])
        #expect(try names(root) == ["Root"])
        #expect(child.hasChanges)
        #expect(!grandchild.hasChanges)
        // The ID made in the grandchild is the one the child (and later the store) uses.
        let inChild = try child.existingObject(with: made.objectID) as! Person
        #expect(inChild.firstName == "Grandchild")
        #expect(inChild.isInserted)

        // A cancelled edit: a new grandchild changes things and is dropped.
        do {
            let sheet = child.newChildContext(concurrencyType: .confinement)
            (try sheet.existingObject(with: saved.objectID) as! Person).firstName = "Cancelled"
            _ = try insert(sheet, "Never")
        }
        #expect(try names(child) == ["Grandchild", "Root edited"])

        // The child saves into the root; the root saves to the store.
        try child.save()
        #expect(try names(root) == ["Grandchild", "Root edited"])
        let fresh = container.newContext(concurrencyType: .confinement)
        #expect(try names(fresh) == ["Root"])
        try root.save()
        #expect(try names(fresh) == ["Grandchild", "Root edited"])
        #expect(try fresh.existingObject(with: made.objectID).value(forKey: "firstName") as? String == "Grandchild")
        try container.close()
    }

    @Test func aChildSeesItsParentsUnsavedInsertsChangesAndDeletes() throws {
        let store = TemporaryStore()
        let container = try makeContainer(store)
        let parent = container.newContext(concurrencyType: .confinement)
        let a = try insert(parent, "A", age: 1)
        let b = try insert(parent, "B", age: 2)
        _ = try insert(parent, "C", age: 3)
        try parent.save()
        a.firstName = "A changed"
        parent.delete(b)
        _ = try insert(parent, "D new", age: 4)
        let child = parent.newChildContext(concurrencyType: .confinement)
        var request = FetchRequest<Person>()
        request.predicate = try FetchPredicate(format: "age >= 1")
        request.sortDescriptors = [FetchSortDescriptor(key: "age", ascending: false)]
        request.fetchLimit = 3
        #expect(try child.fetch(request).map(\.firstName) == ["D new", "C", "A changed"])
        #expect(try child.count(for: FetchRequest<Person>()) == 3)
        // The child's own change on top of the parent's.
        let c = try #require(try child.fetch(request).first { $0.firstName == "C" })
        c.age = 10
        #expect(try child.fetch(request).map(\.firstName) == ["C", "D new", "A changed"])
        // Its save changes only what it changed: the parent's unsaved rename of A stays.
        try child.save()
        try parent.save()
        let check = container.newContext(concurrencyType: .confinement)
        #expect(try names(check) == ["A changed", "C", "D new"])
        try container.close()
    }

    @Test func aChildOfTheViewContextOnTheMainQueue() async throws {
        let store = TemporaryStore()
        let container = try makeContainer(store)
        let view = container.viewContext
        let id: ObjectID = try await view.perform {
            let p = try insert(view, "Viewed")
            try view.save()
            return p.objectID
        }
        let sheet = view.newChildContext()
        try await sheet.perform {
            (try sheet.existingObject(with: id) as! Person).firstName = "Edited in sheet"
            try sheet.save()
        }
        let (name, changed): (String, Bool) = try await view.perform {
            ((try view.existingObject(with: id) as! Person).firstName, view.hasChanges)
        }
        #expect(name == "Edited in sheet")
        #expect(changed)
        try container.close()
    }

    @Test func fetchesWithPendingChangesSortedAndLimited() throws {
        let store = TemporaryStore()
        let container = try makeContainer(store)
        let c = container.newContext(concurrencyType: .confinement)
        var people: [Person] = []
        for (i, n) in ["E", "B", "D", "A"].enumerated() { people.append(try insert(c, n, age: Int32(10 + i))) }
        try c.save()
        people[0].firstName = "AA"  // E becomes AA
        c.delete(people[1])  // B goes
        _ = try insert(c, "C", age: 99)
        var request = FetchRequest<Person>()
        request.sortDescriptors = [FetchSortDescriptor(key: "firstName")]
        #expect(try c.fetch(request).map(\.firstName) == ["A", "AA", "C", "D"])
        request.fetchLimit = 2
        request.fetchOffset = 1
        #expect(try c.fetch(request).map(\.firstName) == ["AA", "C"])
        // On the indexed attribute, with a range.
        var byAge = FetchRequest<Person>()
        byAge.predicate = try FetchPredicate(format: "age > 10")
        byAge.sortDescriptors = [FetchSortDescriptor(key: "age", ascending: false)]
        byAge.fetchLimit = 2
        #expect(try c.fetch(byAge).map(\.firstName) == ["C", "A"])
        #expect(try c.count(for: byAge) == 2)
        // Without pending changes: only what the store holds, matched on stored values.
        var stored = FetchRequest<Person>()
        stored.includesPendingChanges = false
        stored.predicate = try FetchPredicate(format: "firstName == 'E'")
        let found = try c.fetch(stored)
        #expect(found.count == 1)
        #expect(found.first === people[0])  // the context's own object, with its unsaved name
        stored.predicate = nil
        stored.sortDescriptors = [FetchSortDescriptor(key: "age")]
        #expect(try c.fetch(stored).count == 4)
        #expect(try c.count(for: stored) == 4)
        try container.close()
    }

    @Test func aPinnedContextKeepsReadingItsVersion() throws {
        let store = TemporaryStore()
        let container = try makeContainer(store)
        let writer = container.newContext(concurrencyType: .confinement)
        let p = try insert(writer, "Old", age: 1)
        try writer.save()
        let reader = container.newContext(concurrencyType: .confinement)
        try reader.setQueryGeneration(.current)
        let version = try #require(reader.queryGenerationToken?.version)
        p.firstName = "New"
        _ = try insert(writer, "Second", age: 2)
        try writer.save()
        #expect(try names(reader) == ["Old"])
        #expect((try reader.existingObject(with: p.objectID) as! Person).firstName == "Old")
        #expect(reader.queryGenerationToken?.version == version)
        // Another context can share the pinned version through the token.
        let other = container.newContext(concurrencyType: .confinement)
        try other.setQueryGeneration(try #require(reader.queryGenerationToken))
        #expect(try names(other) == ["Old"])
        // Refreshing everything moves it to the latest version; unpinning reads the latest.
        reader.refreshAllObjects()
        #expect(try names(reader) == ["New", "Second"])
        #expect(try #require(reader.queryGenerationToken?.version) > version)
        try other.setQueryGeneration(.unpinned)
        #expect(other.queryGenerationToken == nil)
        #expect(try names(other) == ["New", "Second"])
        // A child cannot be pinned.
        #expect(throws: LogbookError.self) { try reader.newChildContext().setQueryGeneration(.current) }
        try container.close()
    }

    @MainActor
    @Test func theViewContextFromMainActorCodeAfterAnAwait() async throws {
        let store = TemporaryStore()
        let container = try makeContainer(store)
        let view = container.viewContext
        try await Task.sleep(for: .milliseconds(5))
        // After the await the main actor may run on a thread that is not the main thread.
        let count = try view.performAndWait {
            _ = try insert(view, "Main actor")
            try view.save()
            return try view.count(for: FetchRequest<Person>())
        }
        #expect(count == 1)
        await Task.yield()
        let again: Int = try await view.perform { try view.count(for: FetchRequest<Person>()) }
        #expect(again == 1)
        try container.close()
    }

    @Test func anAsynchronousFetchHandsItsObjectsOverInSteps() async throws {
        let store = TemporaryStore()
        let container = try makeContainer(store, durability: .none)
        let context = container.newBackgroundContext()
        let total = ManagedObjectContext.handOverStep * 3 + 7
        try await context.perform {
            var insert = BatchInsertRequest(entityName: "Person", count: total) { i, row in
                row["firstName"] = "P\(i)"
                row["lastName"] = "L"
                row["age"] = Int32(i % 100)
            }
            insert.resultType = .count
            _ = try context.execute(insert)
        }
        // The result is made in several steps on the queue; put together it is the whole
        // result, in order, and the same as a synchronous fetch's.
        var request = FetchRequest<Person>()
        request.predicate = try FetchPredicate(format: "age >= 0")
        request.sortDescriptors = [FetchSortDescriptor(key: "age"), FetchSortDescriptor(key: "firstName")]
        let handed = Locked<[ObjectID]?>(nil)
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let async = AsynchronousFetchRequest(fetchRequest: request) { result in
                handed.withLock { $0 = result.finalResult?.map(\.objectID) }
                continuation.resume()
            }
            context.perform {
                do { try context.execute(async) } catch { continuation.resume(throwing: error) }
            }
        }
        let sync = request
        let direct: [ObjectID] = try await context.perform { try context.fetch(sync).map(\.objectID) }
        let ids = try #require(handed.withLock { $0 })
        #expect(ids.count == total)
        #expect(ids == direct)
        try container.close()
    }
}
