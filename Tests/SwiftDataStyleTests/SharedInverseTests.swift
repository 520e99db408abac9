import Foundation
import Logbook
import Testing

// Apple's Backyard Birds: two to-many relationships name the same inverse.
@Model final class Backyard {
    var name: String
    @Relationship(deleteRule: .cascade, inverse: \Plant.backyard) var leadingPlants = [Plant]()
    @Relationship(deleteRule: .cascade, inverse: \Plant.backyard) var trailingPlants = [Plant]()
    init(name: String) { self.name = name }
}

@Model final class Plant {
    var species: String
    var backyard: Backyard?
    init(species: String) { self.species = species }
}

@Suite struct SharedInverseTests {
    @Test func twoRelationshipsNamingOneInverseKeepTheirMembers() throws {
        try withStoreURL { url in
            do {
                let container = try ModelContainer(
                    for: Backyard.self, Plant.self, configurations: ModelConfiguration(url: url))
                let context = ModelContext(container)
                let yard = Backyard(name: "Yard")
                context.insert(yard)
                yard.leadingPlants = [Plant(species: "Fern"), Plant(species: "Rose")]
                yard.trailingPlants = [Plant(species: "Ivy")]
                try context.save()
                #expect(yard.leadingPlants.allSatisfy { $0.backyard === yard })
                try container.persistentContainer.close()
            }
            let container = try ModelContainer(
                for: Backyard.self, Plant.self, configurations: ModelConfiguration(url: url))
            let context = ModelContext(container)
            let yard = try #require(try context.fetch(FetchDescriptor<Backyard>()).first)
            #expect(Set(yard.leadingPlants.map(\.species)) == ["Fern", "Rose"])
            #expect(yard.trailingPlants.map(\.species) == ["Ivy"])
            // A plant set to the yard directly joins the first relationship.
            let moss = Plant(species: "Moss")
            context.insert(moss)
            moss.backyard = yard
            #expect(Set(yard.leadingPlants.map(\.species)) == ["Fern", "Rose", "Moss"])
            // A trailing plant's backyard is the yard too; set to another yard, it moves there.
            let ivy = try #require(yard.trailingPlants.first)
            #expect(ivy.backyard === yard)
            let other = Backyard(name: "Other")
            context.insert(other)
            ivy.backyard = other
            #expect(yard.trailingPlants.isEmpty && other.leadingPlants.map(\.species) == ["Ivy"])
            ivy.backyard = nil
            yard.trailingPlants = [ivy]
            #expect(ivy.backyard === yard && other.leadingPlants.isEmpty)
            // Deleting a trailing plant takes it out of the relationship.
            context.delete(ivy)
            try context.save()
            #expect(yard.trailingPlants.isEmpty)
            // The cascade of each relationship deletes its members.
            context.delete(other)
            context.delete(yard)
            try context.save()
            #expect(try context.fetchCount(FetchDescriptor<Plant>()) == 0)
            try container.persistentContainer.close()
        }
    }
}
