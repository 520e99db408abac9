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
        let before = members
        try change(&members)
        try context.undoable { try context.setOrder(self, r, members, changing: before) }
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
    @usableFromInline let name: PropertyName

    /// The relationship's name in the model.
    public var key: String { name.string }

    /// A property for the ordered relationship named `key` (held in two bytes, as
    /// `@Managed` holds its name).
    public init(_ key: StaticString) { name = PropertyName(key) }

    /// A property for the ordered relationship named `key`, given as a `String`.
    @_disfavoredOverload
    public init(_ key: String) { name = PropertyName(key) }

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
        set { object.setValueRecordingErrors(newValue as [ManagedObject], forKey: object[keyPath: storageKeyPath].key) }
    }
}
