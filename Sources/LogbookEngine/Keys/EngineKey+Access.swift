// The key-typed face of `Transaction` and `Snapshot`. The raw `UInt64` methods stay for loops
// that keep keys packed (the object layer's registries do); these forward to them at no cost.

extension Transaction {
    /// Writes `value` under `key`, with the given secondary index entries.
    ///
    /// ```swift
    /// transaction.put(EngineKey(keyspace: 1, id: 42), value: Array("hello".utf8))
    /// ```
    @inlinable
    public mutating func put(_ key: EngineKey, value: [UInt8], indexKeys: [IndexKey] = []) {
        put(key.rawValue, value: value, indexKeys: indexKeys)
    }

    /// Writes `value` under `key` with one secondary index entry.
    @inlinable
    public mutating func put(_ key: EngineKey, value: [UInt8], indexKey: IndexKey) {
        put(key.rawValue, value: value, indexKey: indexKey)
    }

    /// Removes `key` and its index entries. Removing a missing key does nothing.
    @inlinable
    public mutating func delete(_ key: EngineKey) { delete(key.rawValue) }

    /// Adds members to the membership set `set`.
    @inlinable
    public mutating func addMembers(_ members: some Sequence<EngineKey>, toSet set: EngineKey) {
        addMembers(members.lazy.map(\.rawValue), toSet: set.rawValue)
    }

    /// Removes members from the membership set `set`.
    @inlinable
    public mutating func removeMembers(_ members: some Sequence<EngineKey>, fromSet set: EngineKey) {
        removeMembers(members.lazy.map(\.rawValue), fromSet: set.rawValue)
    }

    /// Makes `members` the whole of the set `set` (an empty sequence removes the set).
    @inlinable
    public mutating func replaceMembers(_ members: some Sequence<EngineKey>, ofSet set: EngineKey) {
        replaceMembers(members.lazy.map(\.rawValue), ofSet: set.rawValue)
    }
}

extension Snapshot {
    /// The value of `key` at this snapshot's version, or nil.
    @inlinable
    public func value(forKey key: EngineKey) throws -> [UInt8]? { try value(forKey: key.rawValue) }

    /// Whether `key` has a value at this snapshot's version.
    @inlinable
    public func contains(_ key: EngineKey) -> Bool { contains(key.rawValue) }

    /// The members of the set `set`, in ascending order.
    @inlinable
    public func members(ofSet set: EngineKey) -> [EngineKey] {
        members(ofSet: set.rawValue).map(EngineKey.init(rawValue:))
    }

    /// How many members the set `set` has (no members are read).
    @inlinable
    public func memberCount(ofSet set: EngineKey) -> Int { memberCount(ofSet: set.rawValue) }
}
