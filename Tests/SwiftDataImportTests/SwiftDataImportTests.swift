// An app's data code, as it is written for Apple platforms: it imports SwiftData alone (no
// Foundation, no Logbook), and names types with their module.
import SwiftData
import Testing

@Model
final class Note {
    @Attribute(.unique) var id: UUID
    var title: String
    var created: Date
    var tags: [String] = []
    var folder: Folder?

    init(title: String, created: Date = .now) {
        self.id = UUID()
        self.title = title
        self.created = created
    }
}

@Model
final class Folder {
    var name: String
    @Relationship(deleteRule: .cascade, inverse: \Note.folder) var notes: [Note] = []
    init(name: String) { self.name = name }
}

@Suite struct SwiftDataImportTests {
    @Test func appCodeThatImportsOnlySwiftDataCompilesAndRuns() throws {
        let schema = SwiftData.Schema([Note.self, Folder.self])
        let configuration = SwiftData.ModelConfiguration(isStoredInMemoryOnly: true)
        let container = try SwiftData.ModelContainer(for: schema, configurations: configuration)
        let context = ModelContext(container)
        let inbox = Folder(name: "Inbox")
        context.insert(inbox)
        let note = Note(title: "Groceries", created: Date(timeIntervalSinceReferenceDate: 818_022_387.7552129))
        note.folder = inbox
        context.insert(note)
        try context.save()

        let since = Date(timeIntervalSinceReferenceDate: 0)
        let descriptor = FetchDescriptor<Note>(
            predicate: #Predicate { $0.created > since && $0.title.contains("Groc") },
            sortBy: [SortDescriptor(\.created, order: .reverse)])
        let found = try context.fetch(descriptor)
        #expect(found.map(\.title) == ["Groceries"])
        #expect(found.first?.created.timeIntervalSinceReferenceDate == 818_022_387.7552129)
        #expect(found.first?.folder?.name == "Inbox")
        let ids: [PersistentIdentifier] = try context.fetchIdentifiers(FetchDescriptor<Folder>())
        #expect(ids == [inbox.persistentModelID])
    }
}
