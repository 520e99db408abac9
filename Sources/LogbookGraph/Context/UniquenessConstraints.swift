import Foundation
import LogbookEngine

/// An object a save could not write because another object has the values of one of its
/// entity's uniqueness constraints (Core Data's `NSConstraintConflict`).
public struct ConstraintConflict: Sendable, CustomStringConvertible {
    /// The object being saved.
    public var objectID: ObjectID
    /// Its entity.
    public var entityName: String
    /// The constraint's attributes (and to-one relationships).
    public var keys: [String]
    /// The values the objects share, by key.
    public var values: [String: any Sendable]
    /// The other objects with these values: stored ones, or others of the same save.
    public var conflictingObjectIDs: [ObjectID]
    /// Whether the others are in the same save (not yet stored).
    public var isWithinSave: Bool

    public var description: String {
        "\(objectID): \(keys.joined(separator: "+")) = \(keys.map { "\(values[$0] ?? "nil")" }.joined(separator: ", ")) "
            + "is already used by \(conflictingObjectIDs.map(\.description).joined(separator: ", "))"
            + (isWithinSave ? " (in the same save)" : "")
    }
}
