// Models in the style of Apple's SwiftData samples (non-final classes, a required to-many
// relationship set in the initializer, optional to-one inverses, previews as statics),
// written against SwiftData's API; only the import differs.
import Foundation
import Logbook
import Observation
import Testing

@Model class Journey {
    var destination: String
    var name: String
    var startDate: Date
    var endDate: Date

    @Relationship(deleteRule: .cascade, inverse: \Stop.journey)
    var stops: [Stop]

    @Relationship(deleteRule: .cascade, inverse: \Lodging.journey)
    var lodging: Lodging?

    init(name: String, destination: String, startDate: Date = .now, endDate: Date = .distantFuture) {
        self.name = name
        self.destination = destination
        self.startDate = startDate
        self.endDate = endDate
        self.stops = []
    }

    var displayName: String { name.isEmpty ? "Untitled" : name }
}

@Model class Stop {
    var title: String
    var details: String
    var isBooked: Bool
    var journey: Journey?

    init(title: String, details: String, isBooked: Bool) {
        self.title = title
        self.details = details
        self.isBooked = isBooked
    }
}

@Model class Lodging {
    var address: String
    var placeName: String
    var isConfirmed: Bool = false
    var journey: Journey?

    init(address: String, placeName: String) {
        self.address = address
        self.placeName = placeName
    }
}

extension Journey {
    static var preview: Journey {
        Journey(
            name: "Yosemite", destination: "California", startDate: .now, endDate: .now.addingTimeInterval(4 * 3600))
    }
}

@Suite struct TripsTests {
    @Test func aSampleAppsModelsAndDataCodeRun() throws {
        let schema = Schema([Journey.self, Stop.self, Lodging.self])
        let configuration = ModelConfiguration(schema: schema, isStoredInMemoryOnly: true)
        let container = try ModelContainer(for: schema, configurations: [configuration])
        let context = ModelContext(container)

        let journey = Journey.preview
        context.insert(journey)
        journey.stops.append(Stop(title: "Half Dome", details: "climb", isBooked: true))
        journey.stops.append(Stop(title: "Falls", details: "photos", isBooked: false))
        journey.lodging = Lodging(address: "Yosemite National Park, CA", placeName: "Valley Lodge")
        try context.save()

        let upcoming = FetchDescriptor<Journey>(
            predicate: #Predicate { $0.destination == "California" && $0.endDate > $0.startDate },
            sortBy: [SortDescriptor(\.startDate, order: .reverse)])
        let found = try context.fetch(upcoming)
        #expect(found.map(\.displayName) == ["Yosemite"])
        #expect(found.first?.lodging?.placeName == "Valley Lodge")
        #expect(Set(found.first?.stops.map(\.title) ?? []) == ["Half Dome", "Falls"])

        let booked = try context.fetch(FetchDescriptor<Stop>(predicate: #Predicate { $0.isBooked }))
        #expect(booked.map(\.title) == ["Half Dome"])
        #expect(booked.first?.journey === journey)

        // The cascade of both relationships.
        context.delete(journey)
        try context.save()
        #expect(try context.fetchCount(FetchDescriptor<Stop>()) == 0)
        #expect(try context.fetchCount(FetchDescriptor<Lodging>()) == 0)
    }
}
