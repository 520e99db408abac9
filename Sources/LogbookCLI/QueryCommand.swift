import ArgumentParser
import Foundation
import LogbookEngine
import LogbookGraph

struct QueryCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "query",
        abstract: "Print the objects of an entity, filtered, sorted and limited.")
    @Argument(help: "The store directory.") var directory: String
    @OptionGroup var key: KeyOption
    @Option(help: "The entity.") var entity: String
    @Option(name: .customLong("where"), help: "A predicate, in Core Data's format language.") var predicate: String?
    @Option(help: "Sort keys, KEY or KEY:desc, separated by commas.") var sort: String?
    @Option(help: "At most this many objects.") var limit: Int?
    @Flag(help: "Print JSON (one array).") var json = false
    @Option(name: .customLong("as-of"), help: asOfHelp) var asOf: UInt64?

    func run() throws {
        do {
            let (container, context) = try openRecorded(directory, asOf: asOf, key: key.key())
            var request = FetchRequest<ManagedObject>(entityName: entity)
            if let predicate { request.predicate = try FetchPredicate(format: predicate) }
            if let sort {
                request.sortDescriptors = sort.split(separator: ",").map { part in
                    let p = part.split(separator: ":")
                    return FetchSortDescriptor(
                        key: String(p[0]), ascending: !(p.count > 1 && p[1].lowercased() == "desc"))
                }
            }
            if let limit { request.fetchLimit = limit }
            request.fetchBatchSize = 1000
            let objects = try context.fetch(request)
            let attributes = container.model[entity: entity]?.attributes ?? []
            if json { print("[", terminator: "") }
            for (n, o) in objects.enumerated() {
                var fields: [(String, String, Any?)] = []
                for a in attributes {
                    let v = (try? o.value(forKey: a.name)) ?? nil
                    fields.append((a.name, render(v), v))
                }
                if json {
                    let body = fields.map { "\"\(escape($0.0))\": \(jsonValue($0.2))" }.joined(separator: ", ")
                    print((n == 0 ? "\n" : ",\n") + "  {\"id\": \"\(o.objectID)\", \(body)}", terminator: "")
                } else {
                    print("\(o.objectID) " + fields.map { "\($0.0)=\($0.1)" }.joined(separator: " "))
                }
            }
            if json { print("\n]") }
            try? container.close()
        } catch { fail(error) }
    }
}
