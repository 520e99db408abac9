import Foundation
import Logbook
import Testing

/// Sort descriptors as apps write them: the Finder's order, and through a relationship.
@Suite struct SortTests {
    func library() throws -> (ModelContainer, ModelContext) {
        let container = try ModelContainer(
            for: Book.self, Author.self, configurations: ModelConfiguration(isStoredInMemoryOnly: true))
        let context = ModelContext(container)
        let authors = ["Zola", "austen", "Émile", "Borges"].map { Author(name: $0) }
        for a in authors { context.insert(a) }
        for (n, title) in ["Item 10", "item 9", "Éclair", "apple", "Zed", "Apple pie", "Item 2"].enumerated() {
            context.insert(Book(isbn: "\(n)", title: title, pages: n, author: n < 4 ? authors[n] : nil))
        }
        try context.save()
        return (container, context)
    }

    @Test func localizedStandardOrdersAsTheFinderDoes() throws {
        let (_, context) = try library()
        let finder = try context.fetch(
            FetchDescriptor<Book>(sortBy: [SortDescriptor(\.title, comparator: .localizedStandard)]))
        #expect(finder.map(\.title) == ["apple", "Apple pie", "Éclair", "Item 2", "item 9", "Item 10", "Zed"])
        let reversed = try context.fetch(
            FetchDescriptor<Book>(sortBy: [SortDescriptor(\.title, comparator: .localizedStandard, order: .reverse)]))
        #expect(reversed.map(\.title) == finder.map(\.title).reversed())
        // The plain order (the index's): by Unicode scalars.
        let plain = try context.fetch(FetchDescriptor<Book>(sortBy: [SortDescriptor(\.title)]))
        #expect(plain.map(\.title) == ["Apple pie", "Item 10", "Item 2", "Zed", "apple", "item 9", "Éclair"])
        // A limit applies after the order.
        var firstTwo = FetchDescriptor<Book>(sortBy: [SortDescriptor(\.title, comparator: .localizedStandard)])
        firstTwo.fetchLimit = 2
        #expect(try context.fetch(firstTwo).map(\.title) == ["apple", "Apple pie"])
    }

    @Test func aKeyPathThroughARelationshipSorts() throws {
        let (_, context) = try library()
        let byAuthor = try context.fetch(
            FetchDescriptor<Book>(
                predicate: #Predicate { $0.author != nil },
                sortBy: [SortDescriptor(\.author?.name, comparator: .localizedStandard)]))
        #expect(byAuthor.map { $0.author?.name } == ["austen", "Borges", "Émile", "Zola"])
        // Books without an author sort first (no value first, as in Core Data), then by title.
        let all = try context.fetch(
            FetchDescriptor<Book>(sortBy: [SortDescriptor(\.author?.name), SortDescriptor(\.title)]))
        #expect(all.prefix(3).map(\.title) == ["Apple pie", "Item 2", "Zed"])
        #expect(all.suffix(4).map { $0.author?.name } == ["Borges", "Zola", "austen", "Émile"])
        // A key path that is not stored is refused, not ignored.
        #expect(throws: LogbookError.self) {
            try context.fetch(FetchDescriptor<Book>(sortBy: [SortDescriptor(\.author?.books.count)]))
        }
    }
}
