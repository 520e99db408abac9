import Foundation
import LogbookEngine
import LogbookGraph

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
    /// The shared directory the store lives in (see `GroupContainer`).
    public let groupContainer: GroupContainer
    /// The CloudKit database the store mirrors to (see `CloudKitDatabase`).
    public let cloudKitDatabase: CloudKitDatabase
    /// The store's encryption key (Logbook's, not in SwiftData): a new store is encrypted with
    /// it, an encrypted one opens only with it (`ContainerOptions.encryptionKey`). Not part of
    /// the configuration's equality.
    ///
    /// ```swift
    /// var configuration = ModelConfiguration("Notes")
    /// configuration.encryptionKey = KeyClosure { try EncryptionKey(contentsOfFile: keyPath) }
    /// ```
    public var encryptionKey: (any EncryptionKeyProvider)?
    /// Record, with each saved change, the members every to-many change added and removed
    /// (Logbook's, not in SwiftData; `ContainerOptions.historyRecordsMemberChanges`): what
    /// `LogbookSync` pushes to PostgreSQL. Not part of the configuration's equality.
    ///
    /// ```swift
    /// var configuration = ModelConfiguration("Notes")
    /// configuration.recordsChangesForSync = true
    /// let container = try ModelContainer(for: Note.self, configurations: configuration)
    /// let sync = try SyncEngine(container: container.persistentContainer,
    ///                           configuration: SyncConfiguration(url: "postgres://alice@db/app"))
    /// ```
    public var recordsChangesForSync = false

    /// The directory an app shares with its extensions (SwiftData's app group). Linux has no
    /// entitlements: `.automatic` is the app's own directory, as on Apple platforms for an app
    /// without an app group, and `.identifier(id)` is the directory `Group Containers/<id>`
    /// in the application-support directory (`~/.local/share` on Linux), where every program of the user that names
    /// the same group finds the same store (several may have it open at once).
    public struct GroupContainer: Sendable, Hashable {
        let identifier: String?
        /// The first app group of the app's entitlements on Apple platforms; none on Linux.
        public static let automatic = GroupContainer(identifier: nil)
        /// No app group: the app's own application-support directory.
        public static let none = GroupContainer(identifier: nil)
        /// The group `groupName` (for example "group.com.example.notes").
        public static func identifier(_ groupName: String) -> GroupContainer { GroupContainer(identifier: groupName) }
    }

    /// The CloudKit database a store mirrors to. CloudKit does not exist on Linux: `.automatic`
    /// mirrors nothing (as on Apple platforms for an app without the iCloud entitlement), and a
    /// named `.private` database is an error when the container opens, never silently ignored.
    public struct CloudKitDatabase: Sendable, Hashable {
        let container: String?
        let isAutomatic: Bool
        /// The app's CloudKit container when the app has the entitlement: none on Linux.
        public static let automatic = CloudKitDatabase(container: nil, isAutomatic: true)
        /// No mirroring.
        public static let none = CloudKitDatabase(container: nil, isAutomatic: false)
        /// The private database of the CloudKit container `name`: refused on Linux.
        public static func `private`(_ name: String) -> CloudKitDatabase {
            CloudKitDatabase(container: name, isAutomatic: false)
        }
    }

    /// A store named `name` (default "default") in the application support directory (or the
    /// group's shared directory), or in memory.
    ///
    /// ```swift
    /// ModelConfiguration("Notes", groupContainer: .identifier("group.com.example.notes"))
    /// ```
    public init(
        _ name: String? = nil, schema: Schema? = nil, isStoredInMemoryOnly: Bool = false, allowsSave: Bool = true,
        groupContainer: GroupContainer = .automatic, cloudKitDatabase: CloudKitDatabase = .automatic
    ) {
        let name = name ?? "default"
        self.name = name
        self.schema = schema
        self.isStoredInMemoryOnly = isStoredInMemoryOnly
        self.allowsSave = allowsSave
        self.groupContainer = groupContainer
        self.cloudKitDatabase = cloudKitDatabase
        if isStoredInMemoryOnly {
            url = URL(fileURLWithPath: "/memory/\(name).logbook")
        } else if let group = groupContainer.identifier {
            url = URL(fileURLWithPath: PersistentContainer.defaultDirectory(name, group: group))
        } else {
            url = URL(fileURLWithPath: PersistentContainer.defaultDirectory(name))
        }
    }

    /// A store in the directory `url`.
    public init(
        _ name: String? = nil, schema: Schema? = nil, url: URL, allowsSave: Bool = true,
        cloudKitDatabase: CloudKitDatabase = .automatic
    ) {
        self.name = name ?? url.deletingPathExtension().lastPathComponent
        self.schema = schema
        self.url = url
        self.isStoredInMemoryOnly = false
        self.allowsSave = allowsSave
        self.groupContainer = .none
        self.cloudKitDatabase = cloudKitDatabase
    }

    public static func == (a: Self, b: Self) -> Bool {
        a.name == b.name && a.url == b.url && a.isStoredInMemoryOnly == b.isStoredInMemoryOnly
            && a.allowsSave == b.allowsSave && a.cloudKitDatabase == b.cloudKitDatabase
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
        if let cloud = configuration.cloudKitDatabase.container {
            throw LogbookError(
                .invalidArgument,
                "CloudKit is not available on Linux: the configuration names the CloudKit container \(cloud); give .automatic or .none"
            )
        }
        self.schema = schema
        self.configurations = [configuration]
        var options = ContainerOptions()
        options.readOnly = !configuration.allowsSave
        options.inMemory = configuration.isStoredInMemoryOnly
        options.encryptionKey = configuration.encryptionKey
        // SwiftData records history by default (read with `ModelContext.fetchHistory(_:)`).
        options.persistentHistoryTracking = true
        options.historyRecordsMemberChanges = configuration.recordsChangesForSync
        // Every container on disk follows the other processes that write the store (an app's
        // widget, a daemon): their saves reach its contexts, as SwiftData's do.
        options.observesRemoteChanges = true
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
