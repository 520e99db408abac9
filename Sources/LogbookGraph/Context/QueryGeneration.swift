import LogbookEngine

/// A version of the store a context can be pinned to, so that its fetches and faults read one
/// consistent state while other contexts save (Core Data's `NSQueryGenerationToken`).
///
/// ```swift
/// try context.setQueryGeneration(.current)     // pinned: reads this version from now on
/// …                                            // other contexts save; this one sees none of it
/// try context.setQueryGeneration(.unpinned)    // reads the latest version again
/// ```
///
/// As in Core Data, a pinned context moves to the latest version when it saves, merges another
/// context's save, is reset, or refreshes all its objects. Pinning costs nothing while nothing
/// is written; while pinned, the store keeps the journal segments the version reads from.
public struct QueryGenerationToken: Sendable {
    enum Kind { case current, unpinned, pinned }
    let kind: Kind
    let snapshot: Snapshot?

    /// The latest version, at the moment the token is used.
    public static let current = QueryGenerationToken(kind: .current, snapshot: nil)
    /// No pinning: every read sees the latest version.
    public static let unpinned = QueryGenerationToken(kind: .unpinned, snapshot: nil)

    /// The store version a pinned token reads (nil for `.current` and `.unpinned`).
    public var version: UInt64? { snapshot?.version }
}
