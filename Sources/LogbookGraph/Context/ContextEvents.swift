import Foundation
import LogbookEngine

/// What a context tells its observers (Core Data's context notifications).
public enum ContextEvent: Sendable {
    /// A save is about to write (`NSManagedObjectContextWillSave`).
    case willSave
    /// A save wrote these changes (`NSManagedObjectContextDidSave`).
    case didSave(ContextChanges)
    /// Objects of the context changed outside its own editing: another context's save was
    /// merged, objects were refreshed, the context was reset or rolled back
    /// (`NSManagedObjectContextObjectsDidChange`).
    case objectsDidChange(ContextChanges)
}

/// Ends an observation when cancelled (or released).
public final class ContextObservation: Sendable {
    private let end: @Sendable () -> Void
    init(_ end: @escaping @Sendable () -> Void) { self.end = end }
    /// Stops the observation.
    public func cancel() { end() }
    deinit { end() }
}
