// Model inheritance as SwiftData has it (Apple's "Adopting inheritance in SwiftData"): `@Model`
// on a base class and on its subclasses, queries over the hierarchy, `is` and `as?` in
// predicates, relationships holding objects of several subclasses. Only the import differs.
import Foundation
import Logbook
import Testing

@Model class Voyage {
    @Attribute(.preserveValueOnDeletion) var name: String
    var destination: String
    var startDate: Date
    var traveller: Traveller?

    init(name: String, destination: String, startDate: Date) {
        self.name = name
        self.destination = destination
        self.startDate = startDate
    }
}

@Model class BusinessVoyage: Voyage {
    var perDiem: Double = 0
    var company: String

    init(name: String, destination: String, startDate: Date, company: String, perDiem: Double) {
        self.company = company
        self.perDiem = perDiem
        super.init(name: name, destination: destination, startDate: startDate)
    }
}

@Model final class ConferenceVoyage: BusinessVoyage {
    var talk: String?

    init(name: String, destination: String, startDate: Date, talk: String?) {
        self.talk = talk
        super.init(name: name, destination: destination, startDate: startDate, company: "Conference", perDiem: 80)
    }
}

@Model final class PersonalVoyage: Voyage {
    enum Reason: String, Codable { case family, vacation }
    var reason: Reason

    init(name: String, destination: String, startDate: Date, reason: Reason) {
        self.reason = reason
        super.init(name: name, destination: destination, startDate: startDate)
    }
}

@Model final class Traveller {
    var name: String
    @Relationship(deleteRule: .cascade, inverse: \Voyage.traveller) var voyages: [Voyage] = []
    init(name: String) { self.name = name }
}

@Suite struct InheritanceTests {
    static let day: TimeInterval = 86_400
    static let start = Date(timeIntervalSinceReferenceDate: 800_000_000)

    static func schema() -> Schema {
        Schema([Voyage.self, BusinessVoyage.self, ConferenceVoyage.self, PersonalVoyage.self, Traveller.self])
    }

    /// A traveller with one voyage of each class.
    static func fill(_ context: ModelContext) throws {
        let ada = Traveller(name: "Ada")
        context.insert(ada)
        ada.voyages = [
            Voyage(name: "Walk", destination: "Lakes", startDate: start),
            BusinessVoyage(
                name: "Audit", destination: "Zurich", startDate: start + day, company: "Acme", perDiem: 120),
            ConferenceVoyage(name: "WWDC", destination: "Cupertino", startDate: start + 2 * day, talk: "Journals"),
            PersonalVoyage(name: "Home", destination: "Lyon", startDate: start + 3 * day, reason: .family)
        ]
        try context.save()
    }

    @Test func subclassesAreSubEntitiesWithTheirOwnAndInheritedProperties() throws {
        let container = try ModelContainer(
            for: Self.schema(), configurations: ModelConfiguration(isStoredInMemoryOnly: true))
        let entities = Dictionary(
            uniqueKeysWithValues: container.persistentContainer.model.entities.map { ($0.name, $0) })
        #expect(entities["BusinessVoyage"]?.parentEntity == "Voyage")
        #expect(entities["ConferenceVoyage"]?.parentEntity == "BusinessVoyage")
        #expect(entities["PersonalVoyage"]?.parentEntity == "Voyage")
        #expect(entities["Voyage"]?.parentEntity == nil)

        // An object made by a subclass's initializer keeps every value set before and after
        // `super.init` while unattached, and after it is inserted.
        let talk = ConferenceVoyage(name: "Swift", destination: "Berlin", startDate: Self.start, talk: nil)
        talk.talk = "Macros"
        #expect(talk.company == "Conference" && talk.perDiem == 80 && talk.name == "Swift")
        let context = ModelContext(container)
        context.insert(talk)
        #expect(talk.persistentModelID.entityName == "ConferenceVoyage")
        #expect(talk.company == "Conference" && talk.perDiem == 80 && talk.talk == "Macros")
        #expect(talk.name == "Swift" && talk.destination == "Berlin" && talk.startDate == Self.start)
        try context.save()

        let other = ModelContext(container)
        let read = try #require(other.model(for: talk.persistentModelID) as? ConferenceVoyage)
        #expect(read.company == "Conference" && read.talk == "Macros" && read.name == "Swift")
    }

    @Test func aFetchOfTheBaseClassReturnsObjectsOfEverySubclassAsTheirOwnClass() throws {
        let container = try ModelContainer(
            for: Self.schema(), configurations: ModelConfiguration(isStoredInMemoryOnly: true))
        try Self.fill(ModelContext(container))
        let context = ModelContext(container)

        let all = try context.fetch(FetchDescriptor<Voyage>(sortBy: [SortDescriptor(\.startDate)]))
        #expect(all.map(\.name) == ["Walk", "Audit", "WWDC", "Home"])
        #expect(type(of: all[0]) == Voyage.self)
        #expect((all[1] as? BusinessVoyage)?.perDiem == 120)
        #expect((all[2] as? ConferenceVoyage)?.talk == "Journals")
        #expect((all[3] as? PersonalVoyage)?.reason == .family)

        // A subclass's fetch has its own objects and its subclasses'; inherited properties
        // filter and sort through the subclass's key paths.
        let business = try context.fetch(
            FetchDescriptor<BusinessVoyage>(
                predicate: #Predicate { $0.destination != "Nowhere" }, sortBy: [SortDescriptor(\.name)]))
        #expect(business.map(\.name) == ["Audit", "WWDC"])
        var shallow = FetchDescriptor<BusinessVoyage>()
        shallow.includeSubclasses = false
        #expect(try context.fetch(shallow).map(\.name) == ["Audit"])
        #expect(try context.fetchCount(FetchDescriptor<Voyage>()) == 4)

        // The to-many relationship to the base class holds objects of every class.
        let ada = try #require(try context.fetch(FetchDescriptor<Traveller>()).first)
        #expect(
            Set(ada.voyages.map { String(describing: type(of: $0)) })
                == ["Voyage", "BusinessVoyage", "ConferenceVoyage", "PersonalVoyage"])
        #expect(ada.voyages.allSatisfy { $0.traveller === ada })
    }

    @Test func predicatesTestTheClassAndCastToIt() throws {
        let container = try ModelContainer(
            for: Self.schema(), configurations: ModelConfiguration(isStoredInMemoryOnly: true))
        try Self.fill(ModelContext(container))
        let context = ModelContext(container)
        func names(_ predicate: Predicate<Voyage>) throws -> [String] {
            try context.fetch(FetchDescriptor(predicate: predicate, sortBy: [SortDescriptor(\.name)])).map(\.name)
        }
        #expect(try names(#Predicate { $0 is BusinessVoyage }) == ["Audit", "WWDC"])
        #expect(try names(#Predicate { $0 is ConferenceVoyage }) == ["WWDC"])
        #expect(try names(#Predicate { !($0 is BusinessVoyage) }) == ["Home", "Walk"])
        #expect(try names(#Predicate { ($0 as? BusinessVoyage)?.perDiem ?? 0 > 100 }) == ["Audit"])
        let family = PersonalVoyage.Reason.family
        #expect(try names(#Predicate { ($0 as? PersonalVoyage)?.reason == family }) == ["Home"])
        #expect(try names(#Predicate { $0 is PersonalVoyage || $0.destination == "Lakes" }) == ["Home", "Walk"])
    }

    @Test func deletingASubclassObjectAppliesTheInheritedDeleteRules() throws {
        let container = try ModelContainer(
            for: Self.schema(), configurations: ModelConfiguration(isStoredInMemoryOnly: true))
        let context = ModelContext(container)
        try Self.fill(context)
        let ada = try #require(try context.fetch(FetchDescriptor<Traveller>()).first)
        let audit = try #require(ada.voyages.first { $0.name == "Audit" })
        context.delete(audit)
        try context.save()
        #expect(ada.voyages.count == 3)
        context.delete(ada)
        try context.save()
        #expect(try context.fetchCount(FetchDescriptor<Voyage>()) == 0)
    }

    @Test func aSubclassAloneInTheSchemaBringsItsSuperclasses() throws {
        let schema = Schema([ConferenceVoyage.self])
        #expect(Set(schema.entityNames).isSuperset(of: ["ConferenceVoyage", "BusinessVoyage", "Voyage", "Traveller"]))
    }
}
