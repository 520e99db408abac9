/// When a commit is durable.
public enum Durability: String, Sendable, CaseIterable {
    /// `fdatasync` before `commit` returns. The default.
    case full
    /// Group commit: a commit still waits for a sync, but concurrent commits share one.
    case normal
    /// No sync: a commit survives a crash of the process, not a power loss.
    case none
}
