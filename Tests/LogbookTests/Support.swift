import Foundation
import LogbookEngine
import LogbookTestSupport
import Testing

@testable import LogbookGraph

// MARK: The model of the source documents (004 §16.1–16.10)

final class Person: ManagedObject {
    @Managed("firstName") var firstName: String
    @Managed("lastName") var lastName: String
    @Managed("age") var age: Int32?
}

final class Manager: ManagedObject {
    @Managed("firstName") var firstName: String
    @Managed("lastName") var lastName: String
    @Managed("age") var age: Int32?
    @ToMany("employees") var employees: Set<Employee>
}

final class Employee: ManagedObject {
    @Managed("firstName") var firstName: String
    @Managed("lastName") var lastName: String
    @Managed("age") var age: Int32?
    @ToOne("manager") var manager: Manager?
    @ToMany("managers") var managers: Set<Manager>
}

/// A colour as red, green, blue and alpha components (UIColor's place in the article).
struct Color: Equatable, Sendable {
    var red: Double, green: Double, blue: Double, alpha: Double
    static let red = Color(red: 1, green: 0, blue: 0, alpha: 1)
    static let blue = Color(red: 0, green: 0, blue: 1, alpha: 1)
}

/// Writes a colour's four components as a 32-byte blob and reads them back (004 §16.10).
struct ColorTransformer: LogbookGraph.AttributeTransformer {
    struct NotAColor: Error {}
    func transformedValue(_ value: Any) throws -> Data {
        guard let c = value as? Color else { throw NotAColor() }
        var data = Data()
        for component in [c.red, c.green, c.blue, c.alpha] {
            withUnsafeBytes(of: component.bitPattern.littleEndian) { data.append(contentsOf: $0) }
        }
        return data
    }
    func reverseTransformedValue(_ data: Data) throws -> Any {
        guard data.count == 32 else { throw NotAColor() }
        let c = (0..<4).map { i in
            Double(
                bitPattern: data[data.startIndex + i * 8..<data.startIndex + i * 8 + 8].withUnsafeBytes {
                    $0.loadUnaligned(as: UInt64.self)
                }.littleEndian)
        }
        return Color(red: c[0], green: c[1], blue: c[2], alpha: c[3])
    }
}

final class Laptop: ManagedObject {
    @Managed("model") var model: String
    @Transformable("color") var color: Color?
}

func personEntity() -> EntityDescription {
    EntityDescription("Person", class: Person.self) {
        AttributeDescription("firstName", .string)
        AttributeDescription("lastName", .string)
        AttributeDescription("age", .int32, optional: true, indexed: true)
    }
}

func documentModel() throws -> ManagedObjectModel {
    AttributeTransformers.register(ColorTransformer(), name: "ColorTransformer")
    return try ManagedObjectModel {
        personEntity()
        EntityDescription("Manager", class: Manager.self) {
            AttributeDescription("firstName", .string)
            AttributeDescription("lastName", .string)
            AttributeDescription("age", .int32, optional: true)
            RelationshipDescription("employees", to: "Employee", inverse: "managers", toMany: true)
            RelationshipDescription("reports", to: "Employee", inverse: "manager", toMany: true)
        }
        EntityDescription("Employee", class: Employee.self) {
            AttributeDescription("firstName", .string)
            AttributeDescription("lastName", .string)
            AttributeDescription("age", .int32, optional: true)
            RelationshipDescription("manager", to: "Manager", inverse: "reports")
            RelationshipDescription("managers", to: "Manager", inverse: "employees", toMany: true)
        }
        EntityDescription("Laptop", class: Laptop.self) {
            AttributeDescription("model", .string)
            AttributeDescription("color", .transformable(transformer: "ColorTransformer"), optional: true)
        }
    }
}

func makeContainer(_ store: TemporaryStore, model: ManagedObjectModel? = nil, durability: Durability = .full) throws
    -> PersistentContainer
{
    try FileManager.default.createDirectory(atPath: store.directory, withIntermediateDirectories: true)
    var options = ContainerOptions()
    options.durability = durability
    return try PersistentContainer(
        name: "Test", model: model ?? documentModel(), directory: store.path, options: options)
}
