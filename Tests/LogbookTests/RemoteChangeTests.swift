import Foundation
import LogbookEngine
import LogbookTestSupport
import Testing

@testable import LogbookGraph

/// A read-only container that observes remote changes follows the store's writer: it posts the
/// remote-change notification with the token, and its contexts that merge automatically (and a
/// fetched-results controller over one) take the new commits as another context's save.
@Suite struct RemoteChangeTests {
    func follower(_ store: TemporaryStore) throws -> PersistentContainer {
        var options = ContainerOptions()
        options.readOnly = true
        options.observesRemoteChanges = true
        return try PersistentContainer(
            name: "Notes", model: HistoryTests.model(), directory: store.path, options: options)
    }

    @Test(arguments: [true, false]) func aFollowerMergesTheWritersCommits(tracking: Bool) async throws {
        let store = TemporaryStore()
        let writer = try HistoryTests().open(store, tracking: tracking)
        let w = writer.newContext(concurrencyType: .confinement)
        let first = try HistoryTests().note(w, "first")
        try w.save()

        let follower = try follower(store)
        let reader = follower.newContext(concurrencyType: .privateQueue)
        reader.automaticallyMergesChangesFromOtherContexts = true
        let held = try reader.performAndWait { try reader.existingObject(with: first.objectID) }
        #expect(reader.performAndWait { try? held.value(forKey: "title") as? String } == "first")
        final class Box: @unchecked Sendable { var titles: [String] = [] }
        let box = Box()
        let controller = reader.performAndWait {
            var request = FetchRequest<ManagedObject>(entityName: "Note")
            request.sortDescriptors = [FetchSortDescriptor(key: "title")]
            let c = FetchedResultsController(fetchRequest: request, managedObjectContext: reader)
            try? c.performFetch()
            return c
        }

        let changes = follower.remoteChangeNotifications()
        let heard = Task { () -> PersistentHistoryToken? in
            for await change in changes {
                if change.historyToken.version >= writer.currentHistoryToken.version { return change.historyToken }
            }
            return nil
        }
        try first.setValue("renamed", forKey: "title")
        _ = try HistoryTests().note(w, "second")
        try w.save()
        let watchdog = Task {
            try await Task.sleep(for: .seconds(20))
            heard.cancel()
        }
        let token = await heard.value
        watchdog.cancel()
        #expect(token == writer.currentHistoryToken)
        reader.performAndWait {}
        // The held object took the writer's value; the controller's fetch follows.
        #expect(reader.performAndWait { try? held.value(forKey: "title") as? String } == "renamed")
        reader.performAndWait {
            box.titles = (controller.fetchedObjects ?? []).compactMap { try? $0.value(forKey: "title") as? String }
        }
        #expect(box.titles == ["renamed", "second"])
        try follower.close()
        try writer.close()
    }
}
