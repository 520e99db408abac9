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
    /// The attribute (or to-one relationship) to order by.
    public var key: String
    /// Smallest first when true.
    public var ascending: Bool
    /// How strings compare (other types ignore it).
    public var comparison: StringComparison

    /// A sort by `key`, ascending unless told, strings compared as `comparison` says.
    public init(key: String, ascending: Bool = true, comparison: StringComparison = .plain) {
        self.key = key
        self.ascending = ascending
        self.comparison = comparison
    }
}
