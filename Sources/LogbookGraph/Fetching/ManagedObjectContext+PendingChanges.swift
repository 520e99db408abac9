import Foundation

extension ManagedObjectContext {
    /// Tells the context's observers (fetched-results controllers among them) about the
    /// unsaved changes made since the last save, as Core Data does at the end of each run-loop
    /// turn. Saves and merges tell them on their own.
    public func processPendingChanges() {
        let changes = ContextChanges(
            inserted: Set(inserted.values.map(\.objectID)), updated: Set(updated.values.map(\.objectID)),
            deleted: Set(deleted.values.map(\.objectID)), version: container.store.version)
        for observer in changeObservers { observer(changes) }
    }
}
