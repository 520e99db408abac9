import Foundation
import LogbookEngine

/// Ordered to-many relationships. Membership lives in the relationship's set, as for any
/// to-many relationship (so counts, inverses and merges work alike); the order lives in one
/// record per owner, in the relationship's order keyspace: a varint count, then each member as
/// a varint of `serial << 16 | keyspace`. Members the order record does not list (added from
/// the inverse side by a save that did not rewrite the order) follow, in key order; listed
/// members no longer in the set are skipped.
extension ManagedObjectContext {
    /// The members of an ordered relationship, in order, with unsaved changes.
    func orderedKeys(_ owner: UInt64, _ layout: EntityLayout, _ r: Int) throws -> [UInt64] {
        let k = setKey(owner, layout, r)
        if let pending = orderOverrides[k] { return pending }
        let members = relatedKeys(owner, layout, r)
        var stored: [UInt64]
        if let parent {
            stored = try parent.performAndWait { try parent.orderedKeys(owner, layout, r) }
        } else {
            stored = []
            if let orderKey = storeLayout.orderKey(entity: layout.index, relationship: r, owner: owner) {
                stored =
                    try readSnapshot().withValue(forKey: orderKey) { raw in try Self.decodeOrder(raw) } ?? []
            }
        }
        var seen = Set<UInt64>()
        var result: [UInt64] = []
        result.reserveCapacity(members.count)
        for key in stored where members.contains(key) && seen.insert(key).inserted { result.append(key) }
        if result.count < members.count {
            result += members.subtracting(seen).sorted()
        }
        return result
    }

    static func decodeOrder(_ raw: UnsafeRawBufferPointer) throws -> [UInt64] {
        var o = 0
        do {
            let count = try RecordCodec.length(raw, &o)
            guard count <= raw.count else { throw RecordCodec.Malformed() }
            var keys: [UInt64] = []
            keys.reserveCapacity(count)
            for _ in 0..<count {
                let code = try RecordCodec.varint(raw, &o)
                keys.append(EngineKey(keyspace: UInt16(truncatingIfNeeded: code), id: code >> 16).rawValue)
            }
            return keys
        } catch {
            throw LogbookError(.store, "the order record of an ordered relationship is malformed")
        }
    }

    static func encodeOrder(_ keys: [UInt64]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(keys.count * 3 + 4)
        RecordCodec.appendVarint(UInt64(keys.count), &out)
        for k in keys { RecordCodec.appendVarint(RecordCodec.objectCode(k, .anyObject), &out) }
        return out
    }

    /// Makes `keys` the members of an ordered relationship, in this order: members leave and
    /// join through the usual paths (inverses follow), then the order is recorded.
    func setOrder(_ owner: ManagedObject, _ r: Int, _ objects: [ManagedObject]) throws {
        var seen = Set<UInt64>()
        let unique = objects.filter { seen.insert($0.engineKey).inserted }
        for o in unique { try checkRelated(owner, r, o) }
        let current = try orderedKeys(owner.engineKey, owner.layout, r)
        let gone = try Set(current).subtracting(seen).map { try object(forKey: $0) }
        try removeRelated(owner, relationship: r, gone)
        try addRelated(owner, relationship: r, unique.filter { !current.contains($0.engineKey) })
        orderOverrides[setKey(owner.engineKey, owner.layout, r)] = unique.map(\.engineKey)
        touch(owner)
    }

    /// Keeps a pending order in step when a member joins or leaves from elsewhere (the inverse
    /// side): a new member goes last.
    func orderMemberAdded(_ member: UInt64, setKey k: UInt64) {
        guard orderOverrides[k] != nil, !orderOverrides[k]!.contains(member) else { return }
        orderOverrides[k]!.append(member)
    }

    func orderMemberRemoved(_ member: UInt64, setKey k: UInt64) {
        orderOverrides[k]?.removeAll { $0 == member }
    }

    /// The order records a save writes: for each pending order, its record.
    func writeOrders(into t: inout Transaction, skipping deletedSets: Set<UInt64>) {
        for (k, keys) in orderOverrides where !deletedSets.contains(k) {
            guard let orderKey = orderKey(ofSet: k) else { continue }
            t.put(orderKey, value: Self.encodeOrder(keys))
        }
    }

    /// The order record's key for a set key (same owner serial, the relationship's order keyspace).
    func orderKey(ofSet k: UInt64) -> UInt64? {
        let ks = EngineKey(rawValue: k).keyspace
        for (e, sets) in storeLayout.setKeyspace.enumerated() {
            for (r, s) in sets.enumerated() where s == ks {
                if let o = storeLayout.orderKeyspace[e][r] { return EngineKey(rawValue: k).inKeyspace(o).rawValue }
            }
        }
        return nil
    }
}

extension ManagedObject {
    /// The members of an ordered to-many relationship, in order (Core Data's `NSOrderedSet`).
    ///
    /// ```swift
    /// let steps = try recipe.orderedObjects(forKey: "steps")
    /// try recipe.moveObject(at: 3, to: 0, inRelationship: "steps")
    /// ```
    public func orderedObjects(forKey key: String) throws -> [ManagedObject] {
        let context = try checkUsable(key)
        let r = try orderedIndex(key)
        let keys = try context.orderedKeys(engineKey, layout, r)
        let byKey = Dictionary(
            try context.relatedObjects(self, relationship: r).map { ($0.engineKey, $0) },
            uniquingKeysWith: { a, _ in a })
        return keys.compactMap { byKey[$0] }
    }

    /// Inserts an object at a position of an ordered relationship (moving it there if it is a
    /// member already). An index beyond the end is an `.invalidArgument` error.
    public func insert(_ object: ManagedObject, at index: Int, inRelationship key: String) throws {
        try changeOrder(key) { members in
            members.removeAll { $0 === object }
            guard index >= 0, index <= members.count else { throw outOfRange(index, members.count + 1, key) }
            members.insert(object, at: index)
        }
    }

    /// Removes the member at a position of an ordered relationship (its inverse follows).
    public func removeObject(at index: Int, fromRelationship key: String) throws {
        try changeOrder(key) { members in
            guard index >= 0, index < members.count else { throw outOfRange(index, members.count, key) }
            members.remove(at: index)
        }
    }

    /// Moves the member at `from` to `to` in an ordered relationship.
    public func moveObject(at from: Int, to: Int, inRelationship key: String) throws {
        try changeOrder(key) { members in
            guard from >= 0, from < members.count else { throw outOfRange(from, members.count, key) }
            guard to >= 0, to < members.count else { throw outOfRange(to, members.count, key) }
            members.insert(members.remove(at: from), at: to)
        }
    }

    /// Replaces the member at a position of an ordered relationship with another object.
    public func replaceObject(at index: Int, with object: ManagedObject, inRelationship key: String) throws {
        try changeOrder(key) { members in
            guard index >= 0, index < members.count else { throw outOfRange(index, members.count, key) }
            if let existing = members.firstIndex(where: { $0 === object }), existing != index {
                members.remove(at: existing)
                members.insert(object, at: existing < index ? index - 1 : index)
                members.remove(at: existing < index ? index : index + 1)
            } else {
                members[index] = object
            }
        }
    }

    func changeOrder(_ key: String, _ change: (inout [ManagedObject]) throws -> Void) throws {
        let context = try checkUsable(key)
        let r = try orderedIndex(key)
        var members = try orderedObjects(forKey: key)
        try change(&members)
        try context.undoable { try context.setOrder(self, r, members) }
    }

    func orderedIndex(_ key: String) throws -> Int {
        let r = try toManyIndex(key)
        guard layout.entity.relationships[r].isOrdered else {
            throw LogbookError(
                .unknownKey, "\(key) of \(layout.name) is not an ordered relationship", entity: layout.name, key: key,
                objectID: objectID)
        }
        return r
    }

    func outOfRange(_ index: Int, _ count: Int, _ key: String) -> LogbookError {
        LogbookError(
            .invalidArgument, "index \(index) is outside 0..<\(count) of \(key)", entity: layout.name, key: key,
            objectID: objectID)
    }
}

/// A property for an ordered to-many relationship, as an array:
///
/// ```swift
/// final class Recipe: ManagedObject {
///     @OrderedToMany("steps") var steps: [Step]
/// }
/// recipe.steps.append(step)          // or assign a whole new order
/// ```
@propertyWrapper
public struct OrderedToMany<Destination: ManagedObject> {
    /// The relationship's name in the model.
    public let key: String

    /// A property for the ordered relationship named `key`.
    public init(_ key: String) { self.key = key }

    /// Not for use: the property is read and written through the enclosing object.
    @available(*, unavailable, message: "@OrderedToMany is for ManagedObject subclasses")
    public var wrappedValue: [Destination] {
        get { fatalError() }
        set { fatalError() }
    }

    /// The members in order; assigning sets members and order (inverses follow).
    public static subscript<Object: ManagedObject>(
        _enclosingInstance object: Object,
        wrapped wrappedKeyPath: ReferenceWritableKeyPath<Object, [Destination]>,
        storage storageKeyPath: ReferenceWritableKeyPath<Object, Self>
    ) -> [Destination] {
        get {
            guard let all = try? object.orderedObjects(forKey: object[keyPath: storageKeyPath].key) else { return [] }
            return all.compactMap { $0 as? Destination }
        }
        set {
            do {
                try object.setValue(newValue as [ManagedObject], forKey: object[keyPath: storageKeyPath].key)
            } catch let e as LogbookError {
                object.contextRef?.recordError(e)
            } catch {}
        }
    }
}

extension ManagedObjectContext {
    /// A fetched property's value: the objects of its destination that match its predicate,
    /// with `$FETCH_SOURCE` standing for `source` (evaluated each time it is read).
    func evaluate(_ fetched: FetchedPropertyDescription, source: ManagedObject) throws -> [ManagedObject] {
        var request = FetchRequest<ManagedObject>(entityName: fetched.destination)
        if let format = fetched.predicateFormat {
            request.predicate = try FetchPredicate(format: format).substituting(["FETCH_SOURCE": source])
        }
        return try fetch(request)
    }
}
