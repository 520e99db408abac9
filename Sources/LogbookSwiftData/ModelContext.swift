import Foundation
import LogbookEngine
import LogbookGraph

/// Where model objects are inserted, fetched, changed, deleted and saved (SwiftData's
/// `ModelContext`). A context is used by one thread or actor at a time: the container's
/// `mainContext` on the main actor, a `@ModelActor`'s `modelContext` on its actor, or one made
/// with `ModelContext(container)` where it is used. Objects stay in their context; their
/// `persistentModelID`s cross.
///
/// ```swift
/// let context = ModelContext(container)
/// let author = Author(name: "Ursula")
/// context.insert(author)
/// author.books.append(Book(isbn: "1", title: "The Dispossessed"))   // inserted with it
/// try context.save()
/// let recent = try context.fetch(FetchDescriptor<Book>(predicate: #Predicate { $0.title.contains("The") },
///                                                      sortBy: [SortDescriptor(\.title)]))
/// ```
///
/// Differences from SwiftData, on purpose: an object inserted into one context and assigned to
/// a relationship of an object of another is an error (reported by `save()`), as in Core Data;
/// `autosaveEnabled` saves only the main context and contexts of model actors (it needs a
/// queue to save on), after the current turn of that queue.
public final class ModelContext {
    /// The container the context belongs to.
    public let container: ModelContainer
    /// The Core Data–style context underneath (for what this layer does not have: undo,
    /// history, batch requests, fetched-results controllers).
    public private(set) var managedObjectContext: ManagedObjectContext

    final class WeakModel {
        weak var model: (any PersistentModel)?
        init(_ model: any PersistentModel) { self.model = model }
    }
    /// The model object of each managed object handed out, by engine key.
    private var models: [UInt64: WeakModel] = [:]
    private var pruneAt = 1024
    private var observation: ContextObservation?
    private var autosaveScheduled = false

    /// Whether changes are saved without a call to `save()`, soon after they are made (true for
    /// the main context, false for others, as in SwiftData).
    public var autosaveEnabled = false

    /// A context of `container` for the thread or actor that uses it.
    public convenience init(_ container: ModelContainer) {
        self.init(container, concurrencyType: .confinement)
    }

    init(_ container: ModelContainer, concurrencyType: ManagedObjectContext.ConcurrencyType) {
        self.container = container
        managedObjectContext = Self.makeContext(container, concurrencyType)
        observe()
    }

    private static func makeContext(
        _ container: ModelContainer, _ type: ManagedObjectContext.ConcurrencyType
    ) -> ManagedObjectContext {
        let context =
            type == .mainQueue
            ? container.persistentContainer.viewContext
            : container.persistentContainer.newContext(concurrencyType: type)
        // Inserting an object whose unique values are stored already updates the stored one.
        context.mergePolicy = .mergeByPropertyObjectTrump
        return context
    }

    /// Gives the context a queue of its own (a model actor's executor runs on it), so that
    /// other contexts' saves are merged into it. Only before it is used.
    func adoptPrivateQueue() -> DispatchQueue {
        if managedObjectContext.concurrencyType != .privateQueue {
            precondition(
                models.isEmpty && !managedObjectContext.hasChanges,
                "a model actor's context must not have been used before")
            managedObjectContext = Self.makeContext(container, .privateQueue)
            observe()
        }
        return managedObjectContext.queue!
    }

    /// Observers of models hear of changes that come from outside their setters: merges of
    /// other contexts' saves, refreshes, rollbacks.
    private func observe() {
        observation = managedObjectContext.observeEvents { [weak self] event in
            guard let self else { return }
            self.postNotification(for: event)
            guard case .objectsDidChange(let changes) = event else { return }
            self.notifyObservers(of: changes.updated.union(changes.refreshed).union(changes.deleted))
        }
    }

    private func notifyObservers(of ids: Set<ObjectID>) {
        for id in ids {
            guard let model = models[id.key]?.model else { continue }
            for p in ModelEntityInfo.cached(type(of: model))?.metadata ?? [] { model._$notifyMutation(forKey: p.name) }
        }
    }

    // MARK: Objects

    /// Inserts an object (and the unattached objects its relationships hold) into the context;
    /// saved by the next `save()`.
    public func insert<T: PersistentModel>(_ model: T) {
        let backing = model.persistentBackingData
        if let other = backing.context {
            precondition(other === self, "\(T.self) is in another context already; use its persistentModelID there")
            return
        }
        do {
            // The object's own class: a subclass's object inserted as its superclass is stored
            // in the subclass's entity.
            let info = try container.info(for: type(of: model))
            // Properties of subclasses not set since `super.init` have their initial values in
            // the object: read them while it is unattached.
            var initial: [String: Any] = [:]
            for p in info.metadata where info.superInfo != nil && !backing.hasPending(p.name) {
                if let v = model[keyPath: p.keyPath] { initial[p.name] = v }
            }
            let object = try managedObjectContext.insertNewObject(forEntityName: info.name)
            let pending = backing.attach(to: object, context: self, info: info).merging(initial) { a, _ in a }
            models[object.engineKey] = WeakModel(model)
            for (key, value) in pending { backing.setValue(forKey: key, to: value) }
        } catch {
            preconditionFailure("\(T.self) cannot be inserted: \(error)")
        }
        didChange()
    }

    /// Deletes an object (its delete rules apply at once, as in Core Data); the next `save()`
    /// removes it from the store. An unattached object is left alone.
    public func delete<T: PersistentModel>(_ model: T) {
        guard let object = model.persistentBackingData.object, model.persistentBackingData.context === self else {
            return
        }
        managedObjectContext.delete(object)
        didChange()
    }

    /// Deletes every object of `model` the predicate matches (all with none), through this
    /// context so that delete rules and inverses apply; saved by the next `save()`.
    ///
    /// ```swift
    /// try context.delete(model: Book.self, where: #Predicate { $0.title.isEmpty })
    /// ```
    public func delete<T: PersistentModel>(
        model: T.Type, where predicate: Predicate<T>? = nil, includeSubclasses: Bool = true
    ) throws {
        var descriptor = FetchDescriptor<T>(predicate: predicate)
        descriptor.includeSubclasses = includeSubclasses
        for m in try fetch(descriptor) { delete(m) }
    }

    /// Writes the inserted, changed and deleted objects to the store, in one transaction.
    public func save() throws {
        autosaveScheduled = false
        guard managedObjectContext.hasChanges else { return }
        try managedObjectContext.save()
    }

    /// Forgets the changes made since the last save: changed objects take their stored values
    /// again, inserted ones leave the context, deleted ones come back.
    public func rollback() {
        let touched = managedObjectContext.updatedObjects.union(managedObjectContext.deletedObjects)
            .union(managedObjectContext.insertedObjects)
        managedObjectContext.rollback()
        notifyObservers(of: Set(touched.map(\.objectID)))
    }

    /// Whether the context has changes not yet saved.
    public var hasChanges: Bool { managedObjectContext.hasChanges }

    /// The objects inserted since the last save.
    public var insertedModelsArray: [any PersistentModel] { managedObjectContext.insertedObjects.map(model(for:)) }
    /// The objects changed since the last save.
    public var changedModelsArray: [any PersistentModel] { managedObjectContext.updatedObjects.map(model(for:)) }
    /// The objects deleted since the last save.
    public var deletedModelsArray: [any PersistentModel] { managedObjectContext.deletedObjects.map(model(for:)) }

    /// Runs `block`, then saves; if `block` throws, the changes are rolled back and the error
    /// rethrown.
    ///
    /// ```swift
    /// try context.transaction {
    ///     context.insert(Book(isbn: "2", title: "Lathe of Heaven"))
    ///     context.delete(old)
    /// }
    /// ```
    public func transaction(block: () throws -> Void) throws {
        do { try block() } catch {
            rollback()
            throw error
        }
        try save()
    }

    /// The object of this context with the identifier: the registered one, else one read
    /// from the store. An identifier of an object the store does not have stops the program,
    /// as SwiftData's does; `registeredModel(for:)` or a fetch by identifier does not.
    public func model(for id: PersistentIdentifier) -> any PersistentModel {
        guard let objectID = container.objectID(for: id) else {
            preconditionFailure("\(id) is not an object of this container's store")
        }
        if let m = models[objectID.key]?.model { return m }
        do { return model(for: try managedObjectContext.existingObject(with: objectID)) } catch {
            preconditionFailure("\(id): \(error)")
        }
    }

    /// The object with the identifier if this context holds it already, else nil.
    public func registeredModel<T: PersistentModel>(for id: PersistentIdentifier) -> T? {
        guard let objectID = container.objectID(for: id) else { return nil }
        return models[objectID.key]?.model as? T
    }

    /// Makes the pending changes visible to fetches (they are at once in Logbook; kept for
    /// SwiftData code).
    public func processPendingChanges() {}

    // MARK: Between models and managed objects

    /// The model object over a managed object of this context (one per object, while in use).
    func model(for object: ManagedObject) -> any PersistentModel {
        let key = object.engineKey
        if let m = models[key]?.model, m.persistentBackingData.object === object { return m }
        guard let info = container.entityInfo[object.entity.name] else {
            preconditionFailure("\(object.entity.name) is not a @Model class of this container")
        }
        let model = info.type.init(backingData: ModelBackingData(object: object, context: self, info: info))
        if models.count >= pruneAt {
            models = models.filter { $0.value.model != nil }
            pruneAt = max(1024, models.count * 2)
        }
        models[key] = WeakModel(model)
        return model
    }

    /// The managed object of a model object, inserting the object when it is unattached.
    func managedObject(for model: any PersistentModel) throws -> ManagedObject {
        if model.persistentBackingData.context == nil { insert(model) }
        guard let object = model.persistentBackingData.object, model.persistentBackingData.context === self else {
            throw LogbookError(
                .invalidArgument,
                "\(model.persistentModelID) belongs to another context; fetch it here with model(for:)")
        }
        return object
    }

    /// Runs a write that can fail; its error is reported by the next `save()` (setters do not
    /// throw).
    func record(_ body: () throws -> Void) {
        do { try body() } catch {
            managedObjectContext.recordError(
                LogbookError.wrap(error) as? LogbookError ?? LogbookError(.invalidArgument, "\(error)"))
        }
    }

    /// Schedules the autosave, if on.
    func didChange() {
        guard autosaveEnabled, !autosaveScheduled, managedObjectContext.concurrencyType != .confinement else { return }
        autosaveScheduled = true
        let box = UncheckedSendable(self)
        managedObjectContext.perform {
            // On the context's own queue (the main queue, or a model actor's).
            let context = box.value
            guard context.autosaveScheduled else { return }
            do { try context.save() } catch { context.autosaveError = error }
        }
    }

    /// The error of the last autosave that failed (nil after one that succeeded).
    public internal(set) var autosaveError: (any Error)?
}
