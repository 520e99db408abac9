/// When the store compacts itself.
public enum CompactionPolicy: Sendable, Equatable {
    /// Only when `Store.compact()` is called.
    case manual
    /// In the background after a commit, when dead bytes exceed `deadRatio` of all operation
    /// bytes and the store holds at least `minimumBytes`.
    case automatic(deadRatio: Double, minimumBytes: Int)

    /// Compact in the background when half the operation bytes are dead and the store holds at least 32 MiB.
    public static let `default` = CompactionPolicy.automatic(deadRatio: 0.5, minimumBytes: 32 << 20)
}
