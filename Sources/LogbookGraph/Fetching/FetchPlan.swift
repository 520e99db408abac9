import Foundation
import LogbookEngine

/// How a fetch reads the store: `explain` shows it.
public struct FetchPlan: Sendable, CustomStringConvertible {
    /// How the candidates are found.
    public enum Access: Sendable, Equatable {
        /// Every object of the entity, in key order.
        case scan
        /// The entries of an attribute's (or a to-one relationship's) index between two bounds,
        /// in index order.
        case indexRange(attribute: String, lower: String?, upper: String?, reverse: Bool)
        /// The entries of an index equal to each of several values (`IN`, or a condition on a
        /// to-one relationship's destination), in key order.
        case indexPoints(attribute: String, values: Int)
        /// A compound index: equal values for its first `equalities` keys, and a range on the
        /// next one when `range` is true.
        case compoundIndex(keys: [String], equalities: Int, range: Bool)
    }
    /// The entity the plan is for.
    public var entity: String
    /// How its candidates are found: a scan of the entity or a range of an index.
    public var access: Access
    /// Conditions checked on each object read (those the index does not settle).
    public var filter: String?
    /// True when the order comes from the index (no sort after reading).
    public var orderFromIndex: Bool
    /// True when the limit stops the index walk early.
    public var limitPushedDown: Bool
    /// True when a count is answered from the index without reading objects.
    public var countFromIndex: Bool
    /// Why the access was chosen: the number of entries each candidate would read.
    public var reason: String?
    /// True when some of the filter is checked on each record's bytes, before any object is made.
    public var filtersRecords = false
    /// True when some of the filter needs objects (key paths through relationships, aggregates,
    /// subqueries, functions): it is checked on the objects made for the records that pass the rest.
    public var filterOnObjects = false

    public var description: String {
        var s = "FETCH \(entity): "
        switch access {
        case .scan: s += "SCAN all objects"
        case .indexRange(let attribute, let lower, let upper, let reverse):
            s += "INDEX \(attribute) range \(lower ?? "-∞") … \(upper ?? "+∞")\(reverse ? " descending" : "")"
        case .indexPoints(let attribute, let values):
            s += "INDEX \(attribute) at \(values) value\(values == 1 ? "" : "s")"
        case .compoundIndex(let keys, let equalities, let range):
            s += "INDEX (\(keys.joined(separator: ", "))): equal \(keys.prefix(equalities).joined(separator: ", "))"
            if range { s += ", range on \(keys[equalities])" }
        }
        if let why = reason { s += " [\(why)]" }
        if let filter {
            s += "; FILTER \(filter)"
            s +=
                filterOnObjects
                ? (filtersRecords ? " (on records, the rest on objects)" : " (on objects)") : " (on records)"
        }
        if orderFromIndex {
            switch access {
            case .scan, .indexPoints: s += "; ORDER by key"
            default: s += "; ORDER from index"
            }
        } else {
            s += "; ORDER by sorting"
        }
        if limitPushedDown { s += "; LIMIT stops the walk" }
        if countFromIndex { s += "; COUNT from index" }
        return s
    }
}
