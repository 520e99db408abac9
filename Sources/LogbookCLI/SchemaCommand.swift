import ArgumentParser
import Foundation
import LogbookEngine
import LogbookGraph

struct SchemaCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "schema",
        abstract: "Print the entities, attributes, relationships and indexes a store records.")
    @Argument(help: "The store directory.") var directory: String
    @OptionGroup var key: KeyOption

    func run() throws {
        do {
            let model = try ManagedObjectModel(recordedIn: directory, encryptionKey: key.key())
            for e in model.entities {
                print(
                    "entity \(e.name)" + (e.parentEntity.map { " : \($0)" } ?? "") + (e.isAbstract ? " (abstract)" : "")
                )
                for c in e.uniquenessConstraints { print("  unique (\(c.joined(separator: ", ")))") }
                for a in e.attributes {
                    print(
                        "  attribute \(a.name): \(a.type)\(a.isOptional ? ", optional" : "")\(a.isIndexed ? ", indexed" : "")"
                    )
                }
                for r in e.relationships {
                    print(
                        "  relationship \(r.name): \(r.isToMany ? (r.isOrdered ? "ordered to-many" : "to-many") : "to-one") \(r.destination)"
                            + (r.inverse.map { ", inverse \($0)" } ?? "") + ", delete rule \(r.deleteRule.rawValue)")
                }
            }
        } catch { fail(error) }
    }
}
