// A SwiftData sample app's models, unchanged but for the import (`import SwiftData` there).
import Foundation
import Logbook

struct Address: Codable, Hashable {
    var street: String
    var city: String
}

enum Genre: String, Codable, CaseIterable {
    case fiction, poetry, essay
}

@Model
final class Author {
    @Attribute(.unique) var name: String
    var born: Int?
    var address: Address?
    @Relationship(deleteRule: .cascade, inverse: \Book.author) var books: [Book] = []
    @Transient var isExpanded = false

    init(name: String, born: Int? = nil) {
        self.name = name
        self.born = born
    }
}

@Model
final class Book {
    #Unique<Book>([\.isbn])
    #Index<Book>([\.title], [\.pages, \.published])

    var isbn: String
    var title: String
    var pages: Int
    var published: Date
    var rating: Double = 0
    var genre: Genre = Genre.fiction
    var tags: [String] = []
    var author: Author?
    @Relationship(deleteRule: .nullify) var shelves: [Shelf] = []

    init(isbn: String, title: String, pages: Int, published: Date = .now, author: Author? = nil) {
        self.isbn = isbn
        self.title = title
        self.pages = pages
        self.published = published
        self.author = author
    }
}

@Model
final class Shelf {
    var label: String
    var books: [Book] = []

    init(label: String) { self.label = label }
}

/// Imports in the background: its own context, on its own executor.
@ModelActor
actor Importer {
    func importBooks(count: Int, authorName: String) throws -> PersistentIdentifier {
        let author = Author(name: authorName)
        modelContext.insert(author)
        for i in 0..<count {
            let book = Book(isbn: "\(authorName)-\(i)", title: "\(authorName) \(i)", pages: 100 + i)
            modelContext.insert(book)
            book.author = author
        }
        try modelContext.save()
        return author.persistentModelID
    }

    func pages(of id: PersistentIdentifier) -> Int? {
        (modelContext.model(for: id) as? Book)?.pages
    }

    func count() throws -> Int { try modelContext.fetchCount(FetchDescriptor<Book>()) }
}
