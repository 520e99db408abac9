import Foundation
import Logbook
import Testing

/// SwiftData's save notifications, observed the ways apps observe them.
@Suite struct NotificationTests {
    @Test func aSavePostsWillSaveAndDidSaveWithTheIdentifiers() throws {
        let container = try ModelContainer(
            for: Author.self, configurations: ModelConfiguration(isStoredInMemoryOnly: true))
        let context = ModelContext(container)
        let other = ModelContext(container)
        let ada = Author(name: "Ada")
        let grace = Author(name: "Grace")
        context.insert(ada)
        context.insert(grace)
        try context.save()

        final class Seen: @unchecked Sendable {
            var names: [Notification.Name] = []
            var userInfo: [AnyHashable: Any] = [:]
        }
        let seen = Seen()
        let center = NotificationCenter.default
        let tokens = [ModelContext.willSave, ModelContext.didSave].map { name in
            center.addObserver(forName: name, object: context, queue: nil) { note in
                seen.names.append(note.name)
                if let info = note.userInfo { seen.userInfo = info }
            }
        }
        defer { for t in tokens { center.removeObserver(t) } }

        ada.name = "Ada Lovelace"
        context.delete(grace)
        let alan = Author(name: "Alan")
        context.insert(alan)
        other.insert(Author(name: "Not this context's"))
        try other.save()
        try context.save()

        #expect(seen.names == [ModelContext.willSave, ModelContext.didSave])
        func ids(_ key: ModelContext.NotificationKey) -> [PersistentIdentifier] {
            seen.userInfo[key.rawValue] as? [PersistentIdentifier] ?? []
        }
        #expect(ids(.insertedIdentifiers) == [alan.persistentModelID])
        #expect(ids(.updatedIdentifiers) == [ada.persistentModelID])
        #expect(ids(.deletedIdentifiers) == [grace.persistentModelID])
    }

    @Test func didSaveArrivesAsAnAsynchronousSequence() async throws {
        let container = try ModelContainer(
            for: Author.self, configurations: ModelConfiguration(isStoredInMemoryOnly: true))
        let context = ModelContext(container)
        let notes = NotificationCenter.default.notifications(named: ModelContext.didSave, object: context)
        let saved = Task {
            var counts: [Int] = []
            for await note in notes {
                let key = ModelContext.NotificationKey.insertedIdentifiers.rawValue
                counts.append((note.userInfo?[key] as? [PersistentIdentifier])?.count ?? -1)
                if counts.count == 2 { break }
            }
            return counts
        }
        context.insert(Author(name: "A"))
        try context.save()
        context.insert(Author(name: "B"))
        context.insert(Author(name: "C"))
        try context.save()
        #expect(await saved.value == [1, 2])
    }
}
