import Foundation
import LogbookEngine

// What the `logbook export` and `logbook import` commands need beyond the public API: every
// entity's properties with the inherited ones, a transformable value's stored bytes (the app's
// transformer need not be in the tool), and objects made with the serial numbers they had.

extension ManagedObjectModel {
    /// The entity with its inherited attributes and relationships first, then its own.
    package func flattenedEntity(named name: String) -> EntityDescription? {
        byName[name].map { flattened[$0] }
    }
}

extension ManagedObject {
    /// The bytes a transformable attribute stores (what its transformer made), nil for none.
    package func storedBytes(forKey key: String) throws -> Data? {
        guard let slot = layout.slotByName[key], slot < layout.attributeCount else {
            throw LogbookError(.unknownKey, "\(layout.name) has no attribute \(key)", entity: layout.name, key: key)
        }
        if flags.contains(.fault), let context = contextRef { try context.fulfill(self) }
        if case .data(let d) = slots[slot] { return d }
        return nil
    }

    /// Sets the bytes a transformable attribute stores, as its transformer would have made them.
    package func setStoredBytes(_ bytes: Data?, forKey key: String) throws {
        guard let slot = layout.slotByName[key], slot < layout.attributeCount, let context = contextRef else {
            throw LogbookError(.unknownKey, "\(layout.name) has no attribute \(key)", entity: layout.name, key: key)
        }
        context.setSlot(self, slot, bytes.map { .data($0) } ?? .null)
    }
}

extension ManagedObjectContext {
    /// Inserts an object of `entityName` with the serial number `serial` (an import keeps the
    /// exported objects' identities); later inserts get serials after it. An object with that
    /// serial in the store, or inserted here, is an error.
    package func insertNewObject(forEntityName name: String, serial: UInt64) throws -> ManagedObject {
        let layout = try insertable(model.layout(named: name))
        guard serial > 0, serial <= EngineKey.maxID else {
            throw LogbookError(.invalidArgument, "serial \(serial) is out of range", entity: name)
        }
        let key = EngineKey(keyspace: storeLayout.keyspace[layout.index], id: serial).rawValue
        if readSnapshot().contains(key) || registered(key) != nil {
            throw LogbookError(.invalidArgument, "the store already has \(name) p\(serial)", entity: name)
        }
        try container.noteSerial(serial, entity: layout.index)
        let object = layout.managedClass.init(
            ManagedObject.Bootstrap(binding: binding(layout), key: key, slots: layout.defaultSlots, fault: false))
        willChange(object)
        object.flags.insert(.inserted)
        inserted.append(object)
        return object
    }
}

extension PersistentContainer {
    /// Keeps the serial counter of an entity's tree above `serial`.
    func noteSerial(_ serial: UInt64, entity: Int) throws {
        let counter = storeLayout.keyspace[model.root[entity]]
        try shared.counters.withLock { c in
            // Claimed too, so that no other writer hands it out.
            do {
                c[counter] = try store.claimSerials(
                    keyspace: counter, count: 0, atLeast: max(c[counter, default: 1], serial + 1))
            } catch { throw LogbookError.wrap(error) }
        }
    }
}

extension PersistentContainer {
    /// The store's identifier (Core Data's `NSPersistentStore.identifier`): the host of its
    /// object ID URIs, made when the store was created.
    public var storeIdentifier: String { storeLayout.identity.uuid.uuidString }
}
