import Foundation
import LogbookEngine

/// How to order fetched objects: by an attribute (or to-one relationship), ascending or not,
/// strings compared as `comparison` says.
///
/// ```swift
/// FetchSortDescriptor(key: "lastName", comparison: .caseInsensitive)
/// FetchSortDescriptor(key: "age", ascending: false)
/// ```
public struct FetchSortDescriptor: Sendable, Hashable {
    public var key: String
    public var ascending: Bool
    /// How strings compare (other types ignore it).
    public var comparison: StringComparison

    public init(key: String, ascending: Bool = true, comparison: StringComparison = .plain) {
        self.key = key
        self.ascending = ascending
        self.comparison = comparison
    }
}
