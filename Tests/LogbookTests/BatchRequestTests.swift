import Foundation
import LogbookTestSupport
import Testing

@testable import LogbookGraph

/// The article's to-do item (001), for S16 and the batch insert.
final class TodoItem: ManagedObject {
    @Managed("name") var name: String
    @Managed("createdAt") var createdAt: Date
    @Managed("done") var done: Bool
}

func todoModel() throws -> ManagedObjectModel {
    try ManagedObjectModel {
        EntityDescription("TodoItem", class: TodoItem.self) {
            AttributeDescription("name", .string, rules: [.length(1...100)])
            AttributeDescription("createdAt", .date, indexed: true)
            AttributeDescription("done", .bool, default: false, indexed: true)
        }
    }
}

@Suite struct BatchRequestTests {
    let base = Date(timeIntervalSince1970: 1_700_000_000)

    func populated(_ store: TemporaryStore, count: Int) throws -> PersistentContainer {
        let container = try makeContainer(store, model: todoModel())
        let context = container.newContext(concurrencyType: .confinement)
        let result = try context.execute(
            BatchInsertRequest(entityName: "TodoItem", count: count) { i, row in
                row.set("Item \(i + 1)", forKey: "name")
                row.set(base + Double(i), forKey: "createdAt")
                row.set(i % 2 == 1, forKey: "done")
            })
        #expect(result.count == count && result.objectIDs.isEmpty)
        return container
    }

    /// S16: change an attribute on many records in the store without loading them as objects;
    /// the objects contexts hold show the new values.
    @Test func batchUpdateChangesRecordsAndContextsSeeIt() async throws {
        let store = TemporaryStore()
        let container = try populated(store, count: 1000)
        let view = container.viewContext
        // The main context holds some items, one with an unsaved change of its own.
        let (held, edited): (ObjectID, ObjectID) = try await view.perform {
            var r = FetchRequest<TodoItem>()
            r.sortDescriptors = [FetchSortDescriptor(key: "createdAt")]
            r.fetchLimit = 2
            let first = try view.fetch(r)
            #expect(first.map(\.done) == [false, true])
            first[1].name = "Edited"
            return (first[0].objectID, first[1].objectID)
        }
        let background = container.newBackgroundContext()
        let changed: Int = try await background.perform {
            var update = BatchUpdateRequest(entityName: "TodoItem")
            update.predicate = try FetchPredicate(format: "done == NO")
            update.propertiesToUpdate = ["done": true]
            return try background.execute(update).count
        }
        #expect(changed == 500)
        let (heldDone, editedName, doneCount, plan): (Bool, String, Int, String) = try await view.perform {
            let h = try view.existingObject(with: held) as! TodoItem
            let e = try view.existingObject(with: edited) as! TodoItem
            var r = FetchRequest<TodoItem>()
            r.predicate = try FetchPredicate(format: "done == YES")
            return (h.done, e.name, try view.count(for: r), try view.explain(r).description)
        }
        #expect(heldDone, "the object the main context held shows the batch's value")
        #expect(editedName == "Edited", "an unsaved change survives the merge")
        #expect(doneCount == 1000, "the index follows the new values: \(plan)")

        // A batch update of an indexed attribute moves the index entries.
        let context = container.newContext(concurrencyType: .confinement)
        var move = BatchUpdateRequest(entityName: "TodoItem")
        move.predicate = try FetchPredicate(format: "name BEGINSWITH 'Item 99'")
        move.propertiesToUpdate = ["createdAt": base - 10]
        move.resultType = .objectIDs
        let moved = try context.execute(move)
        #expect(moved.count == 11 && moved.objectIDs.count == 11)  // Item 99, Item 990…999
        var early = FetchRequest<TodoItem>()
        early.predicate = try FetchPredicate(format: "createdAt < %@", base)
        #expect(try Set(context.fetchObjectIDs(early)) == Set(moved.objectIDs))
        try container.close()
    }

    @Test func aBadBatchUpdateWritesNothing() throws {
        let store = TemporaryStore()
        let container = try populated(store, count: 10)
        let context = container.newContext(concurrencyType: .confinement)
        let before = container.store.version
        func attempt(_ properties: [String: Any?]) -> LogbookError.Code? {
            var u = BatchUpdateRequest(entityName: "TodoItem")
            u.propertiesToUpdate = properties
            do {
                _ = try context.execute(u)
                return nil
            } catch let e as LogbookError { return e.code } catch { return nil }
        }
        #expect(attempt(["colour": "red"]) == .unknownKey)
        #expect(attempt(["done": "yes"]) == .typeMismatch)
        #expect(attempt(["name": String?.none]) == .validation)
        #expect(attempt(["name": ""]) == .validation, "rules apply to the new value")
        #expect(throws: LogbookError.self) { try context.execute(BatchUpdateRequest(entityName: "Nothing")) }
        #expect(container.store.version == before)
        try container.close()
    }

    @Test func batchInsertWritesRecordsWithNewIDsInOneTransaction() throws {
        let store = TemporaryStore()
        let container = try populated(store, count: 100)
        let context = container.newContext(concurrencyType: .confinement)
        // From dictionaries, with the IDs back.
        var fromDictionaries = BatchInsertRequest(
            entityName: "TodoItem",
            objects: [
                ["name": "Dict 1", "createdAt": base + 1000],
                ["name": "Dict 2", "createdAt": base + 1001, "done": true]
            ])
        fromDictionaries.resultType = .objectIDs
        let result = try context.execute(fromDictionaries)
        #expect(result.count == 2)
        let second = try context.existingObject(with: result.objectIDs[1]) as! TodoItem
        #expect(second.name == "Dict 2" && second.done)
        #expect(
            (try context.existingObject(with: result.objectIDs[0]) as! TodoItem).done == false, "the default applies")
        // Objects inserted afterwards get IDs of their own, also after reopening.
        let later = try context.insert(TodoItem.self)
        later.name = "Later"
        later.createdAt = base
        try context.save()
        #expect(!result.objectIDs.contains(later.objectID))
        #expect(try context.count(for: FetchRequest<TodoItem>()) == 103)
        try container.close()
        let reopened = try makeContainer(store, model: todoModel())
        let again = reopened.newContext(concurrencyType: .confinement)
        let ids = try again.execute(
            BatchInsertRequest(entityName: "TodoItem", count: 1) { _, row in
                row["name"] = "After reopen"
                row["createdAt"] = base
            })
        #expect(ids.count == 1)
        let all = try again.fetchObjectIDs(FetchRequest<TodoItem>())
        #expect(Set(all).count == 104)
        try reopened.close()
    }

    @Test func aBadBatchInsertWritesNothingAndSaysWhy() throws {
        let store = TemporaryStore()
        let container = try populated(store, count: 5)
        let context = container.newContext(concurrencyType: .confinement)
        let before = container.store.version
        // Missing required values and broken rules: every failure listed.
        do {
            _ = try context.execute(
                BatchInsertRequest(entityName: "TodoItem", count: 4) { i, row in
                    if i != 1 { row.set(i == 2 ? "" : "ok", forKey: "name") }
                    row.set(base, forKey: "createdAt")
                })
            Issue.record("a validation error was expected")
        } catch let e as LogbookError {
            #expect(e.code == .validation)
            #expect(e.validationFailures.map(\.key).sorted() == ["name", "name"])
            #expect(e.validationFailures.map(\.reason).contains("a value is required"))
        }
        #expect(throws: LogbookError.self) {
            try context.execute(
                BatchInsertRequest(entityName: "TodoItem", count: 1) { _, row in row.set(3, forKey: "name") })
        }
        #expect(throws: LogbookError.self) {
            try context.execute(BatchInsertRequest(entityName: "TodoItem", count: 1) { _, row in row["priority"] = 1 })
        }
        #expect(container.store.version == before)
        #expect(try context.count(for: FetchRequest<TodoItem>()) == 5)
        try container.close()
    }
}
