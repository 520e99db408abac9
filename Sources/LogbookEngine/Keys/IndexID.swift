/// The number of a secondary index. The engine keeps one ordered index per number; the
/// object layer numbers one per indexed attribute (`logbook stats` names them from the store's
/// recorded schema).
///
/// ```swift
/// let byDate: IndexID = 1
/// transaction.put(key, value: bytes, indexKey: IndexKey(index: byDate, orderedDouble: 1_700_000_000))
/// snapshot.indexCount(index: byDate)
/// ```
@frozen
public struct IndexID: RawRepresentable, Hashable, Comparable, Sendable, ExpressibleByIntegerLiteral,
    CustomStringConvertible
{
    /// The number as stored in the journal (an unsigned varint).
    public var rawValue: UInt32

    /// The index numbered `rawValue`.
    @inlinable
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    @inlinable
    public init(integerLiteral value: UInt32) { rawValue = value }

    @inlinable
    public static func < (a: IndexID, b: IndexID) -> Bool { a.rawValue < b.rawValue }

    public var description: String { "index \(rawValue)" }
}
