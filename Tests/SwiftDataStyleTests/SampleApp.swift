// A sample app of the suite's own, "Birdwatch", written as a SwiftData app is written for
// Apple platforms — it imports SwiftData alone — with its models in versioned schemas, a
// migration plan with a custom stage, a sample-data generator, a model actor that imports in
// the background, the fetches behind its views, and a history consumer (a widget's changes).
import SwiftData
import Testing

enum BirdwatchSchemaV1: VersionedSchema {
    static let versionIdentifier = Schema.Version(1, 0, 0)
    static var models: [any PersistentModel.Type] { [Sighting.self, Species.self] }

    @Model final class Species {
        @Attribute(.unique) var name: String
        var sightings: [Sighting] = []
        init(name: String) { self.name = name }
    }

    @Model final class Sighting {
        var note: String
        var date: Date
        var count: Int
        @Relationship(inverse: \Species.sightings) var species: Species?
        init(note: String, date: Date, count: Int) {
            self.note = note
            self.date = date
            self.count = count
        }
    }
}

enum BirdwatchSchemaV2: VersionedSchema {
    static let versionIdentifier = Schema.Version(2, 0, 0)
    static var models: [any PersistentModel.Type] { [Sighting.self, Species.self] }

    enum Rarity: String, Codable { case common, rare }

    @Model final class Species {
        @Attribute(.unique) var name: String
        var rarity: Rarity = Rarity.common
        @Relationship(deleteRule: .cascade, inverse: \Sighting.species) var sightings: [Sighting] = []
        init(name: String) { self.name = name }
    }

    @Model final class Sighting {
        @Attribute(.preserveValueOnDeletion) var note: String
        var date: Date
        var count: Int
        var species: Species?
        init(note: String, date: Date, count: Int) {
            self.note = note
            self.date = date
            self.count = count
        }
    }
}

typealias Species = BirdwatchSchemaV2.Species
typealias Sighting = BirdwatchSchemaV2.Sighting

enum BirdwatchMigrationPlan: SchemaMigrationPlan {
    static var schemas: [any VersionedSchema.Type] { [BirdwatchSchemaV1.self, BirdwatchSchemaV2.self] }
    static var stages: [MigrationStage] { [migrateV1toV2] }
    /// Sightings of no bird are dropped; species seen fewer than three times become rare.
    static let migrateV1toV2 = MigrationStage.custom(
        fromVersion: BirdwatchSchemaV1.self, toVersion: BirdwatchSchemaV2.self,
        willMigrate: { context in
            try context.delete(model: BirdwatchSchemaV1.Sighting.self, where: #Predicate { $0.count == 0 })
            try context.save()
        },
        didMigrate: { context in
            for species in try context.fetch(FetchDescriptor<BirdwatchSchemaV2.Species>()) {
                let seen = species.sightings.reduce(0) { $0 + $1.count }
                species.rarity = seen < 3 ? .rare : .common
            }
            try context.save()
        })
}

/// The sample data the app's previews and first launch use.
enum SampleData {
    static let names = ["Robin", "Blue Tit", "Kingfisher", "Wren", "Heron"]

    static func fill(_ context: ModelContext, days: Int) throws {
        let start = Date(timeIntervalSinceReferenceDate: 800_000_000)
        let species = names.map { BirdwatchSchemaV1.Species(name: $0) }
        for s in species { context.insert(s) }
        for day in 0..<days {
            let sighting = BirdwatchSchemaV1.Sighting(
                note: "Day \(day)", date: start.addingTimeInterval(Double(day) * 86_400), count: day % 4)
            sighting.species = species[day % 3]  // Wren and Heron are never seen
            context.insert(sighting)
        }
        try context.save()
    }
}

/// Imports a field trip's sightings in the background.
@ModelActor
actor FieldTripImporter {
    func importTrip(_ notes: [String], of speciesName: String, on date: Date) throws -> [PersistentIdentifier] {
        let species =
            try modelContext.fetch(FetchDescriptor<Species>(predicate: #Predicate { $0.name == speciesName })).first
            ?? Species(name: speciesName)
        modelContext.author = "field-trip"
        var ids: [PersistentIdentifier] = []
        for note in notes {
            let sighting = Sighting(note: note, date: date, count: 1)
            sighting.species = species
            modelContext.insert(sighting)
            ids.append(sighting.persistentModelID)
        }
        try modelContext.save()
        return ids
    }
}

@Suite(.serialized) struct SampleAppTests {
    @Test func birdwatchRunsFromItsFirstVersionThroughMigrationImportAndHistory() async throws {
        let url = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("birdwatch-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: url) }
        // Version 1 of the app: the sample data.
        do {
            let container = try ModelContainer(
                for: Schema(versionedSchema: BirdwatchSchemaV1.self), configurations: ModelConfiguration(url: url))
            try SampleData.fill(ModelContext(container), days: 20)
            try container.persistentContainer.close()
        }
        // Version 2: the plan migrates, as the app's next launch does.
        let container = try ModelContainer(
            for: Species.self, Sighting.self, migrationPlan: BirdwatchMigrationPlan.self,
            configurations: ModelConfiguration(url: url))
        let context = ModelContext(container)
        // The fetches behind the views.
        let recent = FetchDescriptor<Sighting>(sortBy: [SortDescriptor(\.date, order: .reverse)])
        let sightings = try context.fetch(recent)
        #expect(sightings.count == 15)  // the 5 of count 0 dropped by willMigrate
        #expect(sightings.first?.note == "Day 19")
        let rarity = BirdwatchSchemaV2.Rarity.rare
        let rare = try context.fetch(
            FetchDescriptor<Species>(
                predicate: #Predicate { $0.rarity == rarity },
                sortBy: [SortDescriptor(\.name, comparator: .localizedStandard)]))
        #expect(rare.map(\.name) == ["Heron", "Wren"])
        for species in try context.fetch(FetchDescriptor<Species>()) {
            let seen = species.sightings.reduce(0) { $0 + $1.count }
            #expect(species.rarity == (seen < 3 ? .rare : .common), "\(species.name)")
        }
        let token = try #require(try context.fetchHistory(HistoryDescriptor<DefaultHistoryTransaction>()).last?.token)

        // A field trip imported in the background, by another author.
        let importer = FieldTripImporter(modelContainer: container)
        let imported = try await importer.importTrip(
            ["Pair at the pond", "Juvenile"], of: "Kingfisher", on: Date(timeIntervalSinceReferenceDate: 802_000_000))
        #expect(imported.count == 2)

        // The history consumer: what others changed since the token the app kept.
        var descriptor = HistoryDescriptor<DefaultHistoryTransaction>()
        descriptor.predicate = #Predicate { $0.token > token && $0.author == "field-trip" }
        let transactions = try context.fetchHistory(descriptor)
        let inserted = transactions.flatMap(\.changes).compactMap { change -> PersistentIdentifier? in
            guard case .insert(let insert) = change, let sighting = insert as? DefaultHistoryInsert<Sighting> else {
                return nil
            }
            return sighting.changedPersistentIdentifier
        }
        #expect(Set(inserted) == Set(imported))
        let kingfisher = try context.fetch(FetchDescriptor<Species>(predicate: #Predicate { $0.name == "Kingfisher" }))
        #expect(kingfisher.first?.sightings.count == 7)  // 5 migrated, 2 imported
        try container.persistentContainer.close()
    }
}
