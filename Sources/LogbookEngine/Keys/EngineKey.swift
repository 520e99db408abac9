/// A key of the engine: a 16-bit keyspace and a 48-bit id packed into 64 bits.
///
/// The engine counts keys per keyspace and lists a keyspace's keys in id order; the object
/// layer gives each entity a keyspace and each object a serial number as its id. Keys order
/// by keyspace, then id — which is the order of `rawValue`.
///
/// ```swift
/// let key = EngineKey(keyspace: 1, id: 42)
/// var transaction = Transaction()
/// transaction.put(key, value: Array("hello".utf8))
/// key.keyspace   // 1
/// key.id         // 42
/// ```
///
/// This file is the one place that knows how the two parts are packed
/// (`JournalFormat.keyspaceShift`); everything else asks it.
@frozen
public struct EngineKey: RawRepresentable, Hashable, Comparable, Sendable, CustomStringConvertible {
    /// The packed key: keyspace in the high 16 bits, id in the low 48.
    public var rawValue: UInt64

    /// Bits of the id.
    @inlinable public static var idBits: Int { JournalFormat.keyspaceShift }
    /// The largest id a key can hold (2^48 − 1).
    @inlinable public static var maxID: UInt64 { (1 << UInt64(idBits)) - 1 }

    /// A key from its packed form (every 64-bit value is a valid key).
    @inlinable
    public init(rawValue: UInt64) { self.rawValue = rawValue }

    /// The key `id` in `keyspace`. `id` must not exceed `EngineKey.maxID`.
    @inlinable
    public init(keyspace: UInt16, id: UInt64) {
        precondition(id <= Self.maxID, "an engine key's id has 48 bits")
        rawValue = UInt64(keyspace) << UInt64(Self.idBits) | id
    }

    /// The keyspace (high 16 bits).
    @inlinable
    public var keyspace: UInt16 { UInt16(truncatingIfNeeded: rawValue >> UInt64(Self.idBits)) }

    /// The id inside the keyspace (low 48 bits).
    @inlinable
    public var id: UInt64 { rawValue & Self.maxID }

    /// The same id in another keyspace (for example, a to-many set keyed like its owner).
    @inlinable
    public func inKeyspace(_ keyspace: UInt16) -> EngineKey { EngineKey(keyspace: keyspace, id: id) }

    /// The first key of a keyspace (id 0).
    @inlinable
    public static func first(inKeyspace keyspace: UInt16) -> EngineKey { EngineKey(keyspace: keyspace, id: 0) }

    @inlinable
    public static func < (a: EngineKey, b: EngineKey) -> Bool { a.rawValue < b.rawValue }

    /// `keyspace:id`, for example `1:42`.
    public var description: String { "\(keyspace):\(id)" }
}
