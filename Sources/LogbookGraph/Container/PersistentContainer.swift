import Foundation
import LogbookEngine

/// Options of a container's store.
public struct ContainerOptions: Sendable {
    /// When a save is durable (`.full`: synced before `save()` returns).
    public var durability: Durability = .full
    /// When the store compacts itself.
    public var compaction: CompactionPolicy = .default
    /// The size at which a journal segment is sealed and a new one started.
    public var segmentSize: Int = 64 << 20
    /// Segments below `StoreOptions.minimumSegmentSize`, for tests (`StoreOptions`).
    package var allowsTinySegments = false
    /// Journal bytes after which a checkpoint of the indexes is written in the background.
    public var checkpointInterval: Int = 32 << 20
    /// Open the store without writing (and without the writer's lock); saves fail.
    public var readOnly = false
    /// Keep the store in memory only (`StoreOptions.inMemory`): the same engine, no file; the
    /// directory is then only a name.
    public var inMemory = false
    /// The model configuration whose entities the store holds (a model file's
    /// `<configuration>`; nil: every entity). The other entities cannot be inserted or fetched
    /// in this container (an `.unknownEntity` error), and a relationship from a member entity to
    /// one outside the configuration is an `.invalidModel` error, as Core Data forbids
    /// relationships across stores.
    public var configuration: String?
    /// Record every save's changes as history (Core Data's `NSPersistentHistoryTrackingKey`):
    /// who saved (the context's `name` and `transactionAuthor`), when, and which objects were
    /// inserted, updated (with the names of the properties changed) and deleted (with the
    /// values of attributes marked `preservesValueInHistoryOnDeletion`). Read it with
    /// `history(after:)` or a `HistoryRequest`; purge it with `deleteHistory(before:)`. Off by
    /// default: with it off a save writes nothing more.
    public var persistentHistoryTracking = false
    /// How much recorded history a compaction keeps (`.all` by default: everything not
    /// purged with `deleteHistory(before:)`). The retention is applied as each compaction
    /// starts, automatic or not, by purging what it lets go; between compactions every
    /// transaction stays readable, for `history(after:)` and for a follower.
    public var historyRetention: HistoryRetention = .all
    /// With `persistentHistoryTracking`: each recorded transaction also names, for every to-many
    /// relationship it changed, the members it added and removed and whether it reordered them
    /// (`PersistentHistoryTransaction.memberChanges`; Core Data records only that the
    /// relationship changed). What `LogbookSync` pushes; off by default (it writes history
    /// records in format 2, which releases before this one do not read).
    public var historyRecordsMemberChanges = false
    /// Follow the commits of the process that writes the store (Core Data's
    /// `NSPersistentStoreRemoteChangeNotificationPostOptionKey`): a thread waits for the
    /// store's files to change (inotify, and a poll every half second), reads what other
    /// processes committed, posts `PersistentContainer.remoteChangeNotification`, tells
    /// `observeRemoteChanges` handlers, and makes the contexts that merge automatically merge it
    /// as another context's save — in a read-only container and in one that writes beside
    /// other writing processes. See `RemoteChange`.
    public var observesRemoteChanges = false
    /// The store's encryption key (`StoreOptions.encryptionKey`): a new store is encrypted
    /// with it (AES-256-GCM), an encrypted one opens only with it. Asked once, when the
    /// container opens its store. Change it with `PersistentContainer.changeEncryptionKey`.
    ///
    /// ```swift
    /// var options = ContainerOptions()
    /// options.encryptionKey = KeyClosure { try EncryptionKey(contentsOfFile: "/run/secrets/people.key") }
    /// let container = try PersistentContainer(name: "People", model: model, options: options)
    /// ```
    public var encryptionKey: (any EncryptionKeyProvider)?
    /// Open an engine store of this container's own instead of sharing the one other containers
    /// of this process have open on the same directory: the container then writes beside them
    /// as another process would (the commit lock, catching up, conflicts with their saves). For
    /// the tests that stand for several processes in one (the context checker).
    package var opensItsOwnStore = false
    /// The defaults: full durability, automatic compaction.
    public init() {}
}

/// The stack in one object: the model, the store on disk, the view context on the main queue,
/// and background contexts on queues of their own (Core Data's `NSPersistentContainer`).
///
/// ```swift
/// let container = try PersistentContainer(name: "People", model: model)   // ~/…/People.logbook
/// let person = try container.viewContext.insertNewObject(forEntityName: "Person")
/// try container.viewContext.save()
///
/// let background = container.newBackgroundContext()
/// let ids = try await background.perform { … return objectIDs }          // IDs cross, objects don't
/// ```
///
/// The store records its schema. Opening it with another model migrates lightweight changes
/// (an entity or attribute added, an attribute or entity removed, a rename declared with
/// `renamedFrom:`, an index added or dropped) in one transaction; anything else is an
/// `.incompatibleModel` error that says what changed.
public final class PersistentContainer: Sendable {
    /// The container's name (the store's directory is `<name>.logbook` unless one is given).
    public let name: String
    /// The model the store holds.
    public let model: ManagedObjectModel
    /// The store's directory.
    public let storeDirectory: String
    /// The storage engine underneath, for statistics, verification and compaction.
    public let store: Store
    package let storeLayout: StoreLayout
    /// The entities of the configuration the container was opened for (nil: all).
    let configurationEntities: Set<Int>?
    /// What a compaction keeps of the recorded history (`ContainerOptions.historyRetention`).
    public let historyRetention: HistoryRetention
    /// Whether saves record history (`ContainerOptions.persistentHistoryTracking`).
    let historyTracking: Bool
    /// The store as this process's containers share it (serial numbers, order pages, the save
    /// lock, and the other containers whose contexts hear of saves).
    let shared: SharedStore
    private let contexts = Locked<[WeakContext]>([])
    private let closed = Locked(false)
    /// The remote-change follower (`ContainerOptions.observesRemoteChanges`) and its handlers.
    let remote = RemoteChangeState()
    /// The door to the store's commits, with the save lock (`Storage/StoreWriter.swift`).
    let writer: StoreWriter
    private let viewContextBox = Locked<ManagedObjectContext?>(nil)

    struct WeakContext: @unchecked Sendable {
        // A weak reference only; read under the `contexts` lock.
        weak var context: ManagedObjectContext?
    }

    /// Opens (or creates) the store for `model`. With no directory, the store is
    /// `<name>.logbook` under the user's application support directory (or `$TMPDIR` when there
    /// is none).
    public init(
        name: String, model: ManagedObjectModel, directory: String? = nil,
        options: ContainerOptions = ContainerOptions()
    ) throws {
        self.name = name
        self.model = model
        self.storeDirectory = directory ?? Self.defaultDirectory(name)
        configurationEntities = try Self.entities(of: options.configuration, in: model)
        historyTracking = options.persistentHistoryTracking
        var storeOptions = StoreOptions()
        storeOptions.durability = options.durability
        storeOptions.compaction = options.compaction
        storeOptions.segmentSize = options.segmentSize
        storeOptions.allowsTinySegments = options.allowsTinySegments
        storeOptions.checkpointInterval = options.checkpointInterval
        storeOptions.readOnly = options.readOnly
        storeOptions.inMemory = options.inMemory
        let key: EncryptionKey?
        do { key = try options.encryptionKey?.encryptionKey() } catch { throw LogbookError.wrap(error) }
        storeOptions.encryptionKey = key
        historyRetention = options.historyRetention
        let fingerprint = SharedStores.Options(
            readOnly: options.readOnly, durability: options.durability,
            historyTracking: options.persistentHistoryTracking, historyRetention: options.historyRetention,
            memberChanges: options.historyRecordsMemberChanges)
        let directory = storeDirectory
        let tracking = historyTracking
        let memberChanges = options.persistentHistoryTracking && options.historyRecordsMemberChanges
        var openedHere = false
        func openStore() throws -> SharedStore {
            openedHere = true
            let retention = RetentionHook()
            if options.persistentHistoryTracking { storeOptions.beforeCompaction = { retention.run() } }
            let store: Store
            do { store = try Store.open(at: directory, options: storeOptions) } catch {
                throw LogbookError.wrap(error)
            }
            do {
                let (layout, counters) = try Migration.prepare(store: store, model: model)
                var byRoot: [UInt16: UInt64] = [:]
                for i in counters.indices where model.root[i] == i { byRoot[layout.keyspace[i]] = counters[i] }
                let shared = SharedStore(
                    store: store,
                    writer: StoreWriter(store: store, historyTracking: tracking, memberChanges: memberChanges),
                    schema: layout.schema, fingerprint: fingerprint, counters: byRoot)
                retention.shared.withLock { $0.value = shared }
                return shared
            } catch {
                try? store.close()
                throw error
            }
        }
        // A store on disk is shared by the containers of this process that open it; an
        // in-memory store is each container's own.
        let shared = try SharedStores.shared.store(
            at: directory, unshared: options.inMemory || options.opensItsOwnStore, readOnly: options.readOnly,
            make: openStore)
        do {
            if shared.fingerprint != fingerprint {
                throw LogbookError(
                    .invalidArgument,
                    "the store at \(directory) is open in this process with other options (read-only, durability, history tracking, retention or member changes): open it with the same"
                )
            }
            if !openedHere, shared.store.encryptionKeyInUse != key {
                throw LogbookError.wrap(
                    EngineError(
                        shared.store.encryptionKeyInUse == nil ? .notEncrypted : key == nil ? .keyRequired : .wrongKey,
                        "the store at \(directory) is open in this process with another encryption key, or none",
                        path: directory))
            }
            if !openedHere, StoredSchema.make(for: model, previous: shared.schema) != shared.schema {
                throw LogbookError(
                    .incompatibleModel,
                    "the store at \(directory) is open in this process with another model: open it with the same model, or close the other container first"
                )
            }
        } catch {
            try? shared.leave()
            throw error
        }
        self.shared = shared
        store = shared.store
        writer = shared.writer
        storeLayout = StoreLayout(schema: shared.schema, model: model)
        shared.attach(self)
        if options.observesRemoteChanges && !options.inMemory { startFollowing() }
    }

    /// The model indexes of a configuration's entities (their sub-entities included), checked.
    static func entities(of configuration: String?, in model: ManagedObjectModel) throws -> Set<Int>? {
        guard let configuration else { return nil }
        guard let names = model.configurations[configuration] else {
            throw LogbookError(
                .invalidArgument,
                "the model has no configuration named \(configuration) (it has \(model.configurations.keys.sorted().joined(separator: ", ")))"
            )
        }
        var members = Set<Int>()
        for name in names {
            guard let i = model.byName[name] else {
                throw LogbookError(.invalidModel, "configuration \(configuration) names unknown entity \(name)")
            }
            members.formUnion(model.layouts[i].descendants)
            members.formUnion(model.layouts[i].ancestors)
        }
        for i in members {
            for (r, rel) in model.flattened[i].relationships.enumerated()
            where !members.contains(model.layouts[i].relationshipDestination[r]) {
                throw LogbookError(
                    .invalidModel,
                    "\(rel.name) of \(model.entities[i].name) points to \(rel.destination), which is not in configuration \(configuration)",
                    entity: model.entities[i].name, key: rel.name)
            }
        }
        return members
    }

    /// Throws unless the entity belongs to the configuration the container was opened for.
    func checkConfiguration(_ layout: EntityLayout) throws {
        guard let members = configurationEntities, !members.contains(layout.index) else { return }
        throw LogbookError(
            .unknownEntity, "\(layout.name) is not in the configuration this container was opened for",
            entity: layout.name)
    }

    /// Encrypts the store at `directory`, changes its key, or decrypts it (`newKey` nil): its
    /// records are written again with the new key and one atomic switch makes them the
    /// store's (`Store.changeKey`); a crash before the switch leaves the store with its old
    /// key. No container may have the store open meanwhile (an error otherwise).
    ///
    /// ```swift
    /// try PersistentContainer.changeEncryptionKey(ofStoreAt: path, from: nil, to: EncryptionKey.random())
    /// ```
    public static func changeEncryptionKey(
        ofStoreAt directory: String, from oldKey: (any EncryptionKeyProvider)?, to newKey: EncryptionKey?
    ) throws {
        var options = StoreOptions()
        options.encryptionKey = oldKey
        do { try Store.changeKey(at: directory, options: options, to: newKey) } catch { throw LogbookError.wrap(error) }
    }

    package static func defaultDirectory(_ name: String, group: String? = nil) -> String {
        var base =
            FileManager.default.urls(for: .applicationSupportDirectory, in: .userDomainMask).first?.path
            ?? (ProcessInfo.processInfo.environment["TMPDIR"] ?? "/tmp")
        // An app group's directory, shared by every program of the user that names the group.
        if let group { base += "/Group Containers/" + group }
        try? FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true)
        return base + "/" + name + ".logbook"
    }

    /// The context of the main queue, for the user interface.
    public var viewContext: ManagedObjectContext {
        viewContextBox.withLock { box in
            if let c = box { return c }
            let c = ManagedObjectContext(container: self, concurrencyType: .mainQueue)
            c.name = "view"
            box = c
            contexts.withLock { $0.append(WeakContext(context: c)) }
            return c
        }
    }

    /// A new context on a private queue of its own.
    public func newBackgroundContext() -> ManagedObjectContext { newContext(concurrencyType: .privateQueue) }

    /// A new context of any concurrency type.
    public func newContext(concurrencyType: ManagedObjectContext.ConcurrencyType) -> ManagedObjectContext {
        let c = ManagedObjectContext(container: self, concurrencyType: concurrencyType)
        contexts.withLock { list in
            list.removeAll { $0.context == nil }
            list.append(WeakContext(context: c))
        }
        return c
    }

    /// A new page number in an order keyspace: above every page the store holds. Called under
    /// the save lock.
    func nextOrderPage(keyspace: UInt16, snapshot: Snapshot) -> UInt64 {
        shared.orderPages.withLock { next in
            if next[keyspace] == nil {
                // Pages have the keyspace's largest ids (from `pageBase` up): the last key, if
                // it is a page, is the last page.
                var last: UInt64 = 0
                if let id = snapshot.keyBounds(inKeyspace: keyspace).map({ EngineKey(rawValue: $0.upperBound).id }),
                    id >= OrderPages.pageBase
                {
                    last = id & (OrderPages.pageBase - 1)
                }
                next[keyspace] = last + 1
            }
            defer { next[keyspace]! += 1 }
            return next[keyspace]!
        }
    }

    /// Registers a context made elsewhere (a child context) to hear of saves.
    func adopt(_ c: ManagedObjectContext) {
        contexts.withLock { list in
            list.removeAll { $0.context == nil }
            list.append(WeakContext(context: c))
        }
    }

    /// Runs `body` with a new background context, on its queue.
    public func performBackgroundTask(_ body: @escaping @Sendable (ManagedObjectContext) -> Void) {
        let c = newBackgroundContext()
        c.perform { body(c) }
    }

    /// The object ID a URI from `ObjectID.uriRepresentation` names, if it is of this store.
    public func objectID(forURIRepresentation uri: URL) -> ObjectID? {
        guard uri.scheme == "x-logbook", uri.host?.uppercased() == storeLayout.identity.uuid.uuidString.uppercased()
        else { return nil }
        let parts = uri.path.split(separator: "/")
        guard parts.count == 2, parts[1].hasPrefix("p"), let serial = UInt64(parts[1].dropFirst()),
            let entity = String(parts[0]).removingPercentEncoding, let ks = storeLayout.identity.keyspaces[entity],
            serial <= EngineKey.maxID
        else { return nil }
        return ObjectID(store: storeLayout.identity, key: EngineKey(keyspace: ks, id: serial).rawValue)
    }

    /// Closes the store (writing a checkpoint). Contexts and objects must not be used after.
    ///
    /// Another container of this process on the same store keeps it open: the store closes
    /// with the last of them.
    public func close() throws {
        let first = closed.withLock { c -> Bool in
            defer { c = true }
            return !c
        }
        guard first else { return }
        stopFollowing()
        try shared.leave()
    }

    deinit {
        stopFollowing()
        if !closed.withLock({ $0 }) { try? shared.leave() }
    }

    // MARK: Serial numbers

    /// `count` consecutive keys of an entity (its keyspace in the high bits). Serial numbers
    /// are counted per inheritance tree (by its root), so that the objects of a tree never
    /// share a serial: inherited to-many relationships share one set keyspace. They are claimed
    /// from the store (`Store.claimSerials`), so that writers in other processes never hand out
    /// the same keys.
    func reserveKeys(entity: Int, count: UInt64) throws -> Range<UInt64> {
        let counter = storeLayout.keyspace[model.root[entity]]
        let first = try shared.counters.withLock { c -> UInt64 in
            let first: UInt64
            do {
                first = try store.claimSerials(keyspace: counter, count: count, atLeast: c[counter, default: 1])
            } catch {
                throw LogbookError.wrap(error)
            }
            guard first + count <= EngineKey.maxID + 1 else {
                throw LogbookError(.invalidArgument, "the serial numbers of \(model.entities[entity].name) are used up")
            }
            c[counter] = first + count
            return first
        }
        let base = EngineKey.first(inKeyspace: storeLayout.keyspace[entity]).rawValue
        return (base | first)..<(base | (first + count))
    }

    /// The counters record: (keyspace uvarint, next serial uvarint) pairs. Made under the save
    /// lock: each counter is at least what every writer has claimed (`Store.claimedSerials`),
    /// so that the last record committed bounds every key in the store, whoever wrote it.
    func countersRecord() -> [UInt8] {
        let values = shared.counters.withLock { $0 }
        var claimed: [UInt16: UInt64] = [:]
        var out: [UInt8] = []
        for i in model.entities.indices {
            let counter = storeLayout.keyspace[model.root[i]]
            if claimed[counter] == nil { claimed[counter] = store.claimedSerials(keyspace: counter) }
            RecordCodec.appendVarint(UInt64(storeLayout.keyspace[i]), &out)
            RecordCodec.appendVarint(max(values[counter] ?? 1, claimed[counter]!), &out)
        }
        return out
    }

    // MARK: Merging

    /// Whether a save of `source` has anyone to tell (another context that merges).
    func hasListeners(besides source: ManagedObjectContext) -> Bool {
        shared.containers.contains { container in
            container.contexts.withLock { list in
                list.contains { c in
                    guard let c = c.context, c !== source else { return false }
                    return c.automaticallyMergesChangesFromOtherContexts && c.concurrencyType != .confinement
                }
            }
        }
    }

    /// The child contexts of `parent` that are alive.
    func children(of parent: ManagedObjectContext) -> [ManagedObjectContext] {
        contexts.withLock { $0.compactMap(\.context) }.filter { $0.parent === parent }
    }

    /// Every context of this container that merges automatically merges `changes` (a commit
    /// of another process), as it merges another context's save.
    func mergeRemote(_ changes: ContextChanges?) {
        let merging = contexts.withLock { $0.compactMap(\.context) }.filter {
            $0.automaticallyMergesChangesFromOtherContexts && $0.concurrencyType != .confinement && $0.parent == nil
        }
        for c in merging {
            if let changes {
                c.perform { c.mergeChanges(changes) }
            } else {
                // Commits whose changes were not recorded: every object is refreshed, and the
                // context's change observers (fetched-results controllers) fetch again.
                c.perform {
                    c.refreshAllObjects()
                    var all = ContextChanges()
                    all.refreshed = Set(c.registeredObjects.map(\.objectID))
                    for observer in c.changeObservers { observer(all) }
                }
            }
        }
    }

    func didSave(_ changes: ContextChanges, from source: ManagedObjectContext) {
        // The contexts of every container of this process on the store.
        let others = shared.containers.flatMap { c in c.contexts.withLock { $0.compactMap(\.context) } }
            .filter { $0 !== source }
        // Child contexts hear of a save through their parent, which passes on what it merged
        // (Core Data's `automaticallyMergesChangesFromParent`): their values come from it.
        for c in others
        where c.automaticallyMergesChangesFromOtherContexts && c.concurrencyType != .confinement && c.parent == nil {
            c.perform { c.mergeChanges(changes) }
        }
        for observer in source.changeObservers { observer(changes) }
    }
}
