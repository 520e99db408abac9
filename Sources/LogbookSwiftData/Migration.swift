import Foundation
import LogbookEngine
import LogbookGraph

/// One version of an app's models (SwiftData's `VersionedSchema`).
///
/// ```swift
/// enum LibrarySchemaV1: VersionedSchema {
///     static let versionIdentifier = Schema.Version(1, 0, 0)
///     static var models: [any PersistentModel.Type] { [Book.self] }
///     @Model final class Book { var title: String; init(title: String) { self.title = title } }
/// }
/// ```
public protocol VersionedSchema: SendableMetatype {
    /// The version.
    static var versionIdentifier: Schema.Version { get }
    /// Its model classes.
    static var models: [any PersistentModel.Type] { get }
}

/// The versions of an app's models, oldest first, and how a store moves from each to the next
/// (SwiftData's `SchemaMigrationPlan`).
///
/// ```swift
/// enum LibraryMigrationPlan: SchemaMigrationPlan {
///     static var schemas: [any VersionedSchema.Type] { [LibrarySchemaV1.self, LibrarySchemaV2.self] }
///     static var stages: [MigrationStage] {
///         [.custom(fromVersion: LibrarySchemaV1.self, toVersion: LibrarySchemaV2.self,
///                  willMigrate: { context in /* dedupe titles before they become unique */ try context.save() },
///                  didMigrate: nil)]
///     }
/// }
/// let container = try ModelContainer(for: Schema(versionedSchema: LibrarySchemaV2.self),
///                                    migrationPlan: LibraryMigrationPlan.self,
///                                    configurations: ModelConfiguration(url: url))
/// ```
public protocol SchemaMigrationPlan: SendableMetatype {
    /// The versions, oldest first.
    static var schemas: [any VersionedSchema.Type] { get }
    /// The stages, each from one version to the next.
    static var stages: [MigrationStage] { get }
}

/// One step of a migration plan (SwiftData's `MigrationStage`). Sendable, as SwiftData's is,
/// so that a plan may keep its stages in `static let`s in Swift 6 mode:
///
/// ```swift
/// static let migrateV1toV2 = MigrationStage.custom(
///     fromVersion: SchemaV1.self, toVersion: SchemaV2.self,
///     willMigrate: { context in try context.delete(model: Draft.self) }, didMigrate: nil)
/// ```
public enum MigrationStage: Sendable {
    /// The store's structure follows the new version (added, removed and renamed properties
    /// and entities, through `originalName`); no code runs.
    case lightweight(fromVersion: any VersionedSchema.Type, toVersion: any VersionedSchema.Type)
    /// `willMigrate` runs on a context of the old version, then the store moves to the new
    /// version, then `didMigrate` runs on a context of the new version. If either throws, the
    /// store is left as it was before the migration began.
    @preconcurrency case custom(
        fromVersion: any VersionedSchema.Type, toVersion: any VersionedSchema.Type,
        willMigrate: (@Sendable (ModelContext) throws -> Void)?, didMigrate: (@Sendable (ModelContext) throws -> Void)?)

    var from: any VersionedSchema.Type {
        switch self {
        case .lightweight(let f, _), .custom(let f, _, _, _): f
        }
    }
    var to: any VersionedSchema.Type {
        switch self {
        case .lightweight(_, let t), .custom(_, let t, _, _): t
        }
    }
}

/// Runs a migration plan over a store before a container opens it.
enum SchemaMigration {
    /// The engine key (in keyspace 0, beside the schema and the counters) of the model version
    /// the store was last opened with, as text ("1.2.0"). Written by `ModelContainer`.
    static let versionKey: UInt64 = 2

    static func storedVersion(_ store: Store) -> Schema.Version? {
        guard let bytes = try? store.snapshot().value(forKey: versionKey),
            let text = String(bytes: bytes, encoding: .utf8)
        else { return nil }
        let parts = text.split(separator: ".").compactMap { Int($0) }
        return parts.count == 3 ? Schema.Version(parts[0], parts[1], parts[2]) : nil
    }

    static func record(_ version: Schema.Version, in store: Store) throws {
        guard !store.isReadOnly, storedVersion(store) != version else { return }
        var t = Transaction()
        t.put(versionKey, value: Array(version.description.utf8))
        try StoreWriter.commit(t, to: store)
    }

    /// Runs the stages from the version the store holds to `target`'s, and returns the plan's
    /// version of `target` (what the container records).
    ///
    /// `target` is found among the plan's schemas by its models, as SwiftData finds it (an app
    /// writes `Schema([Note.self])` with `typealias Note = NotesSchemaV3.Note`, a schema whose
    /// own version is the default): the schema with the same model classes, else the one
    /// whose structure is the same. A target the plan does not have, or a store at a version
    /// after the target's, is an error, never a silent open.
    @discardableResult
    static func run(
        _ plan: any SchemaMigrationPlan.Type, to target: Schema, at path: String, options: ContainerOptions
    ) throws -> Schema.Version {
        let fs = FileManager.default
        let schemas = plan.schemas
        let targetIndex = try index(of: target, in: schemas)
        let targetVersion = schemas[targetIndex].versionIdentifier
        guard fs.fileExists(atPath: path + "/MANIFEST") else { return targetVersion }  // a new store
        var current = try currentIndex(of: path, in: schemas, encryptionKey: options.encryptionKey)
        if current > targetIndex {
            throw LogbookError(
                .incompatibleModel,
                "the store holds version \(schemas[current].versionIdentifier) of the migration plan, later than the schema's \(targetVersion): no stage goes back"
            )
        }
        guard current < targetIndex else { return targetVersion }
        // The stages open the store with their own models and the copy below replaces it on a
        // failure: a container of this process that has it open would be left on files that
        // are gone.
        if SharedStores.shared.isOpen(path) {
            throw LogbookError(
                .invalidArgument,
                "the store at \(path) needs migrating and is open in this process (another container): close that container first"
            )
        }
        if Store.hasWriters(at: path) {
            throw LogbookError.wrap(
                EngineError(
                    .locked, "the store needs migrating and another process has it open for writing: close it first",
                    path: path))
        }
        let backup = path + ".migrating"
        try? fs.removeItem(atPath: backup)
        do { try fs.copyItem(atPath: path, toPath: backup) } catch {
            throw LogbookError(.store, "could not keep a copy of the store before migrating it: \(error)")
        }
        do {
            while current < targetIndex {
                let from = schemas[current]
                guard
                    let stage = plan.stages.first(where: {
                        $0.from.versionIdentifier == from.versionIdentifier
                    })
                else {
                    throw LogbookError(
                        .incompatibleModel,
                        "the migration plan has no stage from version \(from.versionIdentifier), which the store holds")
                }
                try apply(stage, at: path, options: options)
                guard let next = schemas.firstIndex(where: { $0.versionIdentifier == stage.to.versionIdentifier }),
                    next > current
                else {
                    throw LogbookError(.invalidModel, "a stage of the migration plan goes back or nowhere")
                }
                current = next
            }
        } catch {
            // The store as it was: the copy taken before the first stage.
            try? fs.removeItem(atPath: path)
            try? fs.moveItem(atPath: backup, toPath: path)
            throw error
        }
        try? fs.removeItem(atPath: backup)
        return targetVersion
    }

    /// The plan's index of `target`: the schema of the same model classes, else of the same
    /// structure (entities, attributes and relationships by name and type).
    static func index(of target: Schema, in schemas: [any VersionedSchema.Type]) throws -> Int {
        let classes = Set(target.types.map(ObjectIdentifier.init))
        if let i = schemas.firstIndex(where: {
            Set(Schema(versionedSchema: $0).types.map(ObjectIdentifier.init)) == classes
        }) {
            return i
        }
        let shape = try structure(of: target.managedObjectModel())
        if let i = try schemas.firstIndex(where: {
            try structure(of: Schema(versionedSchema: $0).managedObjectModel()) == shape
        }) {
            return i
        }
        throw LogbookError(
            .invalidModel,
            "the schema (\(target.entityNames.joined(separator: ", "))) is none of the migration plan's schemas (versions \(schemas.map { "\($0.versionIdentifier)" }.joined(separator: ", ")))"
        )
    }

    /// A model's structure as text: each entity's attributes and relationships, by name and type.
    static func structure(of model: ManagedObjectModel) -> Set<String> {
        var lines = Set<String>()
        for e in model.entities {
            lines.insert("entity \(e.name) \(e.parentEntity ?? "")")
            for a in e.attributes where !a.isTransient {
                lines.insert("\(e.name).\(a.name) \(a.type) \(a.isOptional)")
            }
            for r in e.relationships { lines.insert("\(e.name).\(r.name) → \(r.destination) \(r.isToMany)") }
        }
        return lines
    }

    /// The plan's index of the version the store holds: the one recorded, when the store has
    /// its structure (a container without a plan records its schema's version, the default one
    /// when not given), else the first whose structure the store has.
    static func currentIndex(
        of path: String, in schemas: [any VersionedSchema.Type], encryptionKey: (any EncryptionKeyProvider)? = nil
    ) throws -> Int {
        var readOptions = StoreOptions()
        readOptions.readOnly = true
        readOptions.encryptionKey = encryptionKey
        let store: Store
        do { store = try Store.open(at: path, options: readOptions) } catch { throw LogbookError.wrap(error) }
        defer { try? store.close() }
        let stored = try store.snapshot().value(forKey: StoredSchema.schemaKey).map(StoredSchema.decode)
        func holds(_ s: any VersionedSchema.Type) throws -> Bool {
            guard let stored else { return false }
            var made = StoredSchema.make(for: try Schema(versionedSchema: s).managedObjectModel(), previous: stored)
            made.format = stored.format
            return made == stored
        }
        if let version = storedVersion(store), let i = schemas.firstIndex(where: { $0.versionIdentifier == version }),
            try holds(schemas[i])
        {
            return i
        }
        for (i, s) in schemas.enumerated() where try holds(s) { return i }
        throw LogbookError(.incompatibleModel, "the store matches none of the migration plan's schemas")
    }

    static func apply(_ stage: MigrationStage, at path: String, options: ContainerOptions) throws {
        let url = URL(fileURLWithPath: path)
        func open(_ version: any VersionedSchema.Type) throws -> ModelContainer {
            var configuration = ModelConfiguration(url: url)
            configuration.encryptionKey = options.encryptionKey
            return try ModelContainer(
                for: Schema(versionedSchema: version), migrationPlan: nil, configurations: [configuration])
        }
        if case .custom(_, _, let will?, _) = stage {
            let old = try open(stage.from)
            defer { try? old.persistentContainer.close() }
            let context = ModelContext(old)
            try will(context)
            try context.save()
        }
        let new = try open(stage.to)
        defer { try? new.persistentContainer.close() }
        if case .custom(_, _, _, let did?) = stage {
            let context = ModelContext(new)
            try did(context)
            try context.save()
        }
    }
}
