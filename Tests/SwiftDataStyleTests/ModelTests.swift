import Foundation
import Logbook
import Testing

/// A store directory of its own, removed at the end.
func withStoreURL<T>(_ body: (URL) throws -> T) rethrows -> T {
    let url = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("swiftdata-\(UUID().uuidString)")
    defer { try? FileManager.default.removeItem(at: url) }
    return try body(url)
}

@Suite struct ModelTests {
    /// An app group's configuration puts the store in the group's shared directory; a named
    /// CloudKit database is refused with a clear error (there is no CloudKit on Linux), while
    /// `.automatic` and `.none` mirror nothing.
    @Test func aGroupContainerIsASharedDirectoryAndCloudKitIsRefused() throws {
        let group = "group.logbook.tests.\(UUID().uuidString)"
        let configuration = ModelConfiguration("Notes", groupContainer: .identifier(group), cloudKitDatabase: .none)
        #expect(configuration.url.path.hasSuffix("/Group Containers/\(group)/Notes.logbook"))
        defer { try? FileManager.default.removeItem(at: configuration.url.deletingLastPathComponent()) }
        do {
            let container = try ModelContainer(for: Author.self, configurations: configuration)
            let context = ModelContext(container)
            context.insert(Author(name: "Ada"))
            try context.save()
            try container.persistentContainer.close()
        }
        let again = try ModelContainer(
            for: Author.self, configurations: ModelConfiguration("Notes", groupContainer: .identifier(group)))
        #expect(try ModelContext(again).fetchCount(FetchDescriptor<Author>()) == 1)
        try again.persistentContainer.close()
        #expect(ModelConfiguration("Notes").url != configuration.url)

        let error = #expect(throws: LogbookError.self) {
            try ModelContainer(
                for: Author.self,
                configurations: ModelConfiguration(isStoredInMemoryOnly: true, cloudKitDatabase: .private("iCloud.x")))
        }
        #expect(error?.message.contains("CloudKit is not available on Linux") == true)
        _ = try ModelContainer(
            for: Author.self,
            configurations: ModelConfiguration(isStoredInMemoryOnly: true, cloudKitDatabase: .automatic))
    }

    @Test func modelsAreMadeWithTheirInitializerAndLiveUnattachedUntilInserted() throws {
        let container = try ModelContainer(
            for: Author.self, configurations: ModelConfiguration(isStoredInMemoryOnly: true))
        let context = ModelContext(container)
        let author = Author(name: "Ursula", born: 1929)
        #expect(author.modelContext == nil)
        #expect(author.persistentModelID.isTemporary)
        #expect(author.name == "Ursula" && author.born == 1929 && author.books.isEmpty)
        author.address = Address(street: "1 Main St", city: "Portland")

        context.insert(author)
        #expect(author.modelContext === context)
        #expect(!author.persistentModelID.isTemporary)
        #expect(author.persistentModelID.entityName == "Author")
        #expect(author.name == "Ursula" && author.address?.city == "Portland")
        #expect(context.hasChanges)
        try context.save()
        #expect(!context.hasChanges)

        // The schema reached Book and Shelf through the relationships.
        #expect(Set(container.schema.entityNames) == ["Author", "Book", "Shelf"])
    }

    @Test func valuesRelationshipsAndInversesSurviveAReopen() throws {
        try withStoreURL { url in
            let published = Date(timeIntervalSince1970: 1_000_000)
            do {
                let container = try ModelContainer(for: Author.self, configurations: ModelConfiguration(url: url))
                let context = ModelContext(container)
                let author = Author(name: "Octavia")
                let book = Book(isbn: "1", title: "Kindred", pages: 264, published: published, author: author)
                book.genre = .fiction
                book.tags = ["time", "history"]
                book.rating = 4.5
                let shelf = Shelf(label: "Favourites")
                shelf.books.append(book)
                context.insert(shelf)  // the book and its author come with it
                #expect(author.modelContext === context)
                #expect(author.books.map(\.title) == ["Kindred"])  // the inverse, at once
                #expect(book.shelves.map(\.label) == ["Favourites"])
                try context.save()
                try container.persistentContainer.close()
            }
            let container = try ModelContainer(for: Author.self, configurations: ModelConfiguration(url: url))
            let context = ModelContext(container)
            let books = try context.fetch(FetchDescriptor<Book>())
            #expect(books.count == 1)
            let book = try #require(books.first)
            #expect(book.title == "Kindred" && book.pages == 264 && book.published == published)
            #expect(book.genre == .fiction && book.tags == ["time", "history"] && book.rating == 4.5)
            #expect(book.author?.name == "Octavia")
            #expect(book.author?.books.first === book)
            #expect(book.shelves.first?.label == "Favourites")
            #expect(try context.fetch(FetchDescriptor<Author>()).first === book.author)
        }
    }

    @Test func predicatesAndSortsOfModelsAreAnsweredByTheStore() throws {
        let container = try ModelContainer(
            for: Book.self, configurations: ModelConfiguration(isStoredInMemoryOnly: true))
        let context = ModelContext(container)
        let ada = Author(name: "Ada")
        let bob = Author(name: "Bob")
        for i in 0..<50 {
            let b = Book(isbn: "\(i)", title: "Book \(i)", pages: i * 10, author: i.isMultiple(of: 2) ? ada : bob)
            context.insert(b)
        }
        try context.save()

        let minimum = 300
        var descriptor = FetchDescriptor<Book>(
            predicate: #Predicate { $0.pages >= minimum && $0.author?.name == "Ada" },
            sortBy: [SortDescriptor(\.pages, order: .reverse)])
        let found = try context.fetch(descriptor)
        #expect(found.map(\.pages) == stride(from: 480, through: 300, by: -20).map { $0 })
        #expect(try context.fetchCount(descriptor) == found.count)
        descriptor.fetchLimit = 3
        descriptor.fetchOffset = 1
        #expect(try context.fetch(descriptor).map(\.pages) == [460, 440, 420])

        let titled = try context.fetch(
            FetchDescriptor<Book>(
                predicate: #Predicate { $0.title.contains("Book 4") }, sortBy: [SortDescriptor(\.title)]))
        #expect(titled.map(\.title) == ["Book 4"] + (40..<50).map { "Book \($0)" })

        // A model object as a value, and a to-many relationship's count.
        let adaID = ada.persistentModelID
        let byAda = try context.fetch(
            FetchDescriptor<Book>(predicate: #Predicate { $0.author?.persistentModelID == adaID }))
        #expect(byAda.count == 25)
        let bobID = bob.id
        let bobItself = try context.fetch(
            FetchDescriptor<Author>(predicate: #Predicate { $0.persistentModelID == bobID }))
        #expect(bobItself.map(\.name) == ["Bob"])
        let prolific = try context.fetch(FetchDescriptor<Author>(predicate: #Predicate { $0.books.count > 20 }))
        #expect(Set(prolific.map(\.name)) == ["Ada", "Bob"])

        let ids = try context.fetchIdentifiers(FetchDescriptor<Book>(predicate: #Predicate { $0.pages < 30 }))
        #expect(ids.count == 3)
        #expect(Set(ids.map { (context.model(for: $0) as! Book).pages }) == [0, 10, 20])

        // What cannot be translated is a clear error, not a wrong answer.
        #expect(throws: LogbookError.self) {
            try context.fetch(FetchDescriptor<Book>(predicate: #Predicate { ($0.pages > 3 ? 2 : 1) > 1 }))
        }
    }

    @Test func uniqueAttributesUpsertAsInSwiftData() throws {
        let container = try ModelContainer(
            for: Author.self, configurations: ModelConfiguration(isStoredInMemoryOnly: true))
        let context = ModelContext(container)
        context.insert(Author(name: "Iain", born: 1954))
        try context.save()
        let again = Author(name: "Iain", born: 1955)
        context.insert(again)
        try context.save()
        let all = try context.fetch(FetchDescriptor<Author>())
        #expect(all.count == 1)
        #expect(all.first?.born == 1955)
    }

    @Test func anUnattachedObjectGivenAnInsertedOneIsInsertedWithIt() throws {
        let container = try ModelContainer(
            for: Author.self, configurations: ModelConfiguration(isStoredInMemoryOnly: true))
        let context = ModelContext(container)
        let author = Author(name: "Octavia")
        context.insert(author)
        try context.save()

        let book = Book(isbn: "k", title: "Kindred", pages: 264)
        #expect(book.modelContext == nil)
        book.author = author
        #expect(book.modelContext === context)
        #expect(author.books.map(\.title) == ["Kindred"])
        let shelf = Shelf(label: "Favourites")
        shelf.books = [book]
        #expect(shelf.modelContext === context)
        try context.save()

        let other = ModelContext(container)
        let stored = try other.fetch(FetchDescriptor<Book>())
        #expect(stored.map(\.title) == ["Kindred"])
        #expect(stored.first?.author?.name == "Octavia")
        #expect(stored.first?.shelves.map(\.label) == ["Favourites"])
    }

    @Test func deleteRulesRollbackAndTransactions() throws {
        let container = try ModelContainer(
            for: Author.self, configurations: ModelConfiguration(isStoredInMemoryOnly: true))
        let context = ModelContext(container)
        let author = Author(name: "Jo")
        context.insert(author)
        for i in 0..<3 { author.books.append(Book(isbn: "j\(i)", title: "J\(i)", pages: i)) }
        try context.save()
        #expect(try context.fetchCount(FetchDescriptor<Book>()) == 3)

        author.name = "Changed"
        context.rollback()
        #expect(author.name == "Jo")

        #expect(throws: CancellationError.self) {
            try context.transaction {
                context.delete(author)
                throw CancellationError()
            }
        }
        #expect(!author.isDeleted)
        #expect(try context.fetchCount(FetchDescriptor<Book>()) == 3)

        try context.transaction { context.delete(author) }
        #expect(try context.fetchCount(FetchDescriptor<Author>()) == 0)
        #expect(try context.fetchCount(FetchDescriptor<Book>()) == 0)  // cascaded

        let shelf = Shelf(label: "S")
        context.insert(shelf)
        shelf.books = [Book(isbn: "x", title: "X", pages: 1), Book(isbn: "y", title: "Y", pages: 2)]
        try context.save()
        try context.delete(model: Book.self, where: #Predicate { $0.pages == 1 })
        try context.save()
        #expect(shelf.books.map(\.title) == ["Y"])  // nullified
    }

    @Test func requiredValuesAreCheckedAtSave() throws {
        let container = try ModelContainer(
            for: Book.self, configurations: ModelConfiguration(isStoredInMemoryOnly: true))
        let context = ModelContext(container)
        context.insert(Book(isbn: "1", title: "", pages: 1))
        try context.save()  // empty is a value
        let clash = Book(isbn: "1", title: "Other", pages: 2)
        context.insert(clash)
        try context.save()  // upsert on the unique isbn
        #expect(try context.fetch(FetchDescriptor<Book>()).map(\.title) == ["Other"])
    }

    @Test func identifiersAreCodableAndCrossContexts() throws {
        let container = try ModelContainer(
            for: Book.self, configurations: ModelConfiguration(isStoredInMemoryOnly: true))
        let a = ModelContext(container)
        let book = Book(isbn: "9", title: "Nine", pages: 9)
        a.insert(book)
        try a.save()
        let data = try JSONEncoder().encode(book.persistentModelID)
        let id = try JSONDecoder().decode(PersistentIdentifier.self, from: data)
        #expect(id == book.persistentModelID)
        let b = ModelContext(container)
        #expect(b.registeredModel(for: id) as Book? == nil)
        let other = try #require(b.model(for: id) as? Book)
        #expect(other !== book && other.title == "Nine")
        #expect(b.registeredModel(for: id) as Book? === other)
    }

    @Test func enumerateWalksInBatchesAndRefusesEscapingChanges() throws {
        let container = try ModelContainer(
            for: Book.self, configurations: ModelConfiguration(isStoredInMemoryOnly: true))
        let context = ModelContext(container)
        for i in 0..<250 { context.insert(Book(isbn: "\(i)", title: "T\(i)", pages: i)) }
        try context.save()
        var total = 0
        var seen = 0
        try context.enumerate(FetchDescriptor<Book>(sortBy: [SortDescriptor(\.pages)]), batchSize: 100) { book in
            total += book.pages
            seen += 1
        }
        #expect(seen == 250 && total == (0..<250).reduce(0, +))
        #expect(throws: LogbookError.self) {
            try context.enumerate(FetchDescriptor<Book>(), batchSize: 100) { $0.pages += 1 }
        }
    }

    @MainActor @Test func observationFiresOnSetsAndOnMergesFromAnotherContext() async throws {
        let container = try ModelContainer(
            for: Book.self, configurations: ModelConfiguration(isStoredInMemoryOnly: true))
        let main = container.mainContext
        let book = Book(isbn: "o", title: "Observed", pages: 1)
        main.insert(book)
        try main.save()

        let changed = Locked(false)
        withObservationTracking {
            _ = book.title
        } onChange: {
            changed.set(true)
        }
        book.title = "Set"
        #expect(changed.get())
        try main.save()

        // Another context saves; the main context merges; observers of the property hear of it.
        let merged = Locked(false)
        withObservationTracking {
            _ = book.pages
        } onChange: {
            merged.set(true)
        }
        let importer = Importer(modelContainer: container)
        try await importer.setPages(of: book.persistentModelID, to: 42)
        for _ in 0..<300 where !merged.get() { try await Task.sleep(for: .milliseconds(10)) }
        #expect(merged.get())
        #expect(book.pages == 42)
    }

    @Test func aModelActorImportsInTheBackground() async throws {
        let container = try ModelContainer(
            for: Author.self, configurations: ModelConfiguration(isStoredInMemoryOnly: true))
        let importer = Importer(modelContainer: container)
        let authorID = try await importer.importBooks(count: 100, authorName: "Back")
        #expect(try await importer.count() == 100)
        let context = ModelContext(container)
        let author = try #require(context.model(for: authorID) as? Author)
        #expect(author.books.count == 100)
        let first = try #require(author.books.first)
        #expect(await importer.pages(of: first.persistentModelID) == first.pages)
    }

    @MainActor @Test func theMainContextSavesByItself() async throws {
        let container = try ModelContainer(
            for: Book.self, configurations: ModelConfiguration(isStoredInMemoryOnly: true))
        let main = container.mainContext
        #expect(main.autosaveEnabled)
        main.insert(Book(isbn: "a", title: "Autosaved", pages: 3))
        #expect(main.hasChanges)
        let other = ModelContext(container)
        for _ in 0..<300 where try other.fetchCount(FetchDescriptor<Book>()) == 0 {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(try other.fetchCount(FetchDescriptor<Book>()) == 1)
        #expect(!main.hasChanges)
    }

    @Test func inMemoryStoresAreSeparateAndLeaveNoFile() throws {
        let a = try ModelContainer(for: Book.self, configurations: ModelConfiguration(isStoredInMemoryOnly: true))
        let b = try ModelContainer(for: Book.self, configurations: ModelConfiguration(isStoredInMemoryOnly: true))
        let context = ModelContext(a)
        context.insert(Book(isbn: "m", title: "Memory", pages: 1))
        try context.save()
        #expect(try ModelContext(a).fetchCount(FetchDescriptor<Book>()) == 1)
        #expect(try ModelContext(b).fetchCount(FetchDescriptor<Book>()) == 0)
        #expect(!FileManager.default.fileExists(atPath: a.configurations[0].url.path))
    }
}

extension Importer {
    func setPages(of id: PersistentIdentifier, to pages: Int) throws {
        guard let book = modelContext.model(for: id) as? Book else { return }
        book.pages = pages
        try modelContext.save()
    }
}

/// A value behind a lock, for observation callbacks.
final class Locked<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func get() -> Value { lock.withLock { value } }
    func set(_ v: Value) { lock.withLock { value = v } }
}

/// SwiftData's pattern of a container per feature (or a widget's, or a test that "reopens"):
/// several `ModelContainer`s on one URL in one process share the store.
@Suite struct SeveralContainersTests {
    @Test func twoContainersOnOneURLSeeEachOthersSaves() throws {
        try withStoreURL { url in
            let app = try ModelContainer(for: Author.self, configurations: ModelConfiguration(url: url))
            let widget = try ModelContainer(for: Author.self, configurations: ModelConfiguration(url: url))
            let appContext = ModelContext(app)
            appContext.insert(Author(name: "Ada"))
            try appContext.save()
            let widgetContext = ModelContext(widget)
            #expect(try widgetContext.fetch(FetchDescriptor<Author>()).map(\.name) == ["Ada"])
            widgetContext.insert(Author(name: "Grace"))
            try widgetContext.save()
            #expect(try appContext.fetchCount(FetchDescriptor<Author>()) == 2)
            // A third, made and dropped as a test that "reopens" does, leaves the others working.
            do {
                let again = try ModelContainer(for: Author.self, configurations: ModelConfiguration(url: url))
                #expect(try ModelContext(again).fetchCount(FetchDescriptor<Author>()) == 2)
            }
            appContext.insert(Author(name: "Alan"))
            try appContext.save()
            #expect(try widgetContext.fetchCount(FetchDescriptor<Author>()) == 3)
            // The unique constraint holds across them: an upsert, not a duplicate.
            widgetContext.insert(Author(name: "Ada", born: 1815))
            try widgetContext.save()
            #expect(try appContext.fetchCount(FetchDescriptor<Author>()) == 3)
        }
    }
}
