import ArgumentParser
import Foundation
import Logbook
import LogbookEngine

/// Opens a store read-only with the model it records.
func openRecorded(_ directory: String) throws -> (PersistentContainer, ManagedObjectContext) {
    let model = try ManagedObjectModel(recordedIn: directory)
    var options = ContainerOptions()
    options.readOnly = true
    let container = try PersistentContainer(name: "inspect", model: model, directory: directory, options: options)
    return (container, container.newContext(concurrencyType: .confinement))
}

/// Prints one error line and exits non-zero (no stack trace).
func fail(_ error: any Error, code: Int32 = 1) -> Never {
    printError("logbook: \(error)")
    exit(code)
}

struct Schema: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Print the entities, attributes, relationships and indexes a store records.")
    @Argument(help: "The store directory.") var directory: String

    func run() throws {
        do {
            let model = try ManagedObjectModel(recordedIn: directory)
            for e in model.entities {
                print("entity \(e.name)")
                for a in e.attributes {
                    print("  attribute \(a.name): \(a.type)\(a.isOptional ? ", optional" : "")\(a.isIndexed ? ", indexed" : "")")
                }
                for r in e.relationships {
                    print("  relationship \(r.name): \(r.isToMany ? "to-many" : "to-one") \(r.destination)"
                          + (r.inverse.map { ", inverse \($0)" } ?? "") + ", delete rule \(r.deleteRule.rawValue)")
                }
            }
        } catch { fail(error) }
    }
}

struct Count: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Print the number of objects of an entity (that match a predicate).")
    @Argument(help: "The store directory.") var directory: String
    @Option(help: "The entity.") var entity: String
    @Option(name: .customLong("where"), help: "A predicate, in Core Data's format language.") var predicate: String?

    func run() throws {
        do {
            let (container, context) = try openRecorded(directory)
            var request = FetchRequest<ManagedObject>(entityName: entity)
            if let predicate { request.predicate = try FetchPredicate(format: predicate) }
            print(try context.count(for: request))
            try? container.close()
        } catch { fail(error) }
    }
}

struct Query: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Print the objects of an entity, filtered, sorted and limited.")
    @Argument(help: "The store directory.") var directory: String
    @Option(help: "The entity.") var entity: String
    @Option(name: .customLong("where"), help: "A predicate, in Core Data's format language.") var predicate: String?
    @Option(help: "Sort keys, KEY or KEY:desc, separated by commas.") var sort: String?
    @Option(help: "At most this many objects.") var limit: Int?
    @Flag(help: "Print JSON (one array).") var json = false

    func run() throws {
        do {
            let (container, context) = try openRecorded(directory)
            var request = FetchRequest<ManagedObject>(entityName: entity)
            if let predicate { request.predicate = try FetchPredicate(format: predicate) }
            if let sort {
                request.sortDescriptors = sort.split(separator: ",").map { part in
                    let p = part.split(separator: ":")
                    return FetchSortDescriptor(key: String(p[0]), ascending: !(p.count > 1 && p[1].lowercased() == "desc"))
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

struct Compact: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Compact a store: rewrite its live records and reclaim the rest.")
    @Argument(help: "The store directory.") var directory: String

    func run() throws {
        do {
            var options = StoreOptions()
            options.compaction = .manual
            let store = try Store.open(at: directory, options: options)
            let report = try store.compact()
            try store.close()
            print("compact seconds=\(String(format: "%.3f", report.seconds)) bytes_before=\(report.bytesBefore) bytes_after=\(report.bytesAfter) segments_removed=\(report.segmentsRemoved)")
        } catch { fail(error) }
    }
}

func render(_ v: Any?) -> String {
    switch v {
    case nil: return "nil"
    case let s as String: return "\"\(s)\""
    case let d as Date: return isoFormatter.string(from: d)
    case let d as Data: return d.base64EncodedString()
    default: return "\(v!)"
    }
}

func escape(_ s: String) -> String {
    var out = ""
    for c in s.unicodeScalars {
        switch c {
        case "\"": out += "\\\""
        case "\\": out += "\\\\"
        case "\n": out += "\\n"
        case "\t": out += "\\t"
        default:
            if c.value < 0x20 { out += String(format: "\\u%04x", c.value) } else { out.unicodeScalars.append(c) }
        }
    }
    return out
}

func jsonValue(_ v: Any?) -> String {
    switch v {
    case nil: return "null"
    case let b as Bool: return b ? "true" : "false"
    case let s as String: return "\"\(escape(s))\""
    case let d as Date: return "\"\(isoFormatter.string(from: d))\""
    case let d as Data: return "\"\(d.base64EncodedString())\""
    case let x as Int16: return "\(x)"
    case let x as Int32: return "\(x)"
    case let x as Int64: return "\(x)"
    case let x as Double: return x.isFinite ? "\(x)" : "null"
    case let x as Float: return x.isFinite ? "\(x)" : "null"
    default: return "\"\(escape("\(v!)"))\""
    }
}

nonisolated(unsafe) let isoFormatter: ISO8601DateFormatter = {
    // Used from the main thread only (the tool is single-threaded).
    let f = ISO8601DateFormatter()
    f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
    return f
}()
