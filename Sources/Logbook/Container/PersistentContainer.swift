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
    let storeLayout: StoreLayout
    /// The entities of the configuration the container was opened for (nil: all).
    let configurationEntities: Set<Int>?
    /// What a compaction keeps of the recorded history (`ContainerOptions.historyRetention`).
    public let historyRetention: HistoryRetention
    /// Whether saves record history (`ContainerOptions.persistentHistoryTracking`).
    let historyTracking: Bool
    /// Next serial number per entity (by model index), shared by all contexts.
    private let counters: Locked<[UInt64]>
    private let contexts = Locked<[WeakContext]>([])
    /// Held from a save's conflict check to its commit; holds the keys recent saves replaced.
    private let writeLog = Locked(WriteLog())
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
        storeOptions.checkpointInterval = options.checkpointInterval
        storeOptions.readOnly = options.readOnly
        storeOptions.inMemory = options.inMemory
        historyRetention = options.historyRetention
        let retention = RetentionHook()
        if options.persistentHistoryTracking { storeOptions.beforeCompaction = { retention.run() } }
        do { store = try Store.open(at: storeDirectory, options: storeOptions) } catch {
            throw LogbookError.wrap(error)
        }
        do {
            let (layout, counters) = try Migration.prepare(store: store, model: model)
            storeLayout = layout
            self.counters = Locked(counters)
        } catch {
            try? store.close()
            throw error
        }
        retention.container.withLock { $0.value = self }
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

    package static func defaultDirectory(_ name: String) -> String {
        let base =
            FileManager.default.urls(for: .applicationSupportDirectory, in: .userDomainMask).first?.path
            ?? (ProcessInfo.processInfo.environment["TMPDIR"] ?? "/tmp")
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

    /// The next page number of each order keyspace (under the save lock; found on first use).
    private let orderPages = Locked<[UInt16: UInt64]>([:])

    /// A new page number in an order keyspace: above every page the store holds. Called under
    /// the save lock.
    func nextOrderPage(keyspace: UInt16, snapshot: Snapshot) -> UInt64 {
        orderPages.withLock { next in
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

    /// Runs `body` under the save lock: a conflict check and the commit it allows, with no
    /// other save in between.
    func withSaveLock<R>(_ body: (inout WriteLog) throws -> R) rethrows -> R {
        try writeLog.withLock { try body(&$0) }
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
    public func close() throws {
        do { try store.close() } catch { throw LogbookError.wrap(error) }
    }

    // MARK: Serial numbers

    /// `count` consecutive keys of an entity (its keyspace in the high bits). Serial numbers
    /// are counted per inheritance tree (by its root), so that the objects of a tree never
    /// share a serial: inherited to-many relationships share one set keyspace.
    func reserveKeys(entity: Int, count: UInt64) -> Range<UInt64> {
        let counter = model.root[entity]
        let first = counters.withLock { c -> UInt64 in
            defer { c[counter] += count }
            return c[counter]
        }
        let base = EngineKey.first(inKeyspace: storeLayout.keyspace[entity]).rawValue
        return (base | first)..<(base | (first + count))
    }

    func allocateKey(entity: Int) -> UInt64 {
        let counter = model.root[entity]
        let serial = counters.withLock { c -> UInt64 in
            defer { c[counter] += 1 }
            return c[counter]
        }
        return EngineKey(keyspace: storeLayout.keyspace[entity], id: serial).rawValue
    }

    /// The counters record: (keyspace uvarint, next serial uvarint) pairs.
    func countersRecord() -> [UInt8] {
        let values = counters.withLock { $0 }
        var out: [UInt8] = []
        for i in values.indices {
            RecordCodec.appendVarint(UInt64(storeLayout.keyspace[i]), &out)
            RecordCodec.appendVarint(values[model.root[i]], &out)
        }
        return out
    }

    // MARK: Merging

    /// Whether a save of `source` has anyone to tell (another context that merges).
    func hasListeners(besides source: ManagedObjectContext) -> Bool {
        contexts.withLock { list in
            list.contains { c in
                guard let c = c.context, c !== source else { return false }
                return c.automaticallyMergesChangesFromOtherContexts && c.concurrencyType != .confinement
            }
        }
    }

    func didSave(_ changes: ContextChanges, from source: ManagedObjectContext) {
        let others = contexts.withLock { $0.compactMap(\.context) }.filter { $0 !== source }
        for c in others where c.automaticallyMergesChangesFromOtherContexts && c.concurrencyType != .confinement {
            c.perform { c.mergeChanges(changes) }
        }
        for observer in source.changeObservers { observer(changes) }
    }
}

/// Reading the schema at open, and migrating it.
enum Migration {
    static func prepare(store: Store, model: ManagedObjectModel) throws -> (StoreLayout, [UInt64]) {
        let snapshot = store.snapshot()
        let stored: StoredSchema?
        do { stored = try snapshot.value(forKey: StoredSchema.schemaKey).map(StoredSchema.decode) } catch let e
            as LogbookError
        { throw e } catch { throw LogbookError.wrap(error) }
        var schema = StoredSchema.make(for: model, previous: stored)
        if let stored, stored != schema, store.isReadOnly, stored.sameExceptIndexes(schema) {
            // Read-only, the model adds or drops indexes alone: the store is read as it is
            // (fetches plan with the indexes it has).
            schema = stored
        }
        if let stored, stored != schema {
            try check(stored: stored, new: schema, model: model, snapshot: snapshot)
            try migrate(store: store, snapshot: snapshot, stored: stored, new: schema, model: model)
        } else if stored == nil {
            if store.isReadOnly { throw LogbookError(.incompatibleModel, "the store holds no Logbook schema") }
            var t = Transaction()
            t.put(StoredSchema.schemaKey, value: schema.encoded())
            do { try store.commit(t) } catch { throw LogbookError.wrap(error) }
        }
        let layout = StoreLayout(schema: schema, model: model)
        // Counters: the recorded ones, never below what the store holds.
        var next = [UInt64](repeating: 1, count: model.entities.count)
        if let record = try? store.snapshot().value(forKey: StoredSchema.countersKey) {
            record.withUnsafeBytes { raw in
                var o = 0
                func varint() -> UInt64? {
                    var r: UInt64 = 0
                    var shift: UInt64 = 0
                    while o < raw.count && shift < 64 {
                        let b = raw[o]
                        o += 1
                        r |= UInt64(b & 0x7F) << shift
                        if b < 0x80 { return r }
                        shift += 7
                    }
                    return nil
                }
                while let ks = varint(), let n = varint() {
                    if let e = layout.entityByKeyspace[UInt16(truncatingIfNeeded: ks)] { next[e] = max(next[e], n) }
                }
            }
        }
        let snap = store.snapshot()
        // Above the largest key of each keyspace (its last key: O(1) in the primary index,
        // where a walk of every key cost an open of a million objects several milliseconds).
        for (e, ks) in layout.keyspace.enumerated() {
            guard let last = snap.keyBounds(inKeyspace: ks)?.upperBound else { continue }
            next[e] = max(next[e], EngineKey(rawValue: last).id + 1)
        }
        // One counter per inheritance tree: its root's, above every serial of the tree.
        for e in next.indices where model.root[e] != e { next[model.root[e]] = max(next[model.root[e]], next[e]) }
        return (layout, next)
    }

    static func storedType(_ a: StoredSchema.Attribute) -> AttributeType? {
        if a.type == "transformable" { return .transformable(transformer: a.transformer ?? "") }
        let all: [AttributeType] = [
            .string, .int16, .int32, .int64, .double, .float, .bool, .date, .data, .uuid, .url, .decimal
        ]
        return all.first { $0.description == a.type }
    }

    /// Refuses what a lightweight migration cannot do, saying what changed.
    static func check(stored: StoredSchema, new: StoredSchema, model: ManagedObjectModel, snapshot: Snapshot) throws {
        for (i, e) in new.entities.enumerated() {
            guard let old = stored.entities.first(where: { $0.keyspace == e.keyspace }) else { continue }
            let hasObjects = snapshot.count(inKeyspace: e.keyspace) > 0
            for (j, a) in e.attributes.enumerated() {
                let description = model.flattened[i].attributes[j]
                if let oldA = old.attributes.first(where: {
                    $0.name == a.name || $0.name == description.renamingIdentifier
                }) {
                    if oldA.type != a.type || oldA.transformer != a.transformer {
                        throw LogbookError(
                            .incompatibleModel, "attribute \(a.name) changed type from \(oldA.type) to \(a.type)",
                            entity: e.name, key: a.name)
                    }
                    if oldA.optional && !a.optional && description.defaultValue == nil && hasObjects {
                        throw LogbookError(
                            .incompatibleModel, "attribute \(a.name) became required without a default value",
                            entity: e.name, key: a.name)
                    }
                } else if !a.optional && description.defaultValue == nil && hasObjects {
                    throw LogbookError(
                        .incompatibleModel,
                        "new attribute \(a.name) is required but has no default value for the objects already stored",
                        entity: e.name, key: a.name)
                }
            }
            for r in e.relationships {
                if let oldR = old.relationships.first(where: { $0.name == r.name }),
                    oldR.toMany != r.toMany || oldR.destination != r.destination
                {
                    throw LogbookError(
                        .incompatibleModel, "relationship \(r.name) changed its destination or cardinality",
                        entity: e.name, key: r.name)
                }
            }
        }
    }

    /// Rewrites the records of every entity whose layout changed, drops removed entities and
    /// relationships, and records the new schema: one transaction.
    static func migrate(
        store: Store, snapshot: Snapshot, stored: StoredSchema, new: StoredSchema, model: ManagedObjectModel
    ) throws {
        if store.isReadOnly {
            throw LogbookError(.incompatibleModel, "the store needs a migration but was opened read-only")
        }
        var t = Transaction()
        let newLayout = StoreLayout(schema: new, model: model)
        var seenConstraintKeys: [IndexKey: UInt64] = [:]
        // A model of the stored schema, to decode the old records.
        var oldEntities: [EntityDescription] = []
        for e in stored.entities {
            oldEntities.append(
                EntityDescription(
                    e.name,
                    attributes: e.attributes.map {
                        AttributeDescription($0.name, storedType($0) ?? .data, optional: true)
                    },
                    relationships: e.relationships.map {
                        RelationshipDescription($0.name, to: $0.destination, inverse: nil, toMany: $0.toMany)
                    }))
        }
        let oldModel = try ManagedObjectModel(
            entities: oldEntities.map { e in
                var e = e
                e.relationships = e.relationships.filter { r in oldEntities.contains { $0.name == r.destination } }
                return e
            })
        for (oi, old) in stored.entities.enumerated() {
            guard let ni = new.entities.firstIndex(where: { $0.keyspace == old.keyspace }) else {
                // Entity removed: its objects and sets go.
                snapshot.forEachKey(inKeyspace: old.keyspace) {
                    t.delete($0)
                    return true
                }
                for r in old.relationships {
                    if let k = r.setKeyspace {
                        snapshot.forEachSet(inKeyspace: k) { key, _ in
                            t.replaceMembers(EmptyCollection(), ofSet: key)
                            return true
                        }
                    }
                }
                continue
            }
            let newEntity = new.entities[ni]
            // Order records of relationships no longer ordered (or gone) go.
            for r in old.relationships {
                guard let k = r.orderKeyspace, !newEntity.relationships.contains(where: { $0.orderKeyspace == k })
                else {
                    continue
                }
                snapshot.forEachKey(inKeyspace: k) {
                    t.delete($0)
                    return true
                }
            }
            for r in old.relationships
            where !newEntity.relationships.contains(where: { $0.setKeyspace == r.setKeyspace && r.setKeyspace != nil })
            {
                if let k = r.setKeyspace {
                    snapshot.forEachSet(inKeyspace: k) { key, _ in
                        t.replaceMembers(EmptyCollection(), ofSet: key)
                        return true
                    }
                }
            }
            let oldPolymorphic = old.relationships.map { $0.polymorphic ?? false }
            let newPolymorphic = newEntity.relationships.map { $0.polymorphic ?? false }
            guard
                old.attributes != newEntity.attributes
                    || old.relationships.map(\.name) != newEntity.relationships.map(\.name)
                    || old.relationships.map(\.index) != newEntity.relationships.map(\.index)
                    || oldPolymorphic != newPolymorphic || old.constraints != newEntity.constraints
                    || old.compoundIndexes != newEntity.compoundIndexes
            else { continue }
            let oldLayout = oldModel.layouts[oi]
            let layout = model.layouts[ni]
            let description = model.flattened[ni]
            var keys: [UInt64] = []
            snapshot.forEachKey(inKeyspace: old.keyspace) {
                keys.append($0)
                return true
            }
            var buffer: [UInt8] = []
            // The old records' to-one slots as they were written (with keyspaces where the
            // destination had sub-entities then).
            var oldKinds = oldLayout.slotKinds
            for (n, r) in oldLayout.toOne.enumerated() where old.relationships[r].polymorphic == true {
                oldKinds[oldLayout.attributeCount + n] = .anyObject
            }
            for key in keys {
                let oldSlots: [Slot]? =
                    try snapshot.withValue(forKey: key) { raw -> [Slot]? in
                        try? oldKinds.withUnsafeBufferPointer { kinds in
                            try RecordCodec.decode(raw, kinds: kinds) { slot in
                                let r = oldLayout.toOne[slot - oldLayout.attributeCount]
                                let dest = old.relationships[r].destination
                                return stored.entity(dest)?.keyspace ?? 0
                            }
                        }
                    } ?? nil
                guard let oldSlots else { continue }
                var slots = [Slot](repeating: .null, count: layout.slotCount)
                for (j, a) in description.attributes.enumerated() {
                    if let k = old.attributes.firstIndex(where: { $0.name == a.name || $0.name == a.renamingIdentifier }
                    ) {
                        slots[j] = oldSlots[k]
                    }
                    if slots[j].isNull, let d = a.defaultValue {
                        slots[j] = (try? Slot(d, type: a.type, transformers: AttributeTransformers.registry)) ?? .null
                    }
                }
                for (n, r) in layout.toOne.enumerated() {
                    let rel = description.relationships[r]
                    if let k = oldLayout.slotByName[rel.name]
                        ?? rel.renamingIdentifier.flatMap({ oldLayout.slotByName[$0] }), k >= oldLayout.attributeCount
                    {
                        slots[layout.attributeCount + n] = oldSlots[k]
                    }
                }
                RecordCodec.encode(slots, layout: layout, into: &buffer)
                let indexKeys = newLayout.indexKeys(slots, entity: layout)
                // Objects already stored must satisfy a new uniqueness constraint.
                for c in newLayout.constraintIndexes[ni] where !c.slots.contains(where: { slots[$0].isNull }) {
                    let entry = newLayout.constraintKey(slots, c.slots, entity: layout, index: c.index)
                    if let other = seenConstraintKeys.updateValue(key, forKey: entry) {
                        throw LogbookError(
                            .incompatibleModel,
                            "the stored objects \(EngineKey(rawValue: other).id) and \(EngineKey(rawValue: key).id) share the values of a uniqueness constraint of the new model",
                            entity: description.name)
                    }
                }
                t.put(key, value: buffer, indexKeys: indexKeys)
            }
        }
        t.put(StoredSchema.schemaKey, value: new.encoded())
        do { try store.commit(t) } catch { throw LogbookError.wrap(error) }
    }
}
