import Foundation
import Logbook
import Testing

/// Predicates as published apps write them: search fields, optional relationships, filtered
/// counts, arithmetic.
@Suite struct AppPredicateTests {
    func library() throws -> ModelContext {
        let container = try ModelContainer(
            for: Book.self, Author.self, configurations: ModelConfiguration(isStoredInMemoryOnly: true))
        let context = ModelContext(container)
        let ada = Author(name: "Ada Lovelace")
        let emile = Author(name: "Émile Zola")
        context.insert(ada)
        context.insert(emile)
        let titles = ["Item 10", "item 9", "Éclair", "apple", "Zed", "Apple pie", "Item 2"]
        for (n, title) in titles.enumerated() {
            context.insert(Book(isbn: "\(n)", title: title, pages: n, author: n < 3 ? ada : n < 5 ? emile : nil))
        }
        try context.save()
        return context
    }

    func titles(_ context: ModelContext, _ predicate: Predicate<Book>) throws -> Set<String> {
        Set(try context.fetch(FetchDescriptor(predicate: predicate)).map(\.title))
    }

    @Test func aSearchFieldsConditionalFiltersOnlyWhenThereIsText() throws {
        let context = try library()
        for searchText in ["", "Item"] {
            let found = try titles(
                context, #Predicate { searchText.isEmpty ? true : $0.title.contains(searchText) })
            #expect(found.count == (searchText.isEmpty ? 7 : 2), "\(searchText)")
        }
        // A condition on the object chooses between conditions.
        let chosen = try titles(
            context, #Predicate { $0.pages > 3 ? $0.title.starts(with: "A") : $0.title.starts(with: "i") })
        #expect(chosen == ["item 9", "Apple pie"])
    }

    @Test func flatMapThroughAnOptionalRelationship() throws {
        let context = try library()
        let q = "Zola"
        let byZola = try titles(context, #Predicate { $0.author.flatMap { $0.name.contains(q) } ?? false })
        #expect(byZola == ["apple", "Zed"])
        let notByAda = try titles(context, #Predicate { $0.author.flatMap { !$0.name.contains("Ada") } ?? true })
        #expect(notByAda == ["apple", "Zed", "Apple pie", "Item 2"])
    }

    @Test func filteredCountsOverAToManyRelationship() throws {
        let context = try library()
        let busy = try context.fetch(
            FetchDescriptor<Author>(predicate: #Predicate { $0.books.filter { $0.pages >= 1 }.count >= 2 }))
        #expect(Set(busy.map(\.name)) == ["Ada Lovelace", "Émile Zola"])
        let long = try context.fetch(
            FetchDescriptor<Author>(predicate: #Predicate { $0.books.filter { $0.pages > 2 }.isEmpty }))
        #expect(long.map(\.name) == ["Ada Lovelace"])
    }

    @Test func localizedStandardContainsIgnoresCaseAndAccents() throws {
        let context = try library()
        #expect(try titles(context, #Predicate { $0.title.localizedStandardContains("ECLAIR") }) == ["Éclair"])
        let term = "zola"
        let byAuthor = try titles(
            context, #Predicate { $0.author?.name.localizedStandardContains(term) == true })
        #expect(byAuthor == ["apple", "Zed"])
    }

    @Test func arithmetic() throws {
        let context = try library()
        #expect(try titles(context, #Predicate { $0.pages * 2 > 10 }) == ["Item 2"])
        #expect(try titles(context, #Predicate { $0.pages % 3 == 0 }) == ["Item 10", "apple", "Item 2"])
        #expect(try titles(context, #Predicate { $0.pages / 2 == 1 }) == ["Éclair", "apple"])
        #expect(try titles(context, #Predicate { -$0.pages < -5 }) == ["Item 2"])
        #expect(try titles(context, #Predicate { $0.pages + 1 == 2 }) == ["item 9"])
    }
}
