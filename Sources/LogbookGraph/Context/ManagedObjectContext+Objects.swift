import Foundation
import LogbookEngine

extension ManagedObjectContext {
    // MARK: Insert

    /// Inserts a new object of the named entity. An unknown name is an error.
    public func insertNewObject(forEntityName name: String) throws -> ManagedObject {
        let layout = try insertable(model.layout(named: name))
        return try undoable { try makeInserted(layout) }
    }

    /// Inserts a new object of a typed class (`Person.self`).
    public func insert<T: ManagedObject>(_ type: T.Type) throws -> T {
        let layout = try insertable(model.layout(for: type))
        if undoHistory == nil && layout.managedClass == T.self {
            return unsafeDowncast(try makeInserted(layout), to: T.self)
        }
        guard let object = try undoable({ try makeInserted(layout) }) as? T else {
            throw LogbookError(
                .unknownEntity,
                "entity \(layout.name) is not made of \(T.self); give the entity `class: \(T.self).self`",
                entity: layout.name)
        }
        return object
    }

    /// The layout, unless its entity is abstract (it has no objects of its own).
    func insertable(_ layout: EntityLayout) throws -> EntityLayout {
        try container.checkConfiguration(layout)
        guard !layout.entity.isAbstract else {
            throw LogbookError(
                .invalidArgument,
                "entity \(layout.name) is abstract: insert one of its sub-entities (\(model.subentities(of: layout.name).joined(separator: ", ")))",
                entity: layout.name)
        }
        return layout
    }

    /// The layout of the entity whose keyspace a key is in.
    func layout(forKey key: UInt64) -> EntityLayout? {
        storeLayout.entityByKeyspace[EngineKey(rawValue: key).keyspace].map { model.layouts[$0] }
    }

    func makeInserted(_ layout: EntityLayout) throws -> ManagedObject {
        let key: UInt64
        if let range = reservedSerials[layout.index], !range.isEmpty {
            key = range.lowerBound
            reservedSerials[layout.index] = (range.lowerBound + 1)..<range.upperBound
        } else {
            let range = try container.reserveKeys(entity: layout.index, count: 1024)
            key = range.lowerBound
            reservedSerials[layout.index] = (range.lowerBound + 1)..<range.upperBound
        }
        let object = layout.managedClass.init(
            ManagedObject.Bootstrap(
                binding: binding(layout), key: key, slots: layout.defaultSlots, fault: false))
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
        // An object read from the store is read as other writing processes left it, as a
        // fetch reads it.
        if registered(id.key) == nil { try catchUpWithOtherWriters() }
        return try object(forKey: id.key)
    }

    /// The object for an ID (as `existingObject(with:)`; Logbook checks at once that it exists).
    public func object(with id: ObjectID) throws -> ManagedObject { try existingObject(with: id) }

    func object(forKey key: UInt64) throws -> ManagedObject {
        if let o = registered(key) { return o }
        guard let entity = storeLayout.entityByKeyspace[EngineKey(rawValue: key).keyspace] else {
            throw LogbookError(.objectNotFound, "no entity has keyspace \(EngineKey(rawValue: key).keyspace)")
        }
        let layout = model.layouts[entity]
        if let parent, let found = try parentState(of: key, parent: parent) {
            guard let slots = found.slots else { throw notFound(key, layout) }
            return materialize(key: key, layout: layout, slots: slots, version: found.version)
        }
        let snapshot = readSnapshot()
        guard let slots = try decode(snapshot, key: key, layout: layout) else {
            throw LogbookError(
                .objectNotFound, "no \(layout.name) with serial \(EngineKey(rawValue: key).id) in the store",
                entity: layout.name, objectID: ObjectID(store: storeLayout.identity, key: key))
        }
        return materialize(key: key, layout: layout, slots: slots, version: snapshot.version)
    }

    func notFound(_ key: UInt64, _ layout: EntityLayout) -> LogbookError {
        LogbookError(
            .objectNotFound, "no \(layout.name) with serial \(EngineKey(rawValue: key).id) in the store",
            entity: layout.name, objectID: ObjectID(store: storeLayout.identity, key: key))
    }

    func materialize(key: UInt64, layout: EntityLayout, slots: [FieldValue], version: UInt64) -> ManagedObject {
        if let o = registered(key) { return o }
        let object = layout.managedClass.init(
            ManagedObject.Bootstrap(
                binding: binding(layout), key: key, slots: slots, fault: false, version: version))
        register(object)
        return object
    }

    func decode(_ snapshot: Snapshot, key: UInt64, layout: EntityLayout) throws -> [FieldValue]? {
        do {
            let destinations = layout.toOne.map { storeLayout.keyspace[layout.relationshipDestination[$0]] }
            let attributeCount = layout.attributeCount
            return try snapshot.withValue(forKey: key) { raw in
                try RecordCodec.decode(raw, layout: layout) { destinations[$0 - attributeCount] }
            }
        } catch is RecordCodec.Malformed {
            throw LogbookError(
                .store, "the record of \(layout.name) \(EngineKey(rawValue: key).id) is malformed", entity: layout.name)
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
            let slots: [FieldValue]
            do {
                slots = try arena.slots(index: object.rawIndex, layout: layout) { slot in
                    self.storeLayout.keyspace[
                        layout.relationshipDestination[layout.toOne[slot - layout.attributeCount]]]
                }
            } catch {
                throw LogbookError(
                    .store, "the record of \(layout.name) \(EngineKey(rawValue: object.engineKey).id) is malformed",
                    entity: layout.name)
            }
            // The arena left first: its place in `payload` is not needed once the values are there.
            object.rawArena = nil
            object.slots = slots
            object.flags.remove(.fault)
            return
        }
        if let parent, let found = try parentState(of: object.engineKey, parent: parent) {
            guard let slots = found.slots else {
                throw LogbookError(
                    .objectNotFound, "the object was deleted in the parent context", entity: object.layout.name,
                    objectID: object.objectID)
            }
            object.batch?.forget(object)
            object.batch = nil
            object.slots = slots
            object.baseVersion = found.version
            object.flags.remove(.fault)
            return
        }
        if let batch = object.batch {
            // Load the whole batch, from one state of the store.
            let members = batch.take()
            let source = snapshot ?? batch.snapshot ?? readSnapshot()
            var read = 0
            for o in members where o.flags.contains(.fault) {
                o.batch = nil
                if let slots = try decode(source, key: o.engineKey, layout: o.layout) {
                    o.slots = slots
                    o.baseVersion = source.version
                    o.flags.remove(.fault)
                    read += 1
                }
            }
            lastFetchRecordsRead += read
            if !object.flags.contains(.fault) { return }
            throw LogbookError(
                .objectNotFound, "the object was deleted from the store", entity: object.layout.name,
                objectID: object.objectID)
        }
        let source = snapshot ?? readSnapshot()
        guard let slots = try decode(source, key: object.engineKey, layout: object.layout) else {
            throw LogbookError(
                .objectNotFound, "the object was deleted from the store", entity: object.layout.name,
                objectID: object.objectID)
        }
        object.slots = slots
        object.baseVersion = source.version
        object.flags.remove(.fault)
    }

}
