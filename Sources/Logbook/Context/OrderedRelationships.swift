import Foundation
import LogbookEngine

/// Ordered to-many relationships. Membership lives in the relationship's set, as for any
/// to-many relationship (so counts, inverses and merges work alike); the order lives in pages
/// of at most `OrderPages.pageSize` members, in the relationship's order keyspace:
///
/// - the directory, under the owner's serial: a varint page count, then for each page a varint
///   page number and a varint member count;
/// - each page, under `1 << 47 | page number`: a varint count, then each member as a varint of
///   `serial << 16 | keyspace`.
///
/// A save rewrites only the pages whose run of members changed (and the directory): moving one
/// member of a long relationship writes two pages, not the whole order. Members the order does
/// not list (added from the inverse side by a save that did not rewrite the order) follow, in
/// key order; listed members no longer in the set are skipped.
enum OrderPages {
    static let pageSize = 512
    /// Page records sit above every owner serial in the order keyspace.
    static let pageBase: UInt64 = 1 << 47

    struct Directory {
        var pages: [(number: UInt64, count: Int)] = []
    }

    static func decodeDirectory(_ raw: UnsafeRawBufferPointer) throws -> Directory {
        var o = 0
        var d = Directory()
        let n = try RecordCodec.length(raw, &o)
        guard n <= raw.count else { throw RecordCodec.Malformed() }
        for _ in 0..<n {
            let number = try RecordCodec.varint(raw, &o)
            let count = try RecordCodec.length(raw, &o)
            d.pages.append((number, count))
        }
        return d
    }

    static func encodeDirectory(_ d: Directory) -> [UInt8] {
        var out: [UInt8] = []
        RecordCodec.appendVarint(UInt64(d.pages.count), &out)
        for p in d.pages {
            RecordCodec.appendVarint(p.number, &out)
            RecordCodec.appendVarint(UInt64(p.count), &out)
        }
        return out
    }
}

extension ManagedObjectContext {
    /// The members of an ordered relationship, in order, with unsaved changes.
    func orderedKeys(_ owner: UInt64, _ layout: EntityLayout, _ r: Int) throws -> [UInt64] {
        let k = setKey(owner, layout, r)
        if let pending = orderOverrides[k] { return pending }
        let members = relatedKeys(owner, layout, r)
        var stored: [UInt64]
        if let parent {
            stored = try parent.performAndWait { try parent.orderedKeys(owner, layout, r) }
        } else if let directoryKey = storeLayout.orderKey(entity: layout.index, relationship: r, owner: owner) {
            stored = try storedOrder(directoryKey, snapshot: readSnapshot()).flatMap(\.members)
        } else {
            stored = []
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

    /// The stored pages of an order, in order: each page's number and members.
    func storedOrder(_ directoryKey: UInt64, snapshot: Snapshot) throws -> [(number: UInt64, members: [UInt64])] {
        do {
            guard let directory = try snapshot.withValue(forKey: directoryKey, OrderPages.decodeDirectory) else {
                return []
            }
            let keyspace = EngineKey(rawValue: directoryKey).keyspace
            return try directory.pages.map { page in
                let key = EngineKey(keyspace: keyspace, id: OrderPages.pageBase | page.number).rawValue
                let members = try snapshot.withValue(forKey: key) { raw in try Self.decodeOrder(raw) } ?? []
                return (page.number, members)
            }
        } catch let e as LogbookError {
            throw e
        } catch {
            throw LogbookError(.store, "the order of an ordered relationship is malformed")
        }
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
            throw LogbookError(.store, "a page of an ordered relationship is malformed")
        }
    }

    static func encodeOrder(_ keys: ArraySlice<UInt64>) -> [UInt8] {
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
        let current = Set(try orderedKeys(owner.engineKey, owner.layout, r))
        let gone = try current.subtracting(seen).map { try object(forKey: $0) }
        if !gone.isEmpty { try removeRelated(owner, relationship: r, gone) }
        let joining = unique.filter { !current.contains($0.engineKey) }
        if !joining.isEmpty { try addRelated(owner, relationship: r, joining) }
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

    /// The order pages a save writes: for each pending order, the pages whose run of members
    /// changed and the directory; pages no longer used are deleted. Runs under the save lock.
    func writeOrders(into t: inout Transaction, skipping deletedSets: Set<UInt64>) throws {
        guard !orderOverrides.isEmpty else { return }
        let snapshot = container.store.snapshot()
        for (k, keys) in orderOverrides where !deletedSets.contains(k) {
            guard let directoryKey = orderKey(ofSet: k) else { continue }
            let keyspace = EngineKey(rawValue: directoryKey).keyspace
            let old = try storedOrder(directoryKey, snapshot: snapshot)
            var startOf: [UInt64: Int] = [:]
            for (i, page) in old.enumerated() { if let first = page.members.first { startOf[first] = i } }
            var directory = OrderPages.Directory()
            var used = Set<UInt64>()
            var dirty: [UInt64] = []
            func flush() {
                var start = 0
                while start < dirty.count {
                    // A run a little longer than a page stays one page (an insertion into a full
                    // page rewrites that page, not two).
                    let rest = dirty.count - start
                    let end = rest <= OrderPages.pageSize * 3 / 2 ? dirty.count : start + OrderPages.pageSize
                    let number = container.nextOrderPage(keyspace: keyspace, snapshot: snapshot)
                    t.put(
                        EngineKey(keyspace: keyspace, id: OrderPages.pageBase | number).rawValue,
                        value: Self.encodeOrder(dirty[start..<end]))
                    directory.pages.append((number, end - start))
                    start = end
                }
                dirty.removeAll(keepingCapacity: true)
            }
            var p = 0
            var nextOld = 0
            while p < keys.count {
                // A stored page whose members come next, unchanged, is kept as it is.
                if let j = startOf[keys[p]], j >= nextOld {
                    let page = old[j].members
                    if p + page.count <= keys.count && keys[p..<(p + page.count)].elementsEqual(page) {
                        flush()
                        directory.pages.append((old[j].number, page.count))
                        used.insert(old[j].number)
                        p += page.count
                        nextOld = j + 1
                        continue
                    }
                }
                dirty.append(keys[p])
                p += 1
            }
            flush()
            for page in old where !used.contains(page.number) {
                t.delete(EngineKey(keyspace: keyspace, id: OrderPages.pageBase | page.number).rawValue)
            }
            t.put(directoryKey, value: OrderPages.encodeDirectory(directory))
        }
    }

    /// Deletes an owner's order (its directory and pages). Runs under the save lock.
    func deleteOrder(_ directoryKey: UInt64, snapshot: Snapshot, into t: inout Transaction) throws {
        let keyspace = EngineKey(rawValue: directoryKey).keyspace
        for page in try storedOrder(directoryKey, snapshot: snapshot) {
            t.delete(EngineKey(keyspace: keyspace, id: OrderPages.pageBase | page.number).rawValue)
        }
        if snapshot.contains(directoryKey) { t.delete(directoryKey) }
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

    /// Moves the member at `from` to `to` in an ordered relationship. Membership does not
    /// change: only the order (no object is loaded).
    public func moveObject(at from: Int, to: Int, inRelationship key: String) throws {
        let context = try checkUsable(key)
        let r = try orderedIndex(key)
        var keys = try context.orderedKeys(engineKey, layout, r)
        guard from >= 0, from < keys.count else { throw outOfRange(from, keys.count, key) }
        guard to >= 0, to < keys.count else { throw outOfRange(to, keys.count, key) }
        try context.undoable {
            keys.insert(keys.remove(at: from), at: to)
            context.orderOverrides[context.setKey(engineKey, layout, r)] = keys
            context.touch(self)
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
