import Foundation
import Logbook
import Testing

// A SwiftData migration plan: version 1 has notes with a title; version 2 renames `title` to
// `heading` and adds a unique `slug`, filled in by a custom stage.
enum NotesSchemaV1: VersionedSchema {
    static let versionIdentifier = Schema.Version(1, 0, 0)
    static var models: [any PersistentModel.Type] { [Note.self] }

    @Model final class Note {
        var title: String
        var body: String
        init(title: String, body: String) {
            self.title = title
            self.body = body
        }
    }
}

enum NotesSchemaV2: VersionedSchema {
    static let versionIdentifier = Schema.Version(2, 0, 0)
    static var models: [any PersistentModel.Type] { [Note.self] }

    @Model final class Note {
        @Attribute(originalName: "title") var heading: String
        var body: String
        var slug: String?
        init(heading: String, body: String) {
            self.heading = heading
            self.body = body
        }
    }
}

// Version 3 adds a required property with an initial value: a lightweight stage gives the
// stored notes that value.
enum NotesSchemaV3: VersionedSchema {
    static let versionIdentifier = Schema.Version(3, 0, 0)
    static var models: [any PersistentModel.Type] { [Note.self] }

    @Model final class Note {
        var heading: String
        var body: String
        var slug: String?
        var pinned: Bool = false
        var priority = 3
        init(heading: String, body: String) {
            self.heading = heading
            self.body = body
        }
    }
}

// Version 4 adds a Codable array and an enum with initial values: a lightweight stage gives
// the stored notes those values.
enum NotesSchemaV4: VersionedSchema {
    static let versionIdentifier = Schema.Version(4, 0, 0)
    static var models: [any PersistentModel.Type] { [Note.self] }

    enum Status: String, Codable { case open, done }

    @Model final class Note {
        var heading: String
        var body: String
        var slug: String?
        var pinned: Bool = false
        var priority = 3
        var tags: [String] = []
        var status: Status = .open
        init(heading: String, body: String) {
            self.heading = heading
            self.body = body
        }
    }
}

enum NotesMigrationPlan: SchemaMigrationPlan {
    nonisolated(unsafe) static var failDidMigrate = false
    static var schemas: [any VersionedSchema.Type] {
        [NotesSchemaV1.self, NotesSchemaV2.self, NotesSchemaV3.self, NotesSchemaV4.self]
    }
    static var stages: [MigrationStage] {
        [
            .custom(
                fromVersion: NotesSchemaV1.self, toVersion: NotesSchemaV2.self,
                willMigrate: { context in
                    // Before: drop notes without a body.
                    try context.delete(model: NotesSchemaV1.Note.self, where: #Predicate { $0.body.isEmpty })
                    try context.save()
                },
                didMigrate: { context in
                    if failDidMigrate { throw CancellationError() }
                    for note in try context.fetch(FetchDescriptor<NotesSchemaV2.Note>()) {
                        note.slug = note.heading.lowercased().replacingOccurrences(of: " ", with: "-")
                    }
                    try context.save()
                }),
            .lightweight(fromVersion: NotesSchemaV2.self, toVersion: NotesSchemaV3.self),
            .lightweight(fromVersion: NotesSchemaV3.self, toVersion: NotesSchemaV4.self)
        ]
    }
}

/// A plan written the way Swift 6 apps write one: its stages in `static let`s (which needs
/// `MigrationStage` to be Sendable), models named by the types of the current version.
enum TasksSchemaV1: VersionedSchema {
    static let versionIdentifier = Schema.Version(1, 0, 0)
    static var models: [any PersistentModel.Type] { [Task.self] }
    @Model final class Task {
        var title: String
        init(title: String) { self.title = title }
    }
}

enum TasksSchemaV2: VersionedSchema {
    static let versionIdentifier = Schema.Version(2, 0, 0)
    static var models: [any PersistentModel.Type] { [Task.self] }
    @Model final class Task {
        @Attribute(.unique) var title: String
        var done = false
        init(title: String) { self.title = title }
    }
}

enum TasksMigrationPlan: SchemaMigrationPlan {
    static var schemas: [any VersionedSchema.Type] { [TasksSchemaV1.self, TasksSchemaV2.self] }
    static var stages: [MigrationStage] { [migrateV1toV2] }
    static let migrateV1toV2 = MigrationStage.custom(
        fromVersion: TasksSchemaV1.self, toVersion: TasksSchemaV2.self,
        willMigrate: { context in
            // Titles become unique: keep the first of each.
            var seen = Set<String>()
            for task in try context.fetch(FetchDescriptor<TasksSchemaV1.Task>(sortBy: [SortDescriptor(\.title)])) {
                if !seen.insert(task.title).inserted { context.delete(task) }
            }
            try context.save()
        }, didMigrate: nil)
}

@Suite(.serialized) struct MigrationTests {
    @Test func aStageKeptInAStaticLetMigrates() throws {
        try withStoreURL { url in
            do {
                let container = try ModelContainer(
                    for: TasksSchemaV1.Task.self, configurations: ModelConfiguration(url: url))
                let context = ModelContext(container)
                for title in ["a", "b", "a"] { context.insert(TasksSchemaV1.Task(title: title)) }
                try context.save()
                try container.persistentContainer.close()
            }
            let container = try ModelContainer(
                for: TasksSchemaV2.Task.self, migrationPlan: TasksMigrationPlan.self,
                configurations: ModelConfiguration(url: url))
            let tasks = try ModelContext(container).fetch(
                FetchDescriptor<TasksSchemaV2.Task>(sortBy: [SortDescriptor(\.title)]))
            #expect(tasks.map(\.title) == ["a", "b"])
            #expect(tasks.allSatisfy { !$0.done })
            // A second container with the plan, while the first is open, shares the store.
            let second = try ModelContainer(
                for: TasksSchemaV2.Task.self, migrationPlan: TasksMigrationPlan.self,
                configurations: ModelConfiguration(url: url))
            #expect(try ModelContext(second).fetchCount(FetchDescriptor<TasksSchemaV2.Task>()) == 2)
            try container.persistentContainer.close()
        }
    }

    /// A migration plan runs on an encrypted store with the configuration's key (the plan's
    /// reading of the store's version asked for none), and a store that needs migrating while
    /// another container of this process has it open is a clear error, not "another process".
    @Test func anEncryptedStoreMigratesAndAnOpenOneIsNotMigratedUnderItsContainer() throws {
        try withStoreURL { url in
            var configuration = ModelConfiguration(url: url)
            configuration.encryptionKey = EncryptionKey.random()
            let first = try ModelContainer(for: TasksSchemaV1.Task.self, configurations: configuration)
            let context = ModelContext(first)
            for title in ["a", "b", "a"] { context.insert(TasksSchemaV1.Task(title: title)) }
            try context.save()
            #expect {
                try ModelContainer(
                    for: TasksSchemaV2.Task.self, migrationPlan: TasksMigrationPlan.self,
                    configurations: configuration)
            } throws: { error in
                "\(error)".contains("open in this process") && !"\(error)".contains("another process")
            }
            try first.persistentContainer.close()
            let migrated = try ModelContainer(
                for: TasksSchemaV2.Task.self, migrationPlan: TasksMigrationPlan.self, configurations: configuration)
            #expect(migrated.persistentContainer.store.isEncrypted)
            let tasks = try ModelContext(migrated).fetch(
                FetchDescriptor<TasksSchemaV2.Task>(sortBy: [SortDescriptor(\.title)]))
            #expect(tasks.map(\.title) == ["a", "b"])
            try migrated.persistentContainer.close()
        }
    }

    func makeVersion1Store(at url: URL) throws {
        let container = try ModelContainer(
            for: Schema(versionedSchema: NotesSchemaV1.self), configurations: ModelConfiguration(url: url))
        let context = ModelContext(container)
        context.insert(NotesSchemaV1.Note(title: "First Note", body: "text"))
        context.insert(NotesSchemaV1.Note(title: "Empty", body: ""))
        try context.save()
        try container.persistentContainer.close()
    }

    @Test func aCustomStageRunsOnceBetweenVersions() throws {
        try withStoreURL { url in
            try makeVersion1Store(at: url)
            NotesMigrationPlan.failDidMigrate = false
            do {
                let container = try ModelContainer(
                    for: Schema(versionedSchema: NotesSchemaV2.self), migrationPlan: NotesMigrationPlan.self,
                    configurations: ModelConfiguration(url: url))
                let notes = try ModelContext(container).fetch(FetchDescriptor<NotesSchemaV2.Note>())
                #expect(notes.map(\.heading) == ["First Note"])  // renamed, the empty one dropped
                #expect(notes.map(\.slug) == ["first-note"])
                let again = NotesSchemaV2.Note(heading: "Second", body: "b")
                let context = ModelContext(container)
                context.insert(again)
                try context.save()
                try container.persistentContainer.close()
            }
            // Opened again, the store is at version 2: the stage does not run again.
            let container = try ModelContainer(
                for: Schema(versionedSchema: NotesSchemaV2.self), migrationPlan: NotesMigrationPlan.self,
                configurations: ModelConfiguration(url: url))
            let notes = try ModelContext(container).fetch(
                FetchDescriptor<NotesSchemaV2.Note>(sortBy: [SortDescriptor(\.heading)]))
            #expect(notes.map(\.heading) == ["First Note", "Second"])
            #expect(notes.map(\.slug) == ["first-note", nil])
        }
    }

    @Test func stagesRunInOrderUpToTheNewestVersion() throws {
        try withStoreURL { url in
            try makeVersion1Store(at: url)
            let container = try ModelContainer(
                for: Schema(versionedSchema: NotesSchemaV3.self), migrationPlan: NotesMigrationPlan.self,
                configurations: ModelConfiguration(url: url))
            let notes = try ModelContext(container).fetch(FetchDescriptor<NotesSchemaV3.Note>())
            #expect(notes.map(\.heading) == ["First Note"])
            #expect(notes.map(\.slug) == ["first-note"])
            #expect(notes.map(\.pinned) == [false])
            #expect(notes.map(\.priority) == [3])
        }
    }

    /// An app names its models, not the versioned schema (`typealias Note = NotesSchemaV3.Note`;
    /// `Schema([Note.self])`, whose own version is the default 1.0.0): the plan's schema of
    /// those models is the target, and every stage up to it runs (before, none ran and the
    /// custom stage's slugs were never written).
    @Test func aSchemaOfThePlansModelsRunsEveryStageUpToThem() throws {
        typealias Note = NotesSchemaV3.Note
        try withStoreURL { url in
            try makeVersion1Store(at: url)
            let container = try ModelContainer(
                for: Schema([Note.self]), migrationPlan: NotesMigrationPlan.self,
                configurations: ModelConfiguration(url: url))
            let notes = try ModelContext(container).fetch(FetchDescriptor<Note>())
            #expect(notes.map(\.heading) == ["First Note"])
            #expect(notes.map(\.slug) == ["first-note"])
            try container.persistentContainer.close()
            // The plan's version is recorded: opened again the same way, nothing runs again.
            let again = try ModelContainer(
                for: Note.self, migrationPlan: NotesMigrationPlan.self, configurations: ModelConfiguration(url: url))
            #expect(try ModelContext(again).fetchCount(FetchDescriptor<Note>()) == 1)
        }
    }

    /// A store later than the schema (no stage goes back), and a schema the plan does not
    /// have, are errors that say so: never a silent open.
    @Test func aVersionNoStageReachesIsAnError() throws {
        try withStoreURL { url in
            try makeVersion1Store(at: url)
            _ = try ModelContainer(
                for: Schema(versionedSchema: NotesSchemaV3.self), migrationPlan: NotesMigrationPlan.self,
                configurations: ModelConfiguration(url: url))
            let older = #expect(throws: LogbookError.self) {
                _ = try ModelContainer(
                    for: Schema(versionedSchema: NotesSchemaV2.self), migrationPlan: NotesMigrationPlan.self,
                    configurations: ModelConfiguration(url: url))
            }
            #expect(older?.code == .incompatibleModel)
            #expect("\(older.map { "\($0)" } ?? "")".contains("later than"))
            let foreign = #expect(throws: LogbookError.self) {
                _ = try ModelContainer(
                    for: Schema([Voyage.self]), migrationPlan: NotesMigrationPlan.self,
                    configurations: ModelConfiguration(url: url))
            }
            #expect("\(foreign.map { "\($0)" } ?? "")".contains("none of the migration plan's schemas"))
        }
    }

    /// A lightweight stage that adds a Codable array and an enum with initial values gives the
    /// stored objects those values (it failed with "new attribute … has no default").
    @Test func aLightweightStageGivesNewCodableAndEnumPropertiesTheirInitialValues() throws {
        try withStoreURL { url in
            try makeVersion1Store(at: url)
            let container = try ModelContainer(
                for: NotesSchemaV4.Note.self, migrationPlan: NotesMigrationPlan.self,
                configurations: ModelConfiguration(url: url))
            let notes = try ModelContext(container).fetch(FetchDescriptor<NotesSchemaV4.Note>())
            #expect(notes.map(\.slug) == ["first-note"])
            #expect(notes.map(\.tags) == [[]])
            #expect(notes.map(\.status) == [.open])
        }
    }

    @Test func aFailedStageLeavesTheStoreAsItWas() throws {
        try withStoreURL { url in
            try makeVersion1Store(at: url)
            NotesMigrationPlan.failDidMigrate = true
            defer { NotesMigrationPlan.failDidMigrate = false }
            #expect(throws: CancellationError.self) {
                _ = try ModelContainer(
                    for: Schema(versionedSchema: NotesSchemaV2.self), migrationPlan: NotesMigrationPlan.self,
                    configurations: ModelConfiguration(url: url))
            }
            // Still version 1, with both notes (willMigrate's deletion was undone too).
            let container = try ModelContainer(
                for: Schema(versionedSchema: NotesSchemaV1.self), configurations: ModelConfiguration(url: url))
            let titles = try ModelContext(container).fetch(
                FetchDescriptor<NotesSchemaV1.Note>(sortBy: [SortDescriptor(\.title)])
            ).map(\.title)
            #expect(titles == ["Empty", "First Note"])
        }
    }
}

/// A SwiftData app's store encrypted through its configuration's key.
@Suite struct EncryptedModelContainerTests {
    @Test @MainActor func aModelConfigurationWithAKeyEncryptsTheStore() throws {
        let url = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("notes-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: url) }
        let key = EncryptionKey.random()
        var configuration = ModelConfiguration(url: url)
        configuration.encryptionKey = key
        do {
            let container = try ModelContainer(for: NotesSchemaV1.Note.self, configurations: configuration)
            container.mainContext.insert(NotesSchemaV1.Note(title: "Secret plans", body: "…"))
            try container.mainContext.save()
        }
        for name in try FileManager.default.contentsOfDirectory(atPath: url.path) {
            let data = FileManager.default.contents(atPath: url.appendingPathComponent(name).path) ?? Data()
            #expect(data.range(of: Data("Secret plans".utf8)) == nil, "\(name)")
        }
        #expect(throws: (any Error).self) {
            _ = try ModelContainer(for: NotesSchemaV1.Note.self, configurations: ModelConfiguration(url: url))
        }
        let reopened = try ModelContainer(for: NotesSchemaV1.Note.self, configurations: configuration)
        #expect(try reopened.mainContext.fetch(FetchDescriptor<NotesSchemaV1.Note>()).map(\.title) == ["Secret plans"])
    }
}
