import Dispatch
import Foundation
import LogbookEngine
import Synchronization

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
    // `registry`, which deinit of objects may reach from elsewhere and which `registry` guards.

    /// Where a context runs (Core Data's concurrency types).
    public enum ConcurrencyType: Sendable {
        /// Runs on the main queue.
        case mainQueue
        /// Runs on a serial queue of its own.
        case privateQueue
        /// No queue: used by the thread that made it. Asynchronous fetches need a queue.
        case confinement
    }

    /// Where this context runs.
    public let concurrencyType: ConcurrencyType
    /// The container whose store the context reads and saves.
    public let container: PersistentContainer
    /// A name for logs and debugging; with history tracking on, each save's history records it.
    public var name: String?
    /// Who makes this context's saves (an app extension, an importer, a user), recorded in each
    /// save's history when tracking is on (Core Data's `transactionAuthor`).
    public var transactionAuthor: String?
    /// Merge the saves of other contexts of the container into this one (on this context's
    /// queue). Core Data's `automaticallyMergesChangesFromParent`; on by default here.
    ///
    /// Read by the thread of whichever context saves, so it is kept in an atomic: set it on any
    /// thread.
    public var automaticallyMergesChangesFromOtherContexts: Bool {
        get { mergesAutomatically.load(ordering: .acquiring) }
        set { mergesAutomatically.store(newValue, ordering: .releasing) }
    }
    private let mergesAutomatically = Atomic<Bool>(true)
    /// How a save resolves conflicts with other saves (`.error` by default, as in Core Data).
    public var mergePolicy: MergePolicy = .error
    /// The context a child context saves into (nil for a context that saves to the store).
    public let parent: ManagedObjectContext?
    /// Undo and redo of unsaved changes; nil (no undo) by default.
    // Unchecked exclusivity: like the change sets below, used on the context's queue only and
    // read by every change.
    @exclusivity(unchecked) public var undoHistory: UndoHistory?

    package let queue: DispatchQueue?
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

        /// The version tag the context's objects were last given (`ManagedObject.baseVersion`):
        /// objects read at one version share it. Used on the context's queue only.
        private var lastVersionTag: VersionTag?

        init(identity: StoreIdentity) { self.identity = identity }

        /// A tag for `version`: the last one made when it is for the same version.
        func versionTag(_ version: UInt64) -> VersionTag {
            if let last = lastVersionTag, last.version == version { return last }
            let tag = VersionTag(version)
            lastVersionTag = tag
            return tag
        }

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

    let registry = Registry()

    /// The binding of each entity (by its layout's index) that the context's objects hold.
    let bindings: [ObjectBinding]

    /// The binding objects of `layout` hold in this context.
    @inline(__always)
    func binding(_ layout: EntityLayout) -> ObjectBinding { bindings[layout.index] }

    // Unchecked exclusivity: touched only on the context's queue, never reentrantly (hot paths).
    @exclusivity(unchecked) var inserted = InsertedObjects()
    @exclusivity(unchecked) var updated: [UInt64: ManagedObject] = [:]
    @exclusivity(unchecked) var deleted: [UInt64: ManagedObject] = [:]
    /// Unsaved changes of to-many relationships, by set key: members added and removed.
    @exclusivity(unchecked) var setAdds: [UInt64: PendingMembers] = [:]
    @exclusivity(unchecked) var setRemoves: [UInt64: Set<UInt64>] = [:]
    /// Unsaved orders of ordered relationships, by set key: the members in their new order.
    @exclusivity(unchecked) var orderOverrides: [UInt64: [UInt64]] = [:]
    /// Engine records the next save of this (root) context writes in its transaction beside the
    /// objects, by key (LogbookSync's identity map and pull position, so that they commit with
    /// the changes they describe); the save that writes them clears them. Keys must be in a
    /// keyspace no entity has (`ManagedObjectContext.attachedKeyspace`).
    package var attachedRecords: [UInt64: [UInt8]] = [:]
    /// The keyspace of attached records (entities count up from 1; history is 65535).
    package static let attachedKeyspace: UInt16 = 0xFFFE
    /// In a child context: slots changed here whose value a merge found equal to the parent's
    /// (unsaved) value, by object key. They stay changes: the parent may change the value
    /// again before this context saves, and the save still sets this one (checker seed
    /// 663777). Cleared by a save, `rollback()`, `reset()` and a refresh of the object.
    @exclusivity(unchecked) var pinnedChanges: [UInt64: Set<Int>] = [:]
    /// Errors of typed property setters (which cannot throw), reported by the next save.
    var pendingErrors: [LogbookError] = []
    @exclusivity(unchecked) var groupDepth = 0
    /// The fault batches that may still hold a snapshot (see `releaseBatchSnapshots`).
    var faultBatches: [FaultBatch.Weak] = []
    var faultBatchesPruneAt = 64
    /// How many records the last fetch read from the store (0 when the index answered alone):
    /// a diagnostic that shows whether a request used its index.
    public internal(set) var lastFetchRecordsRead = 0
    /// Called after this context saves and after it merges another context's save.
    var changeObservers: [(ContextChanges) -> Void] = []
    /// Observers of `ContextEvent`s, by registration number (streams remove theirs when they end).
    let eventObservers = Locked<[Int: (ContextEvent) -> Void]>([:])
    var nextObserver = 0
    /// The snapshot a context pinned to a query generation reads (nil: the latest).
    var pinnedSnapshot: Snapshot?
    /// Whether the context reads the store as of a past version (`snapshot(asOf:)`): pinned
    /// for good, read-only, and deaf to other contexts' saves.
    public internal(set) var isHistorical = false

    /// A pinned context moves to the latest version (after a save, a merge, a reset); one that
    /// reads a past version stays where it is.
    func advancePinnedSnapshot() {
        if pinnedSnapshot != nil && !isHistorical { pinnedSnapshot = container.store.snapshot() }
        releaseBatchSnapshots()
    }

    /// A fault batch over `snapshot`, listed so that it gives the snapshot up when the
    /// context moves on.
    func makeFaultBatch(_ snapshot: Snapshot) -> FaultBatch {
        let batch = FaultBatch(snapshot: snapshot)
        if faultBatches.count >= faultBatchesPruneAt {
            faultBatches.removeAll { $0.batch == nil }
            faultBatchesPruneAt = max(64, faultBatches.count * 2)
        }
        faultBatches.append(FaultBatch.Weak(batch: batch))
        return batch
    }

    /// The context moved to a newer state: its fault batches load that state from now on,
    /// and the snapshots they held (and the journal segments those read) are released.
    func releaseBatchSnapshots() {
        guard !faultBatches.isEmpty, pinnedSnapshot == nil || !isHistorical else { return }
        for weak in faultBatches { weak.batch?.snapshot = nil }
        faultBatches.removeAll()
        faultBatchesPruneAt = 64
    }

    /// Calls `handler` (on the context's queue) with the changes of each save of this context
    /// and of each save of another context merged into it.
    public func observeChanges(_ handler: @escaping (ContextChanges) -> Void) {
        changeObservers.append(handler)
    }

    init(container: PersistentContainer, concurrencyType: ConcurrencyType, parent: ManagedObjectContext? = nil) {
        self.container = container
        self.concurrencyType = concurrencyType
        self.parent = parent
        self.token = Token(identity: container.storeLayout.identity)
        bindings = container.model.layouts.map { [token] in ObjectBinding(layout: $0, token: token) }
        switch concurrencyType {
        case .mainQueue:
            queue = .main
            Self.markMainQueue()
        case .privateQueue: queue = DispatchQueue(label: "logbook.context")
        case .confinement: queue = nil
        }
        if concurrencyType == .privateQueue { queue!.setSpecific(key: Self.queueKey, value: QueueOwner(self)) }
        token.owner = Unmanaged.passUnretained(self)
        token.alive = true
    }

    /// The snapshot reads use: the pinned query generation's, or the store's latest.
    @inline(__always)
    /// The store as this context reads it: its query generation, else its parent's (a child
    /// reads the generation its parent is pinned to), else the latest.
    func readSnapshot() -> Snapshot {
        if let pinnedSnapshot { return pinnedSnapshot }
        if let parent { return parent.performAndWait { parent.readSnapshot() } }
        return container.store.snapshot()
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

    /// Runs `body` on the context's queue and waits for it (inline when already there, as
    /// from `@MainActor` code for the view context, on whichever thread runs the main queue).
    public func performAndWait<T>(_ body: () throws -> T) rethrows -> T {
        guard let queue else { return try body() }
        if isOnQueue { return try body() }
        // The queues this thread holds now stay reachable inline from inside (`HeldQueues`).
        let main = DispatchQueue.getSpecific(key: Self.mainQueueKey) != nil
        let outer = DispatchQueue.getSpecific(key: Self.queueKey)?.context.map(ObjectIdentifier.init)
        let caller = pthread_self()
        return try queue.sync { try HeldQueues.holding(main: main, context: outer, caller: caller, body) }
    }

    /// True when running on the context's own queue, or inside a `performAndWait` entered from
    /// it on this thread. Told by a queue-specific value and `HeldQueues`, not by the thread:
    /// after `dispatchMain` (and after an `await` in `@MainActor` code) the main queue runs on
    /// a worker thread.
    var isOnQueue: Bool {
        guard queue != nil else { return true }
        if concurrencyType == .mainQueue {
            // (Not `queue === DispatchQueue.main`: on Linux that is a new wrapper each time.)
            return DispatchQueue.getSpecific(key: Self.mainQueueKey) != nil || Thread.isMainThread
                || (HeldQueues.existing?.main ?? 0) > 0
        }
        if DispatchQueue.getSpecific(key: Self.queueKey)?.context === self { return true }
        guard let held = HeldQueues.existing, !held.contexts.isEmpty else { return false }
        return held.contexts.contains(ObjectIdentifier(self))
    }

    /// Marks the main queue once, so that code running on it knows it.
    static func markMainQueue() { _ = mainQueueMarked }
    static let mainQueueKey = DispatchSpecificKey<Bool>()
    private static let mainQueueMarked: Bool = {
        DispatchQueue.main.setSpecific(key: mainQueueKey, value: true)
        return true
    }()

    final class QueueOwner: @unchecked Sendable {
        // Written once at creation; weak so that the queue does not keep the context alive.
        weak var context: ManagedObjectContext?
        init(_ context: ManagedObjectContext) { self.context = context }
    }

    static let queueKey = DispatchSpecificKey<QueueOwner>()

    // MARK: Changes

    /// Objects inserted since the last save.
    public var insertedObjects: Set<ManagedObject> { Set(inserted.values) }
    /// Objects with changed values or relationships since the last save.
    public var updatedObjects: Set<ManagedObject> { Set(updated.values) }
    /// Objects deleted since the last save (gone from the store at the save).
    public var deletedObjects: Set<ManagedObject> { Set(deleted.values) }

    /// True when there is anything unsaved.
    public var hasChanges: Bool {
        !inserted.isEmpty || !updated.isEmpty || !deleted.isEmpty || !setAdds.isEmpty || !setRemoves.isEmpty
            || !orderOverrides.isEmpty
    }

    package func recordError(_ error: LogbookError) { pendingErrors.append(error) }

    /// Serial numbers reserved for this context, by entity: a range taken from the container
    /// a batch at a time, so that inserting does not take the container's lock each time.
    @exclusivity(unchecked) var reservedSerials: [Int: Range<UInt64>] = [:]
}
