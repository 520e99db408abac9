import ArgumentParser
import Foundation
import LogbookEngine
import LogbookGraph

struct CountCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "count",
        abstract: "Print the number of objects of an entity (that match a predicate).")
    @Argument(help: "The store directory.") var directory: String
    @OptionGroup var key: KeyOption
    @Option(help: "The entity.") var entity: String
    @Option(name: .customLong("where"), help: "A predicate, in Core Data's format language.") var predicate: String?
    @Option(name: .customLong("as-of"), help: asOfHelp) var asOf: UInt64?

    func run() throws {
        do {
            let (container, context) = try openRecorded(directory, asOf: asOf, key: key.key())
            var request = FetchRequest<ManagedObject>(entityName: entity)
            if let predicate { request.predicate = try FetchPredicate(format: predicate) }
            print(try context.count(for: request))
            try? container.close()
        } catch { fail(error) }
    }
}
