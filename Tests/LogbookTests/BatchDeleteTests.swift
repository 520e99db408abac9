import Foundation
import LogbookEngine
import LogbookTestSupport
import Testing

@testable import LogbookGraph

/// Batch deletes: delete rules through two levels of cascades, nullified inverses, deny,
/// deletes by object ID, exact indexes, and the merge into other contexts.
@Suite struct BatchDeleteTests {
    /// Library →(cascade) Shelf →(cascade) Book; Book.author ↔ Author.books (nullify);
    /// Book.isbn indexed; Vault.items (deny) holds books that must not go.
    static func model() throws -> ManagedObjectModel {
        try ManagedObjectModel {
            EntityDescription("Library") {
                AttributeDescription("name", .string)
                RelationshipDescription("shelves", to: "Shelf", inverse: "library", toMany: true, deleteRule: .cascade)
            }
            EntityDescription("Shelf") {
                AttributeDescription("label", .string)
                RelationshipDescription("library", to: "Library", inverse: "shelves")
                RelationshipDescription("books", to: "Book", inverse: "shelf", toMany: true, deleteRule: .cascade)
            }
            EntityDescription("Book") {
                AttributeDescription("isbn", .string, indexed: true)
                RelationshipDescription("shelf", to: "Shelf", inverse: "books")
                RelationshipDescription("author", to: "Author", inverse: "books")
                RelationshipDescription("vault", to: "Vault", inverse: "items")
            }
            EntityDescription("Author") {
                AttributeDescription("name", .string)
                RelationshipDescription("books", to: "Book", inverse: "author", toMany: true)
                RelationshipDescription("favourite", to: "Book", inverse: nil)
            }
            EntityDescription("Vault") {
                RelationshipDescription("items", to: "Book", inverse: "vault", toMany: true, deleteRule: .deny)
            }
        }
    }

    struct Fixture {
        let store = TemporaryStore()
        let container: PersistentContainer
        let c: ManagedObjectContext
        var ids: [String: ObjectID] = [:]

        init() throws {
            container = try makeContainer(store, model: BatchDeleteTests.model())
            c = container.newContext(concurrencyType: .confinement)
            func make(_ entity: String, _ values: [String: Any]) throws -> ManagedObject {
                let o = try c.insertNewObject(forEntityName: entity)
                for (k, v) in values { try o.setValue(v, forKey: k) }
                return o
            }
            let central = try make("Library", ["name": "central"])
            let branch = try make("Library", ["name": "branch"])
            let ada = try make("Author", ["name": "Ada"])
            for (i, library) in [central, branch].enumerated() {
                for s in 0..<2 {
                    let shelf = try make("Shelf", ["label": "\(i)-\(s)", "library": library])
                    for b in 0..<3 {
                        let book = try make("Book", ["isbn": "\(i)-\(s)-\(b)", "shelf": shelf, "author": ada])
                        ids["book \(i)-\(s)-\(b)"] = book.objectID
                    }
                    ids["shelf \(i)-\(s)"] = shelf.objectID
                }
            }
            ids["central"] = central.objectID
            ids["branch"] = branch.objectID
            ids["ada"] = ada.objectID
            try ada.setValue(try c.existingObject(with: ids["book 1-0-0"]!), forKey: "favourite")
            try c.save()
        }

        func count(_ entity: String, _ format: String? = nil) throws -> Int {
            let check = container.newContext(concurrencyType: .confinement)
            var r = FetchRequest<ManagedObject>(entityName: entity)
            if let format { r.predicate = try FetchPredicate(format: format) }
            return try check.count(for: r)
        }
    }

    @Test func aCascadeThroughTwoLevelsNullifiesInversesAndKeepsIndexesExact() throws {
        let f = try Fixture()
        // Another context holds objects that will go, and the author whose set will shrink.
        let other = f.container.newContext(concurrencyType: .confinement)
        let heldBook = try other.existingObject(with: f.ids["book 0-1-2"]!)
        let heldAuthor = try other.existingObject(with: f.ids["ada"]!)
        #expect(try heldAuthor.count(forKey: "books") == 12)
        let request = BatchDeleteRequest(
            entityName: "Library", predicate: try FetchPredicate(format: "name == %@", "central"))
        let result = try f.c.execute(request)
        #expect(result.count == 1 + 2 + 6)
        #expect(Set(result.objectIDs).contains(f.ids["book 0-1-2"]!))
        #expect(try f.count("Library") == 1)
        #expect(try f.count("Shelf") == 2)
        #expect(try f.count("Book") == 6)
        // The index holds only what is left.
        #expect(try f.count("Book", "isbn BEGINSWITH '0-'") == 0)
        #expect(try f.count("Book", "isbn == '1-1-2'") == 1)
        // The author's inverse set lost the deleted books, in the store and in the merging context.
        let check = f.container.newContext(concurrencyType: .confinement)
        #expect(try check.existingObject(with: f.ids["ada"]!).count(forKey: "books") == 6)
        other.mergeChanges(ContextChanges(deleted: Set(result.objectIDs)))
        #expect(heldBook.isDeleted)
        #expect(try heldAuthor.count(forKey: "books") == 6)
        try f.container.close()
    }

    @Test func byObjectIDsAToOneInverseIsCleared() throws {
        let f = try Fixture()
        // One book: its shelf's set and its author's set lose it; a to-one without inverse
        // (the author's favourite) is left pointing at nothing, as in Core Data.
        let result = try f.c.execute(BatchDeleteRequest(objectIDs: [f.ids["book 1-0-0"]!, f.ids["shelf 1-1"]!]))
        #expect(result.count == 1 + 1 + 3)
        let check = f.container.newContext(concurrencyType: .confinement)
        #expect(try check.existingObject(with: f.ids["shelf 1-0"]!).count(forKey: "books") == 2)
        #expect(try check.existingObject(with: f.ids["branch"]!).count(forKey: "shelves") == 1)
        #expect(try check.existingObject(with: f.ids["ada"]!).count(forKey: "books") == 8)
        try f.container.close()
    }

    @Test func denyRefusesTheWholeRequest() throws {
        let f = try Fixture()
        let vault = try f.c.insertNewObject(forEntityName: "Vault")
        try vault.add(try f.c.existingObject(with: f.ids["book 1-1-1"]!), toRelationship: "items")
        try f.c.save()
        #expect {
            try f.c.execute(BatchDeleteRequest(entityName: "Vault"))
        } throws: { e in
            (e as? LogbookError)?.code == .deleteDenied
        }
        #expect(try f.count("Vault") == 1)
        #expect(try f.count("Book") == 12)
        // With nothing related, it goes.
        try vault.remove(try f.c.existingObject(with: f.ids["book 1-1-1"]!), fromRelationship: "items")
        try f.c.save()
        #expect(try f.c.execute(BatchDeleteRequest(entityName: "Vault")).count == 1)
        try f.container.close()
    }

    @Test func theContextThatRunsItAndQueueContextsMerge() async throws {
        let f = try Fixture()
        let background = f.container.newBackgroundContext()
        let bookID = f.ids["book 0-0-0"]!
        try await background.perform { _ = try background.existingObject(with: bookID) }
        let local = try f.c.existingObject(with: bookID)
        _ = try f.c.execute(
            BatchDeleteRequest(entityName: "Book", predicate: try FetchPredicate(format: "isbn == '0-0-0'")))
        #expect(local.isDeleted)
        let gone: Bool = try await background.perform { (try? background.existingObject(with: bookID)) == nil }
        #expect(gone)
        try f.container.close()
    }
}
