import Foundation
import Dispatch
import Synchronization
import LogbookEngine

/// A scratchpad of managed objects: it tracks every insert, change and deletion until `save()`
/// writes them to the store in one transaction (or `rollback()` forgets them).
///
/// A context belongs to one queue: the main queue (`container.viewContext`), a private queue
/// of its own (`container.newBackgroundContext()`), or, for `.confinement`, the thread that
/// uses it. Use it and its objects only there — through `perform` and `performAndWait` from
/// anywhere else. Objects never cross contexts; their `ObjectID`s do.
///
/// ```swift
/// let context = container.viewContext
/// let person = try context.insertNewObject(forEntityName: "Person")
/// try person.setValue("Anthony", forKey: "firstName")
/// try context.save()
/// ```
public final class ManagedObjectContext: @unchecked Sendable {
    // @unchecked Sendable: the context is handed between threads only to reach its own queue;
    // its mutable state is touched only on that queue (by contract, as in Core Data), except
    // `registry`, which deinit of objects may reach from elsewhere and which `registryLock` guards.

    public enum ConcurrencyType: Sendable {
        /// Runs on the main queue.
        case mainQueue
        /// Runs on a serial queue of its own.
        case privateQueue
        /// No queue: used by the thread that made it. Asynchronous fetches need a queue.
        case confinement
    }

    public let concurrencyType: ConcurrencyType
    public let container: PersistentContainer
    /// A name for logs and debugging.
    public var name: String?
    /// Merge the saves of other contexts of the container into this one (on this context's queue).
    public var automaticallyMergesChangesFromOtherContexts = true
    /// Undo and redo of unsaved changes; nil (no undo) by default.
    public var undoHistory: UndoHistory?

    let queue: DispatchQueue?
    /// Handed to every object: says whether the context still exists.
    let token: Token

    /// An object's way to its context. `context` is unowned (no side table, unlike a weak
    /// reference); `alive` turns false when the context deinits, before it is gone.
    final class Token: @unchecked Sendable {
        // Written by the context's init and deinit only; read on the context's queue.
        var owner: Unmanaged<ManagedObjectContext>?
        var alive = false
        /// The store objects of the context belong to (their IDs name it).
        let identity: StoreIdentity

        init(identity: StoreIdentity) { self.identity = identity }

        @inline(__always)
        var context: ManagedObjectContext? { alive ? owner?.takeUnretainedValue() : nil }

        /// Runs `body` with the context without retaining it (contexts are referenced weakly
        /// elsewhere, which makes every retain of them take the runtime's slow path).
        @inline(__always)
        func withContext<R>(_ body: (ManagedObjectContext) -> R) -> R? {
            guard alive, let owner else { return nil }
            return owner._withUnsafeGuaranteedRef(body)
        }
    }

    deinit { token.alive = false }
    var model: ManagedObjectModel { container.model }
    var storeLayout: StoreLayout { container.storeLayout }

    let registryLock = Registry()

    /// Registered objects by key, unretained: an object leaves when it deinits. `table` is
    /// guarded by `lock` (an object may in principle be released on another thread).
    final class Registry: @unchecked Sendable {
        // @unchecked: `table` is touched only under `lock` (a futex-based lock: cheap when
        // uncontended, which is nearly always; every object's deinit takes it once).
        private let lock = Mutex(())
        @exclusivity(unchecked) private var table = RegistryTable()

        func withLock<R>(_ body: (inout RegistryTable) throws -> R) rethrows -> R {
            try lock.withLock { _ in try body(&table) }
        }
    }

    @exclusivity(unchecked) var inserted = InsertedObjects()
    @exclusivity(unchecked) var updated: [UInt64: ManagedObject] = [:]
    @exclusivity(unchecked) var deleted: [UInt64: ManagedObject] = [:]
    /// Unsaved changes of to-many relationships, by set key: members added and removed.
    var setAdds: [UInt64: Set<UInt64>] = [:]
    var setRemoves: [UInt64: Set<UInt64>] = [:]
    /// Errors of typed property setters (which cannot throw), reported by the next save.
    var pendingErrors: [LogbookError] = []
    var groupDepth = 0
    /// How many records the last fetch read from the store (0 when the index answered alone):
    /// a diagnostic that shows whether a request used its index.
    public internal(set) var lastFetchRecordsRead = 0
    /// Called after this context saves and after it merges another context's save.
    var changeObservers: [(ContextChanges) -> Void] = []

    /// Calls `handler` (on the context's queue) with the changes of each save of this context
    /// and of each save of another context merged into it.
    public func observeChanges(_ handler: @escaping (ContextChanges) -> Void) {
        changeObservers.append(handler)
    }

    init(container: PersistentContainer, concurrencyType: ConcurrencyType) {
        self.container = container
        self.concurrencyType = concurrencyType
        self.token = Token(identity: container.storeLayout.identity)
        switch concurrencyType {
        case .mainQueue: queue = .main
        case .privateQueue: queue = DispatchQueue(label: "logbook.context")
        case .confinement: queue = nil
        }
        if concurrencyType == .privateQueue { queue!.setSpecific(key: Self.queueKey, value: QueueOwner(self)) }
        token.owner = Unmanaged.passUnretained(self)
        token.alive = true
    }

    // MARK: Queues

    /// Runs `body` on the context's queue and returns its result. Only `Sendable` results
    /// leave: objects stay on their queue (return their IDs).
    public func perform<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        guard let queue else { return try body() }
        return try await withCheckedThrowingContinuation { continuation in
            queue.async { continuation.resume(with: Result { try body() }) }
        }
    }

    /// Runs `body` on the context's queue without waiting.
    public func perform(_ body: @escaping @Sendable () -> Void) {
        if let queue { queue.async(execute: body) } else { body() }
    }

    /// Runs `body` on the context's queue and waits for it (inline when already there).
    public func performAndWait<T>(_ body: () throws -> T) rethrows -> T {
        guard let queue else { return try body() }
        if queue === DispatchQueue.main && Thread.isMainThread { return try body() }
        if isOnQueue { return try body() }
        return try queue.sync { try body() }
    }

    /// True when running on the context's own queue.
    var isOnQueue: Bool {
        guard let queue else { return true }
        if queue === DispatchQueue.main { return Thread.isMainThread }
        return DispatchQueue.getSpecific(key: Self.queueKey)?.context === self
    }

    final class QueueOwner: @unchecked Sendable {
        // Written once at creation; weak so that the queue does not keep the context alive.
        weak var context: ManagedObjectContext?
        init(_ context: ManagedObjectContext) { self.context = context }
    }

    static let queueKey = DispatchSpecificKey<QueueOwner>()

    // MARK: Registry

    func register(_ object: ManagedObject) {
        object.flags.insert(.registered)
        registryLock.withLock { $0[object.engineKey] = Unmanaged.passUnretained(object) }
    }

    func unregister(_ key: UInt64) {
        registryLock.withLock { $0.remove(key) }
    }

    func registered(_ key: UInt64) -> ManagedObject? {
        if !inserted.isEmpty, let o = inserted.lookup(key) { return o }
        return registryLock.withLock { table in
            // Objects are released on their context's queue, where this runs too, so an entry
            // is never an object in the middle of deinit.
            guard let u = table[key] else { return nil }
            let object = u.takeUnretainedValue()
            return object.flags.contains(.invalid) ? nil : object
        }
    }

    /// The registered objects for `keys` (nil where none), with one lock for all of them.
    func registered(keys: [UInt64]) -> [ManagedObject?] {
        var result = [ManagedObject?](repeating: nil, count: keys.count)
        registryLock.withLock { table in
            guard !table.isEmpty else { return }
            for (i, k) in keys.enumerated() {
                if let u = table[k] {
                    let o = u.takeUnretainedValue()
                    if !o.flags.contains(.invalid) { result[i] = o }
                }
            }
        }
        if !inserted.isEmpty {
            for (i, k) in keys.enumerated() where result[i] == nil { result[i] = inserted.lookup(k) }
        }
        return result
    }

    /// Registers many new objects with one lock.
    func register(all objects: [ManagedObject]) {
        registryLock.withLock { table in table.insertAll(objects) }
    }

    /// The objects registered in the context (fetched, inserted or faulted in, and still alive).
    public var registeredObjects: [ManagedObject] {
        registryLock.withLock { $0.all() }.map { $0.takeUnretainedValue() }
    }

    // MARK: Changes

    public var insertedObjects: Set<ManagedObject> { Set(inserted.values) }
    public var updatedObjects: Set<ManagedObject> { Set(updated.values) }
    public var deletedObjects: Set<ManagedObject> { Set(deleted.values) }

    /// True when there is anything unsaved.
    public var hasChanges: Bool { !inserted.isEmpty || !updated.isEmpty || !deleted.isEmpty || !setAdds.isEmpty || !setRemoves.isEmpty }

    func recordError(_ error: LogbookError) { pendingErrors.append(error) }

    // MARK: Insert

    /// Inserts a new object of the named entity. An unknown name is an error.
    public func insertNewObject(forEntityName name: String) throws -> ManagedObject {
        let layout = try model.layout(named: name)
        return try undoable { makeInserted(layout) }
    }

    /// Inserts a new object of a typed class (`Person.self`).
    public func insert<T: ManagedObject>(_ type: T.Type) throws -> T {
        let layout = try model.layout(for: type)
        if undoHistory == nil && layout.managedClass == T.self {
            return unsafeDowncast(makeInserted(layout), to: T.self)
        }
        guard let object = try undoable({ makeInserted(layout) }) as? T else {
            throw LogbookError(.unknownEntity, "entity \(layout.name) is not made of \(T.self); give the entity `class: \(T.self).self`", entity: layout.name)
        }
        return object
    }

    /// Serial numbers reserved for this context, by entity: a range taken from the container
    /// a batch at a time, so that inserting does not take the container's lock each time.
    var reservedSerials: [Int: Range<UInt64>] = [:]

    func makeInserted(_ layout: EntityLayout) -> ManagedObject {
        let key: UInt64
        if let range = reservedSerials[layout.index], !range.isEmpty {
            key = range.lowerBound
            reservedSerials[layout.index] = (range.lowerBound + 1)..<range.upperBound
        } else {
            let range = container.reserveKeys(entity: layout.index, count: 1024)
            key = range.lowerBound
            reservedSerials[layout.index] = (range.lowerBound + 1)..<range.upperBound
        }
        let object = layout.managedClass.init(ManagedObject.Bootstrap(
            layout: layout, key: key, token: token, slots: layout.defaultSlots, fault: false))
        willChange(object)
        object.flags.insert(.inserted)
        // Inserted objects are found through `inserted` until the save registers the ones that
        // outlive it (most of a bulk insert does not).
        inserted.append(object)
        return object
    }

    // MARK: Objects by ID

    /// The object for an ID, registered in this context (loading it if needed).
    /// Throws when the store has no such object, or the ID is of another store.
    public func existingObject(with id: ObjectID) throws -> ManagedObject {
        guard id.store == storeLayout.identity else {
            throw LogbookError(.invalidRelationship, "the object ID \(id) is from another store", objectID: id)
        }
        return try object(forKey: id.key)
    }

    /// The object for an ID (as `existingObject(with:)`; Logbook checks at once that it exists).
    public func object(with id: ObjectID) throws -> ManagedObject { try existingObject(with: id) }

    func object(forKey key: UInt64) throws -> ManagedObject {
        if let o = registered(key) { return o }
        guard let entity = storeLayout.entityByKeyspace[UInt16(truncatingIfNeeded: key >> 48)] else {
            throw LogbookError(.objectNotFound, "no entity has keyspace \(key >> 48)")
        }
        let layout = model.layouts[entity]
        let snapshot = container.store.snapshot()
        guard let slots = try decode(snapshot, key: key, layout: layout) else {
            throw LogbookError(.objectNotFound, "no \(layout.name) with serial \(key & 0xFFFF_FFFF_FFFF) in the store",
                               entity: layout.name, objectID: ObjectID(store: storeLayout.identity, key: key))
        }
        return materialize(key: key, layout: layout, slots: slots)
    }

    func materialize(key: UInt64, layout: EntityLayout, slots: [Slot]) -> ManagedObject {
        if let o = registered(key) { return o }
        let object = layout.managedClass.init(ManagedObject.Bootstrap(
            layout: layout, key: key, token: token, slots: slots, fault: false))
        register(object)
        return object
    }

    func decode(_ snapshot: Snapshot, key: UInt64, layout: EntityLayout) throws -> [Slot]? {
        do {
            let destinations = layout.toOne.map { UInt64(storeLayout.keyspace[layout.relationshipDestination[$0]]) }
            let attributeCount = layout.attributeCount
            return try snapshot.withValue(forKey: key) { raw in
                try RecordCodec.decode(raw, layout: layout) { destinations[$0 - attributeCount] }
            }
        } catch is RecordCodec.Malformed {
            throw LogbookError(.store, "the record of \(layout.name) \(key & 0xFFFF_FFFF_FFFF) is malformed", entity: layout.name)
        } catch {
            throw LogbookError.wrap(error)
        }
    }

    /// Loads a fault's values: with its batch when it has one, else from `snapshot` (a fetch's
    /// own, so that everything one fetch reads comes from one state of the store) or the
    /// store's latest state.
    func fulfill(_ object: ManagedObject, from snapshot: Snapshot? = nil) throws {
        guard object.flags.contains(.fault) else { return }
        if let arena = object.rawArena {
            // The record was read by the fetch that made the object: decode it.
            let layout = object.layout
            do {
                object.slots = try arena.slots(offset: object.rawOffset, count: object.rawCount, layout: layout) { slot in
                    UInt64(self.storeLayout.keyspace[layout.relationshipDestination[layout.toOne[slot - layout.attributeCount]]])
                }
            } catch {
                throw LogbookError(.store, "the record of \(layout.name) \(object.engineKey & 0xFFFF_FFFF_FFFF) is malformed", entity: layout.name)
            }
            object.rawArena = nil
            object.flags.remove(.fault)
            return
        }
        if let batch = object.batch {
            // Load the whole batch from the fetch's snapshot.
            let members = batch.take()
            var read = 0
            for o in members where o.flags.contains(.fault) {
                o.batch = nil
                if let slots = try decode(batch.snapshot, key: o.engineKey, layout: o.layout) {
                    o.slots = slots
                    o.flags.remove(.fault)
                    read += 1
                }
            }
            lastFetchRecordsRead += read
            if !object.flags.contains(.fault) { return }
        }
        guard let slots = try decode(snapshot ?? container.store.snapshot(), key: object.engineKey, layout: object.layout) else {
            throw LogbookError(.objectNotFound, "the object was deleted from the store", entity: object.layout.name, objectID: object.objectID)
        }
        object.slots = slots
        object.flags.remove(.fault)
    }

    // MARK: Changing values

    func setSlot(_ object: ManagedObject, _ slot: Int, _ value: Slot) {
        if object.flags.contains(.inserted) && undoHistory == nil {
            // A new object: nothing to track but the value.
            object.slots[slot] = value
            return
        }
        guard object.slots[slot] != value else { return }
        willChange(object)
        if !object.flags.contains(.inserted) {
            if object.committed == nil { object.committed = object.slots }
            if !object.flags.contains(.updated) {
                object.flags.insert(.updated)
                updated[object.engineKey] = object
            }
        }
        object.slots[slot] = value
    }

    /// Marks a registered object changed because one of its to-many relationships changed.
    func touch(_ object: ManagedObject) {
        willChange(object)
        if !object.flags.contains(.inserted) && !object.flags.contains(.updated) {
            if object.committed == nil && !object.flags.contains(.fault) { object.committed = object.slots }
            object.flags.insert(.updated)
            updated[object.engineKey] = object
        }
    }

    func checkRelated(_ owner: ManagedObject, _ r: Int, _ other: ManagedObject) throws {
        let rel = owner.layout.entity.relationships[r]
        guard other.token === token, !other.flags.contains(.invalid) else {
            throw LogbookError(.invalidRelationship, other.objectID.store != storeLayout.identity
                ? "\(rel.name) cannot point to an object of another store"
                : "\(rel.name) cannot point to an object of another context; use existingObject(with:) to get it here",
                entity: owner.layout.name, key: rel.name, objectID: owner.objectID)
        }
        guard other.layout.index == owner.layout.relationshipDestination[r] else {
            throw LogbookError(.invalidRelationship, "\(rel.name) points to \(rel.destination) objects, not \(other.layout.name)",
                               entity: owner.layout.name, key: rel.name, objectID: owner.objectID)
        }
    }

    func setKey(_ owner: UInt64, _ layout: EntityLayout, _ r: Int) -> UInt64 {
        storeLayout.setKey(entity: layout.index, relationship: r, owner: owner)
    }

    /// The members of a to-many relationship: the store's, plus unsaved additions, minus removals.
    func relatedKeys(_ owner: UInt64, _ layout: EntityLayout, _ r: Int) -> Set<UInt64> {
        let k = setKey(owner, layout, r)
        var members = Set(container.store.snapshot().members(ofSet: k))
        if let removes = setRemoves[k] { members.subtract(removes) }
        if let adds = setAdds[k] { members.formUnion(adds) }
        return members
    }

    /// The number of related objects: the stored set's count, corrected by unsaved changes.
    func relatedCount(_ owner: UInt64, _ layout: EntityLayout, _ r: Int) -> Int {
        let k = setKey(owner, layout, r)
        if setRemoves[k] == nil && setAdds[k] == nil { return container.store.snapshot().memberCount(ofSet: k) }
        return relatedKeys(owner, layout, r).count
    }

    /// The related objects, ordered by key. Objects the context does not hold yet come back as
    /// faults that load together (from one snapshot) when the first of them is touched, so
    /// counting or walking a relationship reads no record it does not need.
    func relatedObjects(_ owner: ManagedObject, relationship r: Int) throws -> [ManagedObject] {
        let keys = relatedKeys(owner.engineKey, owner.layout, r).sorted()
        let destination = model.layouts[owner.layout.relationshipDestination[r]]
        var batch: FaultBatch?
        var result: [ManagedObject] = []
        result.reserveCapacity(keys.count)
        for key in keys {
            if let o = registered(key) {
                result.append(o)
                continue
            }
            if batch == nil { batch = FaultBatch(snapshot: container.store.snapshot()) }
            let o = destination.managedClass.init(ManagedObject.Bootstrap(
                layout: destination, key: key, token: token, slots: [], fault: true))
            o.batch = batch
            batch!.append(o)
            register(o)
            result.append(o)
        }
        return result
    }

    func addMember(_ member: UInt64, owner: UInt64, _ layout: EntityLayout, _ r: Int) {
        let k = setKey(owner, layout, r)
        if setRemoves[k]?.remove(member) != nil, setRemoves[k]!.isEmpty { setRemoves[k] = nil }
        setAdds[k, default: []].insert(member)
        if let o = registered(owner) { touch(o) }
    }

    func removeMember(_ member: UInt64, owner: UInt64, _ layout: EntityLayout, _ r: Int) {
        let k = setKey(owner, layout, r)
        if setAdds[k]?.remove(member) != nil, setAdds[k]!.isEmpty { setAdds[k] = nil }
        setRemoves[k, default: []].insert(member)
        if let o = registered(owner) { touch(o) }
    }

    /// The inverse side: `other`'s relationship `inverse` gains or loses `owner`.
    func linkInverse(_ owner: ManagedObject, _ r: Int, _ otherKey: UInt64, adding: Bool) throws {
        guard let inv = owner.layout.relationshipInverse[r] else { return }
        let destLayout = model.layouts[owner.layout.relationshipDestination[r]]
        if destLayout.entity.relationships[inv].isToMany {
            if adding { addMember(owner.engineKey, owner: otherKey, destLayout, inv) }
            else { removeMember(owner.engineKey, owner: otherKey, destLayout, inv) }
        } else {
            let other = try object(forKey: otherKey)
            try fulfill(other)
            let slot = destLayout.slot(ofToOne: inv)
            if adding {
                // `other` pointed elsewhere before: that object loses it.
                if case .object(let previous) = other.slots[slot], previous != owner.engineKey {
                    try unlinkForward(previousOwner: previous, destLayout: destLayout, inverse: inv, other: other)
                }
                setSlot(other, slot, .object(owner.engineKey))
            } else if case .object(let k) = other.slots[slot], k == owner.engineKey {
                setSlot(other, slot, .null)
            }
        }
    }

    /// `other` (whose to-one `inverse` pointed at `previousOwner`) is being re-linked: remove
    /// `other` from `previousOwner`'s forward relationship.
    private func unlinkForward(previousOwner: UInt64, destLayout: EntityLayout, inverse: Int, other: ManagedObject) throws {
        guard let forward = destLayout.relationshipInverse[inverse] else { return }
        let ownerLayout = model.layouts[destLayout.relationshipDestination[inverse]]
        if ownerLayout.entity.relationships[forward].isToMany {
            removeMember(other.engineKey, owner: previousOwner, ownerLayout, forward)
        } else {
            let prev = try object(forKey: previousOwner)
            try fulfill(prev)
            let s = ownerLayout.slot(ofToOne: forward)
            if case .object(let k) = prev.slots[s], k == other.engineKey { setSlot(prev, s, .null) }
        }
    }

    func setToOne(_ owner: ManagedObject, relationship r: Int, to target: ManagedObject?) throws {
        if let target { try checkRelated(owner, r, target) }
        let slot = owner.layout.slot(ofToOne: r)
        let old: UInt64? = if case .object(let k) = owner.slots[slot] { k } else { nil }
        let new = target?.engineKey
        guard old != new else { return }
        if let old { try linkInverse(owner, r, old, adding: false) }
        setSlot(owner, slot, new.map { .object($0) } ?? .null)
        if let new { try linkInverse(owner, r, new, adding: true) }
    }

    func addRelated(_ owner: ManagedObject, relationship r: Int, _ objects: [ManagedObject]) throws {
        for o in objects { try checkRelated(owner, r, o) }
        // A new object has nothing stored: its members are the ones added since.
        let current = owner.flags.contains(.inserted) ? (setAdds[setKey(owner.engineKey, owner.layout, r)] ?? [])
            : relatedKeys(owner.engineKey, owner.layout, r)
        for o in objects where !current.contains(o.engineKey) {
            addMember(o.engineKey, owner: owner.engineKey, owner.layout, r)
            try linkInverse(owner, r, o.engineKey, adding: true)
        }
    }

    func removeRelated(_ owner: ManagedObject, relationship r: Int, _ objects: [ManagedObject]) throws {
        let current = relatedKeys(owner.engineKey, owner.layout, r)
        for o in objects where current.contains(o.engineKey) {
            removeMember(o.engineKey, owner: owner.engineKey, owner.layout, r)
            try linkInverse(owner, r, o.engineKey, adding: false)
        }
    }

    func replaceRelated(_ owner: ManagedObject, relationship r: Int, with objects: [ManagedObject]) throws {
        for o in objects { try checkRelated(owner, r, o) }
        let wanted = Set(objects.map(\.engineKey))
        let current = relatedKeys(owner.engineKey, owner.layout, r)
        let gone = try current.subtracting(wanted).map { try object(forKey: $0) }
        try removeRelated(owner, relationship: r, gone)
        try addRelated(owner, relationship: r, objects.filter { !current.contains($0.engineKey) })
    }

    // MARK: Delete

    /// Marks an object deleted (`isDeleted` becomes true) and applies the delete rules of its
    /// relationships: nullify, cascade, deny (checked at save), no action. `save()` removes it.
    public func delete(_ object: ManagedObject) {
        guard !object.flags.contains(.deleted), !object.flags.contains(.invalid), object.contextRef === self else { return }
        do {
            try undoable { try deleteWithRules(object) }
        } catch let error as LogbookError {
            recordError(error)
        } catch {
            recordError(LogbookError(.store, "\(error)"))
        }
    }

    func deleteWithRules(_ object: ManagedObject) throws {
        guard !object.flags.contains(.deleted) else { return }
        try fulfill(object)
        willChange(object)
        object.flags.insert(.deleted)
        let key = object.engineKey
        if object.flags.contains(.inserted) {
            object.flags.remove(.inserted)
            inserted.removeOne()
        } else {
            if object.committed == nil { object.committed = object.slots }
            updated[key] = nil
            object.flags.remove(.updated)
            deleted[key] = object
        }
        for (r, rel) in object.layout.entity.relationships.enumerated() {
            let related: [UInt64]
            if rel.isToMany {
                related = Array(relatedKeys(key, object.layout, r))
            } else if case .object(let k) = object.slots[object.layout.slot(ofToOne: r)] {
                related = [k]
            } else {
                related = []
            }
            switch rel.deleteRule {
            case .nullify:
                for k in related { try linkInverse(object, r, k, adding: false) }
            case .cascade:
                for k in related {
                    try linkInverse(object, r, k, adding: false)
                    let other = try self.object(forKey: k)
                    try deleteWithRules(other)
                }
            case .deny, .noAction:
                break
            }
        }
    }

    // MARK: Rollback and reset

    /// Forgets every unsaved change: inserted objects go away, changed ones get their saved
    /// values back, deleted ones come back.
    public func rollback() {
        for o in inserted.values { o.flags = [.invalid]; unregister(o.engineKey) }
        for o in Array(updated.values) + Array(deleted.values) {
            if let c = o.committed { o.slots = c }
            o.committed = nil
            o.flags.subtract([.updated, .deleted])
        }
        clearChanges()
    }

    /// Forgets the change sets (the objects were dealt with by the caller).
    private func clearChanges() {
        inserted = InsertedObjects()
        updated = [:]
        deleted = [:]
        setAdds = [:]
        setRemoves = [:]
        pendingErrors = []
        undoHistory?.removeAll()
    }

    /// Forgets everything: unsaved changes, and every registered object, which can no longer
    /// be used (reading it by key is an `.objectInvalidated` error).
    public func reset() {
        for o in registeredObjects { o.flags = [.invalid] }
        for o in inserted.values { o.flags = [.invalid] }
        registryLock.withLock { $0 = RegistryTable() }
        clearChanges()
    }

    /// Reloads an object's values from the store, dropping its unsaved changes if `mergeChanges` is false.
    public func refresh(_ object: ManagedObject, mergeChanges: Bool) {
        guard !object.flags.contains(.inserted), object.contextRef === self else { return }
        if !mergeChanges || !object.hasChanges {
            object.flags.insert(.fault)
            object.flags.subtract([.updated])
            object.committed = nil
            updated[object.engineKey] = nil
        }
    }
}

/// The inserted objects of a context, in insertion order. An object deleted before the save
/// stays in the list without its `.inserted` flag, and is skipped.
struct InsertedObjects {
    private(set) var list: [ManagedObject] = []
    private(set) var count = 0

    var isEmpty: Bool { count == 0 }
    var values: LazyFilterSequence<[ManagedObject]> { list.lazy.filter { $0.flags.contains(.inserted) } }
    var isEmptyList: Bool { list.isEmpty }

    /// Position by key, built on first lookup and kept up to date after.
    private var index: [UInt64: Int]?

    mutating func append(_ object: ManagedObject) {
        if index != nil { index![object.engineKey] = list.count }
        list.append(object)
        count += 1
    }

    mutating func lookup(_ key: UInt64) -> ManagedObject? {
        if index == nil {
            var built: [UInt64: Int] = [:]
            built.reserveCapacity(list.count)
            for (i, o) in list.enumerated() { built[o.engineKey] = i }
            index = built
        }
        guard let i = index![key] else { return nil }
        let o = list[i]
        return o.flags.contains(.inserted) ? o : nil
    }

    /// Calls `body` with each still-inserted object and whether the list holds its only
    /// reference, then empties the list.
    /// Returns the list, for the caller to release (its objects may be the last references).
    mutating func drain(_ body: (ManagedObject, Bool) -> Void) -> [ManagedObject] {
        index = nil
        for i in list.indices where list[i].flags.contains(.inserted) {
            let unique = isKnownUniquelyReferenced(&list[i])
            body(list[i], unique)
        }
        defer { list = []; count = 0 }
        return list
    }

    /// One object left the inserted set (its flag was cleared by the caller).
    mutating func removeOne() { count -= 1 }
}

/// Faults of one batch of a batched fetch: touching one loads them all, from the snapshot of
/// the fetch. Members are unretained (a fault that goes away leaves the batch).
final class FaultBatch {
    let snapshot: Snapshot
    var members: [Unmanaged<ManagedObject>] = []

    init(snapshot: Snapshot) { self.snapshot = snapshot }

    func append(_ o: ManagedObject) { members.append(.passUnretained(o)) }

    func forget(_ o: ManagedObject) {
        members.removeAll { $0.toOpaque() == Unmanaged.passUnretained(o).toOpaque() }
    }

    /// The members still alive; the batch is spent.
    func take() -> [ManagedObject] {
        let all = members.map { $0.takeUnretainedValue() }
        members = []
        return all
    }
}

/// Objects by engine key: for each keyspace, pages of 1,024 slots indexed by serial number
/// (serials are dense), with a dictionary for serials too large to page.
struct RegistryTable {
    /// The pages of one keyspace: 1,024 entries each, allocated when first used.
    final class Space {
        // Touched only under the registry's lock.
        @exclusivity(unchecked) var pages: [UnsafeMutablePointer<Unmanaged<ManagedObject>?>?] = []

        deinit {
            for case let page? in pages {
                page.deinitialize(count: RegistryTable.pageSize)
                page.deallocate()
            }
        }

        @inline(__always)
        func page(_ p: Int, create: Bool) -> UnsafeMutablePointer<Unmanaged<ManagedObject>?>? {
            if p < pages.count, let page = pages[p] { return page }
            guard create else { return nil }
            if p >= pages.count { pages.append(contentsOf: repeatElement(nil, count: p + 1 - pages.count)) }
            let page = UnsafeMutablePointer<Unmanaged<ManagedObject>?>.allocate(capacity: RegistryTable.pageSize)
            page.initialize(repeating: nil, count: RegistryTable.pageSize)
            pages[p] = page
            return page
        }
    }

    // A few entities: a linear search of their keyspaces beats hashing.
    private var keyspaces: [UInt16] = []
    private var spaces: [Space] = []
    private var overflow: [UInt64: Unmanaged<ManagedObject>] = [:]
    private(set) var count = 0
    static let pageBits = 10
    static let pageSize = 1 << pageBits
    static let maxPagedSerial: UInt64 = 1 << 32

    var isEmpty: Bool { count == 0 }

    @inline(__always)
    private func space(_ ks: UInt16) -> Space? {
        for i in keyspaces.indices where keyspaces[i] == ks { return spaces[i] }
        return nil
    }

    subscript(key: UInt64) -> Unmanaged<ManagedObject>? {
        get {
            let serial = key & 0xFFFF_FFFF_FFFF
            guard serial < Self.maxPagedSerial else { return overflow[key] }
            guard let space = space(UInt16(truncatingIfNeeded: key >> 48)),
                  let page = space.page(Int(serial >> UInt64(Self.pageBits)), create: false) else { return nil }
            return page[Int(serial) & (Self.pageSize - 1)]
        }
        set {
            let serial = key & 0xFFFF_FFFF_FFFF
            if serial >= Self.maxPagedSerial {
                if let newValue {
                    if overflow.updateValue(newValue, forKey: key) == nil { count += 1 }
                } else if overflow.removeValue(forKey: key) != nil {
                    count -= 1
                }
                return
            }
            let ks = UInt16(truncatingIfNeeded: key >> 48)
            var found = space(ks)
            if found == nil {
                guard newValue != nil else { return }
                found = Space()
                keyspaces.append(ks)
                spaces.append(found!)
            }
            guard let page = found!.page(Int(serial >> UInt64(Self.pageBits)), create: newValue != nil) else { return }
            let slot = page + (Int(serial) & (Self.pageSize - 1))
            let old = slot.pointee
            slot.pointee = newValue
            count += (old == nil ? 0 : -1) + (newValue == nil ? 0 : 1)
        }
    }

    /// Registers many objects (marking them registered): the keyspace's pages and the current
    /// page are looked up once per run of keys that share them, and no reference is retained.
    mutating func insertAll(_ objects: [ManagedObject]) {
        objects.withUnsafeBufferPointer { list in
            guard let base = list.baseAddress else { return }
            let raw = UnsafeRawPointer(base)
            var pageNumber = -1
            var keyspace: UInt16 = 0
            var page: UnsafeMutablePointer<Unmanaged<ManagedObject>?>?
            for i in 0..<list.count {
                // The reference as a bare pointer: the array keeps the object alive.
                let object = Unmanaged<ManagedObject>.fromOpaque(raw.load(fromByteOffset: i * MemoryLayout<ManagedObject>.stride, as: UnsafeRawPointer.self))
                let key = object._withUnsafeGuaranteedRef { o in
                    o.flags.insert(.registered)
                    return o.engineKey
                }
                let serial = key & 0xFFFF_FFFF_FFFF
                let ks = UInt16(truncatingIfNeeded: key >> 48)
                guard serial < Self.maxPagedSerial else {
                    self[key] = object
                    continue
                }
                let p = Int(serial >> UInt64(Self.pageBits))
                if page == nil || p != pageNumber || ks != keyspace {
                    var found = space(ks)
                    if found == nil {
                        found = Space()
                        keyspaces.append(ks)
                        spaces.append(found!)
                    }
                    page = found!.page(p, create: true)
                    pageNumber = p
                    keyspace = ks
                }
                let slot = page! + (Int(serial) & (Self.pageSize - 1))
                if slot.pointee == nil { count += 1 }
                slot.pointee = object
            }
        }
    }

    /// Removes one entry, with a single walk to it.
    mutating func remove(_ key: UInt64) {
        let serial = key & 0xFFFF_FFFF_FFFF
        guard serial < Self.maxPagedSerial else {
            if overflow.removeValue(forKey: key) != nil { count -= 1 }
            return
        }
        guard let space = space(UInt16(truncatingIfNeeded: key >> 48)),
              let page = space.page(Int(serial >> UInt64(Self.pageBits)), create: false) else { return }
        let slot = page + (Int(serial) & (Self.pageSize - 1))
        if slot.pointee != nil {
            slot.pointee = nil
            count -= 1
        }
    }

    @discardableResult
    mutating func removeValue(forKey key: UInt64) -> Unmanaged<ManagedObject>? {
        let old = self[key]
        if old != nil { self[key] = nil }
        return old
    }

    mutating func reserveCapacity(_ n: Int) {}

    func all() -> [Unmanaged<ManagedObject>] {
        var result: [Unmanaged<ManagedObject>] = []
        for space in spaces {
            for case let page? in space.pages {
                for i in 0..<Self.pageSize { if let u = page[i] { result.append(u) } }
            }
        }
        result.append(contentsOf: overflow.values)
        return result
    }
}

