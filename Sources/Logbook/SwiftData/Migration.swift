import Foundation
import LogbookEngine

/// One version of an app's models (SwiftData's `VersionedSchema`).
///
/// ```swift
/// enum LibrarySchemaV1: VersionedSchema {
///     static let versionIdentifier = Schema.Version(1, 0, 0)
///     static var models: [any PersistentModel.Type] { [Book.self] }
///     @Model final class Book { var title: String; init(title: String) { self.title = title } }
/// }
/// ```
public protocol VersionedSchema {
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
public protocol SchemaMigrationPlan {
    /// The versions, oldest first.
    static var schemas: [any VersionedSchema.Type] { get }
    /// The stages, each from one version to the next.
    static var stages: [MigrationStage] { get }
}

/// One step of a migration plan (SwiftData's `MigrationStage`).
public enum MigrationStage {
    /// The store's structure follows the new version (added, removed and renamed properties
    /// and entities, through `originalName`); no code runs.
    case lightweight(fromVersion: any VersionedSchema.Type, toVersion: any VersionedSchema.Type)
    /// `willMigrate` runs on a context of the old version, then the store moves to the new
    /// version, then `didMigrate` runs on a context of the new version. If either throws, the
    /// store is left as it was before the migration began.
    case custom(
        fromVersion: any VersionedSchema.Type, toVersion: any VersionedSchema.Type,
        willMigrate: ((ModelContext) throws -> Void)?, didMigrate: ((ModelContext) throws -> Void)?)

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

    static func run(
        _ plan: any SchemaMigrationPlan.Type, to target: Schema, at path: String, options: ContainerOptions
    ) throws {
        let fs = FileManager.default
        guard fs.fileExists(atPath: path + "/MANIFEST") else { return }  // a new store
        let schemas = plan.schemas
        guard let targetIndex = schemas.firstIndex(where: { $0.versionIdentifier == target.version }) else {
            throw LogbookError(
                .invalidModel, "the migration plan has no schema of version \(target.version)")
        }
        var current = try currentIndex(of: path, in: schemas)
        guard current < targetIndex else { return }
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
                        .incompatibleModel, "the migration plan has no stage from version \(from.versionIdentifier)")
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
    }

    /// The plan's index of the version the store holds: the one recorded, else the first whose
    /// structure the store has.
    static func currentIndex(of path: String, in schemas: [any VersionedSchema.Type]) throws -> Int {
        var readOptions = StoreOptions()
        readOptions.readOnly = true
        let store: Store
        do { store = try Store.open(at: path, options: readOptions) } catch { throw LogbookError.wrap(error) }
        defer { try? store.close() }
        if let version = storedVersion(store), let i = schemas.firstIndex(where: { $0.versionIdentifier == version }) {
            return i
        }
        let stored = try store.snapshot().value(forKey: StoredSchema.schemaKey).map(StoredSchema.decode)
        for (i, s) in schemas.enumerated() {
            let model = try Schema(versionedSchema: s).managedObjectModel()
            if let stored, StoredSchema.make(for: model, previous: stored) == stored { return i }
        }
        throw LogbookError(.incompatibleModel, "the store matches none of the migration plan's schemas")
    }

    static func apply(_ stage: MigrationStage, at path: String, options: ContainerOptions) throws {
        let url = URL(fileURLWithPath: path)
        func open(_ version: any VersionedSchema.Type) throws -> ModelContainer {
            try ModelContainer(
                for: Schema(versionedSchema: version), migrationPlan: nil,
                configurations: [ModelConfiguration(url: url)])
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
