import Foundation

/// A property of a dictionary result (Core Data's `propertiesToFetch`): an attribute's value,
/// or an expression over the objects of a group (count, sum, average, minimum, maximum).
///
/// ```swift
/// var request = FetchRequest<Person>()
/// request.propertiesToFetch = [.attribute("lastName"), .count(as: "people"), .average("age", as: "meanAge")]
/// request.propertiesToGroupBy = ["lastName"]
/// let rows = try context.fetchDictionaries(request)   // [["lastName": "Smith", "people": 3, "meanAge": 41.0], …]
/// ```
public struct FetchProperty: Sendable, Hashable {
    /// An aggregate over the values of a key (Core Data's expression functions).
    public enum Function: String, Sendable {
        /// The number of values (of objects, without a key).
        case count
        /// The sum of numeric values.
        case sum
        /// The mean of numeric values.
        case average
        /// The smallest value.
        case min
        /// The largest value.
        case max
    }
    /// The key in each result dictionary.
    public var name: String
    /// The attribute or to-one relationship read (nil for a count of objects).
    public var key: String?
    /// The expression, nil for the attribute's own value.
    public var function: Function?

    /// The value of an attribute (a to-one relationship gives the related object's `ObjectID`).
    public static func attribute(_ key: String) -> FetchProperty { FetchProperty(name: key, key: key, function: nil) }
    /// The number of objects (with `key`: of objects whose `key` has a value).
    public static func count(_ key: String? = nil, as name: String) -> FetchProperty {
        FetchProperty(name: name, key: key, function: .count)
    }
    /// The sum of a numeric attribute (an integer for integer attributes, else a Double).
    public static func sum(_ key: String, as name: String) -> FetchProperty {
        FetchProperty(name: name, key: key, function: .sum)
    }
    /// The mean of a numeric attribute, as a Double (absent when no object has a value).
    public static func average(_ key: String, as name: String) -> FetchProperty {
        FetchProperty(name: name, key: key, function: .average)
    }
    /// The smallest value of an attribute (numbers, strings, dates).
    public static func min(_ key: String, as name: String) -> FetchProperty {
        FetchProperty(name: name, key: key, function: .min)
    }
    /// The largest value of an attribute.
    public static func max(_ key: String, as name: String) -> FetchProperty {
        FetchProperty(name: name, key: key, function: .max)
    }
}
