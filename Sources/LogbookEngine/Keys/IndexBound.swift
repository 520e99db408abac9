/// One end of an index range: a key, and whether entries equal to it are in the range.
public struct IndexBound: Sendable, Hashable {
    public var key: [UInt8]
    public var inclusive: Bool

    public init(_ key: [UInt8], inclusive: Bool) {
        self.key = key
        self.inclusive = inclusive
    }
}
