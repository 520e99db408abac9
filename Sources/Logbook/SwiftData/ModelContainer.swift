import Foundation
import LogbookEngine

/// Where and how a container keeps its store (SwiftData's `ModelConfiguration`).
///
/// ```swift
/// ModelConfiguration(url: URL(filePath: "/var/lib/app/library.store"))
/// ModelConfiguration(isStoredInMemoryOnly: true)       // tests and previews: no file
/// ```
public struct ModelConfiguration: Sendable, Hashable {
    /// The configuration's name (the store's name when no URL is given).
    public let name: String
    /// The store's directory.
    public let url: URL
    /// Whether the store lives in memory only: the same engine, no file, gone on close.
    public let isStoredInMemoryOnly: Bool
    /// Whether contexts may save (false opens the store read-only).
    public let allowsSave: Bool
    /// The schema this configuration stores, when not the container's.
    public let schema: Schema?

    /// A store named `name` (default "default") in the application support directory, or in
    /// memory.
    public init(
        _ name: String? = nil, schema: Schema? = nil, isStoredInMemoryOnly: Bool = false, allowsSave: Bool = true
    ) {
        let name = name ?? "default"
        self.name = name
        self.schema = schema
        self.isStoredInMemoryOnly = isStoredInMemoryOnly
        self.allowsSave = allowsSave
        url =
            isStoredInMemoryOnly
            ? URL(fileURLWithPath: "/memory/\(name).logbook")
            : URL(fileURLWithPath: PersistentContainer.defaultDirectory(name))
    }

    /// A store in the directory `url`.
    public init(_ name: String? = nil, schema: Schema? = nil, url: URL, allowsSave: Bool = true) {
        self.name = name ?? url.deletingPathExtension().lastPathComponent
        self.schema = schema
        self.url = url
        self.isStoredInMemoryOnly = false
        self.allowsSave = allowsSave
    }

    public static func == (a: Self, b: Self) -> Bool {
        a.name == b.name && a.url == b.url && a.isStoredInMemoryOnly == b.isStoredInMemoryOnly
            && a.allowsSave == b.allowsSave
    }
    public func hash(into h: inout Hasher) { h.combine(url) }
}

/// The schema and store of an app's models, and the contexts that use them (SwiftData's
/// `ModelContainer`).
///
/// ```swift
/// let container = try ModelContainer(for: Book.self, Author.self,
///                                    configurations: ModelConfiguration(url: storeURL))
/// let context = await container.mainContext
/// ```
public final class ModelContainer: Sendable {
    /// The model classes.
    public let schema: Schema
    /// The store's configuration (one store per container in Logbook).
    public let configurations: [ModelConfiguration]
    /// The Core Data–style container underneath.
    public let persistentContainer: PersistentContainer
    let entityInfo: [String: ModelEntityInfo]
    private let main = Locked<UncheckedSendable<ModelContext>?>(nil)

    /// A container for `types` (and the classes their relationships reach).
    public convenience init(for forTypes: any PersistentModel.Type..., configurations: ModelConfiguration...) throws {
        try self.init(for: Schema(forTypes), migrationPlan: nil, configurations: configurations)
    }

    /// A container for `types`, migrated by `migrationPlan` (whose schema of these classes is
    /// the version they are) when the store holds an earlier version.
    ///
    /// ```swift
    /// typealias Note = NotesSchemaV3.Note
    /// let container = try ModelContainer(
    ///     for: Note.self, migrationPlan: NotesMigrationPlan.self, configurations: ModelConfiguration(url: url))
    /// ```
    public convenience init(
        for forTypes: any PersistentModel.Type..., migrationPlan: (any SchemaMigrationPlan.Type)?,
        configurations: ModelConfiguration...
    ) throws {
        try self.init(for: Schema(forTypes), migrationPlan: migrationPlan, configurations: configurations)
    }

    /// A container for `schema`, migrated by `migrationPlan` when the store holds an earlier
    /// version.
    public convenience init(
        for schema: Schema, migrationPlan: (any SchemaMigrationPlan.Type)? = nil, configurations: ModelConfiguration...
    ) throws {
        try self.init(for: schema, migrationPlan: migrationPlan, configurations: configurations)
    }

    /// A container for `schema`, migrated by `migrationPlan` when the store holds an earlier
    /// version.
    public init(
        for schema: Schema, migrationPlan: (any SchemaMigrationPlan.Type)? = nil, configurations: [ModelConfiguration]
    ) throws {
        guard configurations.count <= 1 else {
            throw LogbookError(.invalidArgument, "a Logbook container has one store: give one configuration")
        }
        let configuration = configurations.first ?? ModelConfiguration()
        self.schema = schema
        self.configurations = [configuration]
        var options = ContainerOptions()
        options.readOnly = !configuration.allowsSave
        options.inMemory = configuration.isStoredInMemoryOnly
        var version = schema.version
        if let migrationPlan {
            version =
                migrationPlan.schemas[try SchemaMigration.index(of: schema, in: migrationPlan.schemas)]
                .versionIdentifier
            if !configuration.isStoredInMemoryOnly {
                version = try SchemaMigration.run(
                    migrationPlan, to: schema, at: configuration.url.path, options: options)
            }
        }
        let model = try schema.managedObjectModel()
        persistentContainer = try PersistentContainer(
            name: configuration.name, model: model, directory: configuration.url.path, options: options)
        if configuration.allowsSave { try SchemaMigration.record(version, in: persistentContainer.store) }
        var infos: [String: ModelEntityInfo] = [:]
        for t in schema.types {
            let info = try ModelEntityInfo.info(for: t)
            infos[info.name] = info
        }
        entityInfo = infos
    }

    /// The context of the main actor (autosave on).
    @MainActor public var mainContext: ModelContext {
        main.withLock { box in
            if let box { return box.value }
            let context = ModelContext(self, concurrencyType: .mainQueue)
            context.autosaveEnabled = true
            box = UncheckedSendable(context)
            return context
        }
    }

    /// Deletes every object of every model from the store (a batch delete per entity).
    public func deleteAllData() throws {
        let context = persistentContainer.newContext(concurrencyType: .confinement)
        for info in entityInfo.values {
            _ = try context.execute(BatchDeleteRequest(entityName: info.name))
        }
    }

    /// What Logbook knows of a model class of this container.
    func info(for type: any PersistentModel.Type) throws -> ModelEntityInfo {
        let name = ModelEntityInfo.entityName(of: type)
        guard let info = entityInfo[name] else {
            throw LogbookError(.unknownEntity, "\(name) is not in this container's schema", entity: name)
        }
        return info
    }

    /// The object ID an identifier names in this container's store, nil for another store or
    /// a temporary identifier.
    func objectID(for id: PersistentIdentifier) -> ObjectID? {
        guard let uri = id.uriRepresentation else { return nil }
        return persistentContainer.objectID(forURIRepresentation: uri)
    }
}
