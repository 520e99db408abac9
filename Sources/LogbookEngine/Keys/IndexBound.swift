/// One end of an index range: a key, and whether entries equal to it are in the range.
public struct IndexBound: Sendable, Hashable {
    /// The bound's key bytes (compared as unsigned bytes).
    public var key: [UInt8]
    /// Whether entries equal to `key` are inside the range.
    public var inclusive: Bool

    /// A bound at `key`.
    public init(_ key: [UInt8], inclusive: Bool) {
        self.key = key
        self.inclusive = inclusive
    }
}
