import Foundation
import Logbook
import Testing

@Model final class Trip {
    @Attribute(.preserveValueOnDeletion) var name: String
    var destination: String
    var startDate: Date
    init(name: String, destination: String, startDate: Date) {
        self.name = name
        self.destination = destination
        self.startDate = startDate
    }
}

/// SwiftData's history, the way WWDC24's sample app reads it: a widget's changes since the
/// token the app kept, then purged.
@Suite struct HistoryTests {
    @Test func anAppReadsAnotherAuthorsChangesSinceItsTokenAndPurges() throws {
        try withStoreURL { url in
            let container = try ModelContainer(for: Trip.self, configurations: ModelConfiguration(url: url))
            let app = ModelContext(container)
            app.author = "app"
            let paris = Trip(name: "Paris", destination: "FR", startDate: Date(timeIntervalSinceReferenceDate: 1000))
            let rome = Trip(name: "Rome", destination: "IT", startDate: Date(timeIntervalSinceReferenceDate: 2000))
            app.insert(paris)
            app.insert(rome)
            try app.save()
            // The app keeps its token (as JSON, in its settings).
            let saved = try #require(try app.fetchHistory(HistoryDescriptor<DefaultHistoryTransaction>()).last).token
            let kept = try JSONEncoder().encode(saved)

            let widget = ModelContext(container)
            widget.author = "widget"
            let lisbon = Trip(name: "Lisbon", destination: "PT", startDate: .now)
            widget.insert(lisbon)
            let widgetsRome = try #require(
                try widget.fetch(FetchDescriptor<Trip>(predicate: #Predicate { $0.name == "Rome" })).first)
            widgetsRome.destination = "Italia"
            let widgetsParis = try #require(
                try widget.fetch(FetchDescriptor<Trip>(predicate: #Predicate { $0.name == "Paris" })).first)
            widget.delete(widgetsParis)
            try widget.save()

            let token = try JSONDecoder().decode(DefaultHistoryToken.self, from: kept)
            var descriptor = HistoryDescriptor<DefaultHistoryTransaction>()
            descriptor.predicate = #Predicate { $0.token > token && $0.author != "app" }
            let transactions = try app.fetchHistory(descriptor)
            #expect(transactions.count == 1)
            let transaction = try #require(transactions.first)
            #expect(transaction.author == "widget")
            var inserted: [PersistentIdentifier] = []
            var updated: [[PartialKeyPath<Trip>]] = []
            var deletedNames: [String?] = []
            for change in transaction.changes {
                switch change {
                case .insert(let insert):
                    if let trip = insert as? DefaultHistoryInsert<Trip> {
                        inserted.append(trip.changedPersistentIdentifier)
                    }
                case .update(let update):
                    if let trip = update as? DefaultHistoryUpdate<Trip> { updated.append(trip.updatedAttributes) }
                case .delete(let deletion):
                    if let trip = deletion as? DefaultHistoryDelete<Trip> {
                        deletedNames.append(trip.tombstone[\.name])
                        #expect(trip.tombstone[\.destination] == nil)  // not preserved
                    }
                }
            }
            #expect(inserted == [lisbon.persistentModelID])
            #expect(updated.count == 1 && updated[0].contains(\Trip.destination) && !updated[0].contains(\Trip.name))
            #expect(deletedNames == ["Paris"])

            // Purged up to the widget's transaction: the kept token has expired.
            let last = transaction.token
            try app.deleteHistory(
                HistoryDescriptor<DefaultHistoryTransaction>(predicate: #Predicate { $0.token < last }))
            #expect(try app.fetchHistory(HistoryDescriptor<DefaultHistoryTransaction>()).map(\.token) == [last])
            #expect(throws: SwiftDataError.historyTokenExpired) { try app.fetchHistory(descriptor) }
            // From the newest token on, reading works again.
            descriptor.predicate = #Predicate { $0.token > last }
            #expect(try app.fetchHistory(descriptor).isEmpty)
            try container.persistentContainer.close()
        }
    }
}
