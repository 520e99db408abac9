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

/// `@Managed` holds its attribute's name in one word (a literal's own bytes, or a copy of a
/// `String` made once); properties named either way read and write their attributes.
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
        #expect(MemoryLayout<Managed<String>>.size == MemoryLayout<UnsafeRawPointer>.size)
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
}
