import Foundation
import LogbookTestSupport
import Testing

@testable import LogbookGraph

/// Names made at run time: `@Managed` takes a `String` as well as a literal.
private let firstNameKey = ["first", "Name"].joined()
private let ageKey = String("AGE".lowercased())

/// A person whose properties name their attributes both ways.
final class NamedPerson: ManagedObject {
    override class var entityName: String { "Person" }
    @Managed(firstNameKey) var firstName: String
    @Managed("lastName") var lastName: String
    @Managed(ageKey) var age: Int32?
}

/// A person with a property for an attribute the model does not have.
final class MisnamedPerson: ManagedObject {
    override class var entityName: String { "Person" }
    @Managed("lastName") var lastName: String
    @Managed("naïveName") var naive: String
}

/// An entity of more than 16 attributes (its slots are found by id in a table, not by a scan).
final class WideRecord: ManagedObject {
    @Managed("field0") var first: String
    @Managed("field19") var last: Int64
}

/// `@Managed` holds its attribute's name as a two-byte id (`PropertyName`: one id for a name
/// given as a literal or as a `String`); properties named either way read and write their
/// attributes.
@Suite struct ManagedPropertyNameTests {
    private func model(_ type: ManagedObject.Type) throws -> ManagedObjectModel {
        try ManagedObjectModel {
            EntityDescription("Person", class: type) {
                AttributeDescription("firstName", .string)
                AttributeDescription("lastName", .string)
                AttributeDescription("age", .int32, optional: true)
            }
        }
    }

    @Test func literalAndStringNamesReadAndWriteTheirAttributes() throws {
        #expect(MemoryLayout<Managed<String>>.size == MemoryLayout<UInt16>.size)
        let store = TemporaryStore()
        do {
            let container = try makeContainer(store, model: model(NamedPerson.self))
            let context = container.newContext(concurrencyType: .confinement)
            for i in 0..<100 {
                let p = try context.insert(NamedPerson.self)
                p.firstName = "F\(i)"
                p.lastName = "L\(i)"
                p.age = i % 2 == 0 ? Int32(i) : nil
                #expect(p.firstName == "F\(i)" && p.lastName == "L\(i)")
                #expect(try p.value(forKey: "firstName") as? String == "F\(i)")
                #expect(try p.value(forKey: "age") as? Int32 == (i % 2 == 0 ? Int32(i) : nil))
            }
            try context.save()
            try container.close()
        }
        let container = try makeContainer(store, model: model(NamedPerson.self))
        let context = container.newContext(concurrencyType: .confinement)
        let people = try context.fetch(FetchRequest<NamedPerson>())
        #expect(people.count == 100)
        for p in people {
            guard let i = Int(p.lastName.dropFirst()) else {
                Issue.record("last name \(p.lastName)")
                continue
            }
            #expect(p.firstName == "F\(i)")
            #expect(p.age == (i % 2 == 0 ? Int32(i) : nil))
        }
        let wrapper = Managed<String>(firstNameKey)
        #expect(wrapper.key == "firstName")
        #expect(Managed<Int32?>("age").key == "age")
    }

    @Test func aNameTheModelDoesNotHaveFailsTheSaveAndSavesNothing() throws {
        let store = TemporaryStore()
        let container = try makeContainer(store, model: model(MisnamedPerson.self))
        let context = container.newContext(concurrencyType: .confinement)
        let p = try context.insert(MisnamedPerson.self)
        p.lastName = "Kept out"
        p.naive = "x"
        #expect(p.naive == "")
        #expect {
            try context.save()
        } throws: { error in
            let e = error as? LogbookError
            return e?.code == .unknownKey && e?.message.contains("naïveName") == true
        }
        #expect(try container.newContext(concurrencyType: .confinement).count(for: FetchRequest<MisnamedPerson>()) == 0)
    }

    @Test func anEntityOfManyAttributesFindsItsPropertiesByID() throws {
        let model = try ManagedObjectModel {
            EntityDescription("WideRecord", class: WideRecord.self) {
                for i in 0..<19 { AttributeDescription("field\(i)", .string, optional: true) }
                AttributeDescription("field19", .int64)
            }
        }
        let store = TemporaryStore()
        let container = try makeContainer(store, model: model)
        let context = container.newContext(concurrencyType: .confinement)
        let r = try context.insert(WideRecord.self)
        r.first = "a"
        r.last = 42
        try context.save()
        let other = container.newContext(concurrencyType: .confinement)
        let read = try #require(try other.fetch(FetchRequest<WideRecord>()).first)
        #expect(read.first == "a" && read.last == 42)
        #expect(try read.value(forKey: "field19") as? Int64 == 42)
        try container.close()
    }
}
