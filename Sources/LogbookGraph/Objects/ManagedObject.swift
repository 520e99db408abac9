import Foundation
import LogbookEngine

/// An object of an entity, living in one context.
///
/// Use it by key, or subclass it for typed properties:
///
/// ```swift
/// final class Person: ManagedObject {
///     @Managed("firstName") var firstName: String
///     @Managed("age") var age: Int32?
///     @ToOne("manager") var manager: Manager?
/// }
///
/// let person = try context.insert(Person.self)
/// person.firstName = "Anthony"
/// try person.setValue(51, forKey: "age")         // by key: a wrong type is an error
/// ```
///
/// Objects are confined to their context and its queue; pass `objectID` between contexts.
open class ManagedObject: Hashable, CustomStringConvertible {
    /// The entity name a subclass stands for (its type name unless overridden).
    open class var entityName: String { String(describing: self) }

    /// The object's entity and context, in one reference shared by the context's objects of
    /// the entity (`ObjectBinding`): a word and a retain per object where the two took two.
    let binding: ObjectBinding
    /// The entity's layout (on hot paths, `withLayout`).
    final var layout: EntityLayout {
        @inline(__always) get { binding.layout }
    }
    /// The engine key (keyspace and serial): the object's identity within its store.
    @exclusivity(unchecked) package var engineKey: UInt64
    /// The object's identity (its store comes from the context's token: objects need not
    /// hold a reference of their own to it).
    public var objectID: ObjectID { ObjectID(store: token.identity, key: engineKey) }
    /// The context, through a token that knows whether the context still exists (cheaper on
    /// every access than a weak reference).
    final var token: ManagedObjectContext.Token {
        @inline(__always) get { binding.token }
    }
    var contextRef: ManagedObjectContext? { token.context }

    /// Runs `body` with the object's layout, lent without a retain: the object holds its
    /// binding, which holds the layout, but the compiler does not see through the two and
    /// retained the layout (or the token) around each use: a retain and a release more per
    /// typed write and two per object in `validate`, counted with uprobes on the runtime
    /// (docs/benchmarks.md, "Where a fetched object's bytes go").
    @inline(__always)
    final func withLayout<R>(_ body: (EntityLayout) throws -> R) rethrows -> R {
        try Unmanaged.passUnretained(binding.layout)._withUnsafeGuaranteedRef(body)
    }

    /// Runs `body` with the object's token, lent without a retain (as `withLayout`).
    @inline(__always)
    final func withToken<R>(_ body: (ManagedObjectContext.Token) throws -> R) rethrows -> R {
        try Unmanaged.passUnretained(binding.token)._withUnsafeGuaranteedRef(body)
    }
    // Objects are confined to their context's queue: the runtime exclusivity checks on these
    // hot fields are turned off.
    /// The values (`slots`), or, while the object is a fault that has none, its place in
    /// `side` (`sideIndex`): one word for the two, as a fault needs no values and an object
    /// with values no place (see `ManagedObject+Side.swift`).
    @exclusivity(unchecked) var payload: Payload
    /// The object's less-used state, in one reference (see `Side`): most objects need only
    /// its kind, so it costs them one word, not the five it took as fields of their own.
    @exclusivity(unchecked) var side: AnyObject?
    // The small fields last, together: no padding between them (the instance is 50 bytes, and
    // a subclass's three `@Managed` properties, two bytes each, end it at 56: a 64-byte malloc
    // chunk).
    @exclusivity(unchecked) var flags: Flags
    @exclusivity(unchecked) var sideKind: Side = .none

    /// Sets the state flags, keeping `.registered` as it is: only registering and deinit
    /// change it, and an object still in its context's registry must leave it when it goes
    /// (it leaves only its own entry: `unregister(_:ifItIs:)`).
    final func resetFlags(_ new: Flags) {
        flags = new.subtracting(.registered).union(flags.intersection(.registered))
    }

    struct Flags: OptionSet {
        let rawValue: UInt8
        static let inserted = Flags(rawValue: 1)
        static let updated = Flags(rawValue: 2)
        static let deleted = Flags(rawValue: 4)
        /// The context was reset, or the object's deletion saved: it is no longer usable.
        static let invalid = Flags(rawValue: 8)
        /// Values not loaded yet.
        static let fault = Flags(rawValue: 16)
        /// Registered in its context's registry (so deinit must unregister it).
        static let registered = Flags(rawValue: 32)
        /// A stand-in that records which key a typed property reads (`KeyProbe`).
        static let probe = Flags(rawValue: 64)
    }

    /// Made by contexts only.
    public required init(_ bootstrap: Bootstrap) {
        binding = bootstrap.binding
        engineKey = bootstrap.key
        payload = .values(bootstrap.slots)
        flags = bootstrap.fault ? [.fault] : []
        if bootstrap.version != 0 { baseVersion = bootstrap.version }
    }

    /// What a context hands a new object (opaque to subclasses).
    public struct Bootstrap {
        // Unretained: a context makes a bootstrap and the object at once, holding the binding
        // meanwhile, so the bootstrap need not retain it (the object does). A fetch of
        // millions of objects saves a retain and a release per object.
        unowned(unsafe) let binding: ObjectBinding
        let key: UInt64
        let slots: [FieldValue]
        let fault: Bool
        /// The store version the slots were read at (0: not read from the store).
        var version: UInt64 = 0
    }

    deinit {
        if flags.contains(.registered) {
            let key = engineKey
            let me = Unmanaged.passUnretained(self).toOpaque()
            _ = token.withContext { $0.unregister(key, ifItIs: me) }
        }
        batch?.forget(self)
    }

    // MARK: State

    /// The entity of the object.
    public var entity: EntityDescription { layout.entity }
    /// The context the object lives in (nil once the context is gone).
    public var managedObjectContext: ManagedObjectContext? { flags.contains(.invalid) ? nil : contextRef }
    /// Whether the object was inserted and not yet saved.
    public var isInserted: Bool { flags.contains(.inserted) }
    /// True when the object has unsaved changes to its values or relationships.
    public var isUpdated: Bool { flags.contains(.updated) }
    /// True once `delete` was called on it (until the context saves, rolls back or undoes).
    public var isDeleted: Bool { flags.contains(.deleted) }
    /// True when its values are not loaded yet (they load on first access).
    public var isFault: Bool { flags.contains(.fault) }
    /// Whether the object has unsaved changes, inserted or deleted included.
    public var hasChanges: Bool { !flags.isDisjoint(with: [.inserted, .updated, .deleted]) }

    public static func == (a: ManagedObject, b: ManagedObject) -> Bool { a === b }
    public func hash(into h: inout Hasher) { h.combine(ObjectIdentifier(self)) }

    public var description: String {
        var parts: [String] = []
        if !flags.contains(.fault) && !flags.contains(.invalid) {
            for (i, a) in layout.entity.attributes.enumerated() where i < slots.count {
                let v = slots[i].value(type: a.type)
                parts.append("\(a.name)=\(v.map { "\($0)" } ?? "nil")")
            }
        }
        return
            "<\(layout.name) \(objectID.serial)\(flags.contains(.fault) ? " fault" : "") \(parts.joined(separator: " "))>"
    }

    // MARK: Access

    func checkUsable(_ key: String? = nil) throws -> ManagedObjectContext {
        guard !flags.contains(.invalid), let context = contextRef else { throw unusable(key) }
        if flags.contains(.fault) { try context.fulfill(self) }
        return context
    }

    /// Runs `body` with the object's context, checked as `checkUsable` does, without retaining
    /// the context (contexts are referenced weakly elsewhere, so each retain and release of
    /// one takes the runtime's slow path: a fifth of a `setValue(_:forKey:)` when it did).
    @inline(__always)
    func withUsableContext<R>(_ key: String?, _ body: (ManagedObjectContext) throws -> R) throws -> R {
        guard !flags.contains(.invalid), token.alive, let owner = token.owner else { throw unusable(key) }
        return try owner._withUnsafeGuaranteedRef { context in
            if flags.contains(.fault) { try context.fulfill(self) }
            return try body(context)
        }
    }

    private func unusable(_ key: String?) -> LogbookError {
        if flags.contains(.probe), let key { KeyProbe.record(key, for: self) }
        return LogbookError(
            .objectInvalidated,
            "the object is no longer usable: its context was reset or deallocated, or its deletion was saved",
            entity: layout.name, key: key, objectID: objectID)
    }

    /// The value of an attribute or relationship: the attribute's Swift value, the related
    /// object of a to-one relationship, a `Set<ManagedObject>` for a to-many relationship.
    public func value(forKey key: String) throws -> Any? {
        if sideKind == .arena, flags == [.fault, .registered] || flags == .fault, token.alive,
            let slot = layout.slot(named: key), slot < layout.attributeCount,
            let value = arenaSlot(slot)
        {
            // An attribute straight from the record the fetch read: the object stays a fault.
            let type = layout.entity.attributes[slot].type
            if case .transformable(let name) = type {
                guard case .data(let blob) = value else { return nil }
                return try AttributeTransformers.registry.reverse(blob, transformer: name)
            }
            return value.value(type: type)
        }
        let context = try checkUsable(key)
        if let slot = layout.slot(named: key) {
            if slot < layout.attributeCount {
                let type = layout.entity.attributes[slot].type
                if case .transformable(let name) = type, case .data(let blob) = slots[slot] {
                    return try AttributeTransformers.registry.reverse(blob, transformer: name)
                }
                return slots[slot].value(type: type)
            }
            guard case .object(let k) = slots[slot] else { return nil }
            return try context.object(forKey: k)
        }
        if let r = layout.relationship(named: key) {
            // An ordered relationship's members come as an array, in order.
            if layout.entity.relationships[r].isOrdered { return try orderedObjects(forKey: key) }
            return Set(try context.relatedObjects(self, relationship: r))
        }
        if let fetched = layout.entity.fetchedProperties.first(where: { $0.name == key }) {
            return try context.evaluate(fetched, source: self)
        }
        throw LogbookError(
            .unknownKey, "\(layout.name) has no property named \(key)", entity: layout.name, key: key,
            objectID: objectID)
    }

    /// Sets an attribute or relationship by key. A value of the wrong type, an unknown key or a
    /// related object of the wrong entity or context is an error, and changes nothing.
    public func setValue(_ value: Any?, forKey key: String) throws {
        try withUsableContext(key) { context in try setValue(value, forKey: key, in: context) }
    }

    private func setValue(_ value: Any?, forKey key: String, in context: ManagedObjectContext) throws {
        try context.undoable {
            if let slot = layout.slot(named: key), slot < layout.attributeCount {
                let new: FieldValue
                do {
                    new = try FieldValue(
                        value, type: layout.entity.attributes[slot].type, transformers: AttributeTransformers.registry)
                } catch let m as FieldValue.Mismatch {
                    throw LogbookError(
                        .typeMismatch, "\(key) is \(m.expected); \(m.got) does not fit",
                        entity: layout.name, key: key, objectID: objectID)
                }
                context.setSlot(self, slot, new)
                return
            }
            if let r = layout.relationship(named: key) {
                if layout.entity.relationships[r].isToMany {
                    let objects: [ManagedObject]
                    switch value {
                    case nil: objects = []
                    case let s as Set<ManagedObject>: objects = Array(s)
                    case let a as [ManagedObject]: objects = a
                    default:
                        guard let seq = value as? any Sequence else {
                            throw LogbookError(
                                .typeMismatch, "\(key) is a to-many relationship; give it a set of objects",
                                entity: layout.name, key: key, objectID: objectID)
                        }
                        var found: [ManagedObject] = []
                        for element in seq {
                            guard let o = element as? ManagedObject else {
                                throw LogbookError(
                                    .typeMismatch, "\(key) holds managed objects, not \(type(of: element))",
                                    entity: layout.name, key: key, objectID: objectID)
                            }
                            found.append(o)
                        }
                        objects = found
                    }
                    if layout.entity.relationships[r].isOrdered {
                        // An array sets the order; a set keeps the current order of the members
                        // that stay and puts new ones last, in key order.
                        var ordered = objects
                        if !(value is [ManagedObject]) {
                            let current = try context.orderedKeys(engineKey, layout, r)
                            let position = Dictionary(uniqueKeysWithValues: current.enumerated().map { ($1, $0) })
                            ordered.sort { a, b in
                                (position[a.engineKey] ?? Int.max, a.engineKey) < (
                                    position[b.engineKey] ?? Int.max, b.engineKey
                                )
                            }
                        }
                        try context.setOrder(self, r, ordered)
                    } else {
                        try context.replaceRelated(self, relationship: r, with: objects)
                    }
                } else {
                    guard value == nil || value is ManagedObject || (value as? any OptionalProtocol)?.isNil == true
                    else {
                        throw LogbookError(
                            .typeMismatch, "\(key) is a to-one relationship; give it a managed object or nil",
                            entity: layout.name, key: key, objectID: objectID)
                    }
                    try context.setToOne(self, relationship: r, to: value as? ManagedObject)
                }
                return
            }
            throw LogbookError(
                .unknownKey, "\(layout.name) has no property named \(key)", entity: layout.name, key: key,
                objectID: objectID)
        }
    }

    /// The value for `key`, by key (reading can fail: an unknown key, an invalidated object).
    public subscript(key: String) -> Any? {
        get throws { try value(forKey: key) }
    }

    /// The objects of a to-many relationship.
    public func objects(forKey key: String) throws -> Set<ManagedObject> {
        let context = try checkUsable(key)
        guard let r = layout.relationship(named: key), layout.entity.relationships[r].isToMany else {
            throw LogbookError(
                .unknownKey, "\(layout.name) has no to-many relationship named \(key)", entity: layout.name, key: key,
                objectID: objectID)
        }
        return Set(try context.relatedObjects(self, relationship: r))
    }

    /// The number of objects in a to-many relationship, counting unsaved changes, without
    /// loading them (what Core Data's `employees.count` answers).
    ///
    /// ```swift
    /// let staff = try manager.count(forKey: "employees")
    /// ```
    ///
    /// A fault stays a fault: the count needs none of its values. (Core Data fires the fault;
    /// here the record is read only when it is gone from the store, to report that as firing
    /// the fault would.)
    public func count(forKey key: String) throws -> Int {
        guard !flags.contains(.invalid), token.alive, let owner = token.owner else { throw unusable(key) }
        return try owner._withUnsafeGuaranteedRef { context in
            guard let r = layout.relationship(named: key), layout.entity.relationships[r].isToMany else {
                throw LogbookError(
                    .unknownKey, "\(layout.name) has no to-many relationship named \(key)", entity: layout.name,
                    key: key, objectID: objectID)
            }
            if flags.contains(.fault) && !context.readSnapshot().contains(engineKey) { try context.fulfill(self) }
            return context.relatedCount(engineKey, layout, r)
        }
    }

    /// Adds one object to a to-many relationship (and sets the inverse).
    public func add(_ object: ManagedObject, toRelationship key: String) throws {
        try add([object], toRelationship: key)
    }

    /// Adds objects to a to-many relationship (and sets the inverses).
    public func add(_ objects: some Sequence<ManagedObject>, toRelationship key: String) throws {
        let list = Array(objects)
        try withUsableContext(key) { context in
            let r = try toManyIndex(key)
            try context.undoable { try context.addRelated(self, relationship: r, list) }
        }
    }

    /// Removes one object from a to-many relationship (and clears the inverse).
    public func remove(_ object: ManagedObject, fromRelationship key: String) throws {
        try remove([object], fromRelationship: key)
    }

    /// Removes objects from a to-many relationship (and clears the inverses).
    public func remove(_ objects: some Sequence<ManagedObject>, fromRelationship key: String) throws {
        let context = try checkUsable(key)
        let r = try toManyIndex(key)
        try context.undoable { try context.removeRelated(self, relationship: r, Array(objects)) }
    }

    func toManyIndex(_ key: String) throws -> Int {
        guard let r = layout.relationship(named: key), layout.entity.relationships[r].isToMany else {
            throw LogbookError(
                .unknownKey, "\(layout.name) has no to-many relationship named \(key)", entity: layout.name, key: key,
                objectID: objectID)
        }
        return r
    }

    /// The attributes and to-one relationships changed since the last save, with their new
    /// values (nil for none).
    public func changedValues() -> [String: Any?] {
        guard !flags.contains(.fault), !flags.contains(.invalid) else { return [:] }
        var result: [String: Any?] = [:]
        for (i, slot) in slots.enumerated() {
            let before = committed?[i] ?? (flags.contains(.inserted) ? .null : slot)
            if before != slot || (flags.contains(.inserted) && !slot.isNull) {
                result[name(ofSlot: i)] = displayValue(slot, i)
            }
        }
        return result
    }

    /// The values as last saved, for the given keys (all if nil).
    public func committedValues(forKeys keys: [String]? = nil) -> [String: Any?] {
        guard !flags.contains(.inserted) else { return [:] }
        let base = committed ?? slots
        var result: [String: Any?] = [:]
        for (i, slot) in base.enumerated() {
            let n = name(ofSlot: i)
            if keys == nil || keys!.contains(n) { result[n] = displayValue(slot, i) }
        }
        return result
    }

    func name(ofSlot i: Int) -> String {
        i < layout.attributeCount
            ? layout.entity.attributes[i].name
            : layout.entity.relationships[layout.toOne[i - layout.attributeCount]].name
    }

    func displayValue(_ slot: FieldValue, _ i: Int) -> Any? {
        if i < layout.attributeCount { return slot.value(type: layout.entity.attributes[i].type) }
        if case .object(let k) = slot { return ObjectID(store: objectID.store, key: k) }
        return nil
    }

    // MARK: Typed access (property wrappers)

    /// The stored value of an attribute for a typed property (nil when unusable or unknown).
    @usableFromInline
    package func typedRead(_ key: String) -> (FieldValue, AttributeType)? {
        typedRead(slot: layout.slot(named: key)) { key }
    }

    /// The stored value of the attribute a `@Managed` property names.
    @usableFromInline
    func typedRead(_ name: PropertyName) -> (FieldValue, AttributeType)? {
        typedRead(slot: layout.slot(named: name)) { name.string }
    }

    @inline(__always)
    private func typedRead(slot: Int?, key: () -> String) -> (FieldValue, AttributeType)? {
        guard let slot, slot < layout.attributeCount else {
            if flags.contains(.fault) || flags.contains(.invalid) { _ = try? checkUsable(key()) }
            return nil
        }
        if sideKind == .arena, flags == [.fault, .registered] || flags == .fault, token.alive,
            let value = arenaSlot(slot)
        {
            // A value straight from the record's bytes: the object stays a fault. (When the
            // bytes cannot give it, the object is fulfilled below, as `value(forKey:)` does.)
            return (value, layout.entity.attributes[slot].type)
        }
        if flags.contains(.fault) || flags.contains(.invalid) {
            guard (try? checkUsable(key())) != nil else { return nil }
        }
        return (slots[slot], layout.entity.attributes[slot].type)
    }

    /// Sets an attribute from a typed property; errors wait for the next save.
    @usableFromInline
    package func typedWrite(_ key: String, _ convert: (AttributeType) -> FieldValue?) {
        guard !flags.contains(.invalid) else { return }
        withToken { token in
            _ = token.withContext { context in
                withLayout { layout in typedWrite(layout.slot(named: key), { key }, convert, context) }
            }
        }
    }

    /// Sets the attribute a `@Managed` property names; errors wait for the next save.
    @usableFromInline
    func typedWrite(_ name: PropertyName, _ convert: (AttributeType) -> FieldValue?) {
        guard !flags.contains(.invalid) else { return }
        withToken { token in
            _ = token.withContext { context in
                withLayout { layout in typedWrite(layout.slot(named: name), { name.string }, convert, context) }
            }
        }
    }

    @inline(__always)
    private func typedWrite(
        _ slot: Int?, _ key: () -> String, _ convert: (AttributeType) -> FieldValue?, _ context: ManagedObjectContext
    ) {
        guard let slot, slot < layout.attributeCount else {
            let key = key()
            context.recordError(
                LogbookError(
                    .unknownKey, "\(layout.name) has no attribute named \(key)", entity: layout.name, key: key,
                    objectID: objectID))
            return
        }
        let type = layout.entity.attributes[slot].type
        guard let value = convert(type) else {
            let key = key()
            context.recordError(
                LogbookError(
                    .typeMismatch, "\(key) is \(type); the property's value does not fit", entity: layout.name,
                    key: key, objectID: objectID))
            return
        }
        if flags.contains(.fault) {
            do { try context.fulfill(self) } catch let e as LogbookError {
                context.recordError(e)
                return
            } catch { return }
        }
        if context.undoHistory == nil {
            context.setSlot(self, slot, value)
        } else {
            _ = try? context.undoable { context.setSlot(self, slot, value) }
        }
    }
}
