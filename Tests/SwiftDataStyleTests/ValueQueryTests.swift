// Queries into values stored whole (Codable structs, enums, arrays), attributes stored
// through a named transformer, relationship counts, and a container of several root classes.
// SwiftData code; only the import differs.
import Foundation
import Logbook
import Testing

/// A colour stored as 16 bytes by a transformer registered by name (`Codable` only so that
/// `#Predicate` may capture one).
struct RGBA: Equatable, Codable, Sendable {
    var red, green, blue, alpha: Float
}

struct RGBATransformer: AttributeTransformer {
    func transformedValue(_ value: Any) throws -> Data {
        guard let c = value as? RGBA else { throw CocoaError(.coderInvalidValue) }
        return [c.red, c.green, c.blue, c.alpha].withUnsafeBufferPointer { Data(buffer: $0) }
    }
    func reverseTransformedValue(_ data: Data) throws -> Any {
        guard data.count == 16 else { throw CocoaError(.coderReadCorrupt) }
        let f = data.withUnsafeBytes { Array($0.bindMemory(to: Float.self)) }
        return RGBA(red: f[0], green: f[1], blue: f[2], alpha: f[3])
    }
}

@Model final class Swatch {
    var name: String
    @Attribute(.transformable(by: "RGBATransformer")) var color: RGBA
    init(name: String, color: RGBA) {
        self.name = name
        self.color = color
    }
}

@Model final class Crew {
    var name: String
    @Relationship(deleteRule: .cascade, minimumModelCount: 2, maximumModelCount: 3, inverse: \Sailor.crew)
    var sailors: [Sailor] = []
    init(name: String) { self.name = name }
}

@Model final class Sailor {
    var name: String
    var crew: Crew?
    init(name: String) { self.name = name }
}

@Suite struct ValueQueryTests {
    static func library() throws -> ModelContext {
        let container = try ModelContainer(
            for: Author.self, configurations: ModelConfiguration(isStoredInMemoryOnly: true))
        let context = ModelContext(container)
        let places = [("Portland", "1 Elm St"), ("Lyon", "2 Rue Neuve"), ("Portland", "3 Oak Ave")]
        for (i, (city, street)) in places.enumerated() {
            let author = Author(name: "Author \(i)")
            author.address = Address(street: street, city: city)
            context.insert(author)
            let book = Book(isbn: "\(i)", title: "Title \(i)", pages: 100 * (i + 1))
            book.genre = [Genre.fiction, .poetry, .essay][i]
            book.tags = [["sea", "ships"], ["love"], ["sea"]][i]
            author.books.append(book)
        }
        context.insert(Author(name: "Nowhere"))
        try context.save()
        return context
    }

    @Test func predicatesReachIntoCodableStructsEnumsAndArrays() throws {
        let context = try Self.library()
        func authors(_ p: Predicate<Author>) throws -> [String] {
            try context.fetch(FetchDescriptor(predicate: p, sortBy: [SortDescriptor(\.name)])).map(\.name)
        }
        func books(_ p: Predicate<Book>) throws -> [String] {
            try context.fetch(FetchDescriptor(predicate: p, sortBy: [SortDescriptor(\.title)])).map(\.title)
        }
        // A property of an optional Codable struct, compared, with `??`, with string functions.
        #expect(try authors(#Predicate { $0.address?.city == "Portland" }) == ["Author 0", "Author 2"])
        #expect(try authors(#Predicate { $0.address?.city != "Portland" }) == ["Author 1", "Nowhere"])
        #expect(try authors(#Predicate { $0.address == nil }) == ["Nowhere"])
        #expect(try authors(#Predicate { ($0.address?.city ?? "none") == "none" }) == ["Nowhere"])
        #expect(try authors(#Predicate { $0.address?.street.starts(with: "2") == true }) == ["Author 1"])
        let wanted = Address(street: "3 Oak Ave", city: "Portland")
        #expect(try authors(#Predicate { $0.address == wanted }) == ["Author 2"])

        // An enum stored as its Codable form: by case, and by raw value.
        let poetry = Genre.poetry
        #expect(try books(#Predicate { $0.genre == poetry }) == ["Title 1"])
        #expect(try books(#Predicate { $0.genre.rawValue == "essay" }) == ["Title 2"])
        // An array stored whole: contains, count, isEmpty.
        #expect(try books(#Predicate { $0.tags.contains("sea") }) == ["Title 0", "Title 2"])
        #expect(try books(#Predicate { $0.tags.count == 2 }) == ["Title 0"])
        #expect(try books(#Predicate { !$0.tags.isEmpty && $0.pages > 150 }) == ["Title 1", "Title 2"])
        // Through a relationship into the related object's struct.
        #expect(try books(#Predicate { $0.author?.address?.city == "Lyon" }) == ["Title 1"])
        // A value's own property (a string's length).
        #expect(try authors(#Predicate { $0.name.count > 7 }) == ["Author 0", "Author 1", "Author 2"])

        // Pending changes are answered the same way.
        let lyon = try #require(
            try context.fetch(FetchDescriptor<Author>(predicate: #Predicate { $0.name == "Nowhere" })).first)
        lyon.address = Address(street: "9 Quai", city: "Lyon")
        #expect(try authors(#Predicate { $0.address?.city == "Lyon" }) == ["Author 1", "Nowhere"])
    }

    @Test func anAttributeStoredThroughANamedTransformerRoundTrips() throws {
        AttributeTransformers.register(RGBATransformer(), name: "RGBATransformer")
        try withStoreURL { url in
            let teal = RGBA(red: 0, green: 0.5, blue: 0.5, alpha: 1)
            do {
                let container = try ModelContainer(for: Swatch.self, configurations: ModelConfiguration(url: url))
                let context = ModelContext(container)
                context.insert(Swatch(name: "teal", color: teal))
                context.insert(Swatch(name: "red", color: RGBA(red: 1, green: 0, blue: 0, alpha: 1)))
                try context.save()
                try container.persistentContainer.close()
            }
            let container = try ModelContainer(for: Swatch.self, configurations: ModelConfiguration(url: url))
            let context = ModelContext(container)
            let swatches = try context.fetch(FetchDescriptor<Swatch>(sortBy: [SortDescriptor(\.name)]))
            #expect(swatches.map(\.name) == ["red", "teal"])
            #expect(swatches[1].color == teal)
            // The attribute is stored through the named transformer.
            let entity = container.persistentContainer.model.entities.first { $0.name == "Swatch" }
            let color = entity?.attributes.first { $0.name == "color" }
            #expect(color?.type == .transformable(transformer: "RGBATransformer"))
            // Predicates compare through the transformer and reach into the value.
            let found = try context.fetch(FetchDescriptor<Swatch>(predicate: #Predicate { $0.color == teal }))
            #expect(found.map(\.name) == ["teal"])
            let reddish = try context.fetch(FetchDescriptor<Swatch>(predicate: #Predicate { $0.color.red > 0.9 }))
            #expect(reddish.map(\.name) == ["red"])
        }
    }

    @Test func relationshipCountsAreCheckedAtSave() throws {
        let container = try ModelContainer(
            for: Crew.self, configurations: ModelConfiguration(isStoredInMemoryOnly: true))
        let context = ModelContext(container)
        let crew = Crew(name: "Endurance")
        context.insert(crew)
        crew.sailors = [Sailor(name: "Frank")]
        #expect(throws: LogbookError.self) { try context.save() }
        crew.sailors += [Sailor(name: "Tom"), Sailor(name: "Perce")]
        try context.save()
        crew.sailors.append(Sailor(name: "Harry"))
        let error = #expect(throws: LogbookError.self) { try context.save() }
        #expect(error?.code == .validation)
        #expect(error?.validationFailures.map(\.key) == ["sailors"])
        context.rollback()
        #expect(crew.sailors.count == 3)
    }

    @Test func aContainerForSeveralRootClasses() throws {
        AttributeTransformers.register(RGBATransformer(), name: "RGBATransformer")
        let container = try ModelContainer(
            for: Swatch.self, Crew.self, Author.self, configurations: ModelConfiguration(isStoredInMemoryOnly: true))
        #expect(Set(container.schema.entityNames) == ["Swatch", "Crew", "Sailor", "Author", "Book", "Shelf"])
        let context = ModelContext(container)
        context.insert(Swatch(name: "white", color: RGBA(red: 1, green: 1, blue: 1, alpha: 1)))
        context.insert(Author(name: "Mary"))
        try context.save()
        #expect(try context.fetchCount(FetchDescriptor<Swatch>()) == 1)
        #expect(try context.fetchCount(FetchDescriptor<Author>()) == 1)
    }
}
