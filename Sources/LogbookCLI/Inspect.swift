import ArgumentParser
import Foundation
import Logbook
import LogbookEngine

/// Opens a store read-only with the model it records; the context reads the store as it
/// was at version `asOf` when one is given (`snapshot(asOf:)`).
func openRecorded(_ directory: String, asOf: UInt64? = nil) throws -> (PersistentContainer, ManagedObjectContext) {
    let model = try ManagedObjectModel(recordedIn: directory)
    var options = ContainerOptions()
    options.readOnly = true
    let container = try PersistentContainer(name: "inspect", model: model, directory: directory, options: options)
    if let asOf { return (container, try container.snapshot(asOf: HistoryToken(version: asOf))) }
    return (container, container.newContext(concurrencyType: .confinement))
}

/// The help of `--as-of`, shared by the commands that read.
let asOfHelp = ArgumentHelp(
    "Read the store as it was at this version (`logbook history` lists them; versions before the last compaction are gone).",
    valueName: "version")

/// Prints one error line and exits non-zero (no stack trace).
func fail(_ error: any Error, code: Int32 = 1) -> Never {
    printError("logbook: \(error)")
    exit(code)
}

struct Schema: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print the entities, attributes, relationships and indexes a store records.")
    @Argument(help: "The store directory.") var directory: String

    func run() throws {
        do {
            let model = try ManagedObjectModel(recordedIn: directory)
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

struct Count: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print the number of objects of an entity (that match a predicate).")
    @Argument(help: "The store directory.") var directory: String
    @Option(help: "The entity.") var entity: String
    @Option(name: .customLong("where"), help: "A predicate, in Core Data's format language.") var predicate: String?
    @Option(name: .customLong("as-of"), help: asOfHelp) var asOf: UInt64?

    func run() throws {
        do {
            let (container, context) = try openRecorded(directory, asOf: asOf)
            var request = FetchRequest<ManagedObject>(entityName: entity)
            if let predicate { request.predicate = try FetchPredicate(format: predicate) }
            print(try context.count(for: request))
            try? container.close()
        } catch { fail(error) }
    }
}

struct Query: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print the objects of an entity, filtered, sorted and limited.")
    @Argument(help: "The store directory.") var directory: String
    @Option(help: "The entity.") var entity: String
    @Option(name: .customLong("where"), help: "A predicate, in Core Data's format language.") var predicate: String?
    @Option(help: "Sort keys, KEY or KEY:desc, separated by commas.") var sort: String?
    @Option(help: "At most this many objects.") var limit: Int?
    @Flag(help: "Print JSON (one array).") var json = false
    @Option(name: .customLong("as-of"), help: asOfHelp) var asOf: UInt64?

    func run() throws {
        do {
            let (container, context) = try openRecorded(directory, asOf: asOf)
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

struct Compact: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Compact a store: rewrite its live records and reclaim the rest.")
    @Argument(help: "The store directory.") var directory: String

    func run() throws {
        do {
            var options = StoreOptions()
            options.compaction = .manual
            // The versions of the recorded history stay readable (`--as-of`), as in a container
            // that tracks history with its retention at `.all`: only segments before the oldest
            // recorded transaction are folded.
            let opened = Locked<Store?>(nil)
            options.beforeCompaction = {
                guard let store = opened.withLock({ $0 }) else { return nil }
                var oldest: UInt64?
                store.snapshot().forEachKey(inKeyspace: 0xFFFF) { key in
                    oldest = EngineKey(rawValue: key).id
                    return false
                }
                return oldest.map { $0 - 1 }
            }
            let store = try Store.open(at: directory, options: options)
            opened.withLock { $0 = store }
            let report = try store.compact()
            opened.withLock { $0 = nil }
            try store.close()
            print(
                "compact seconds=\(String(format: "%.3f", report.seconds)) bytes_before=\(report.bytesBefore) bytes_after=\(report.bytesAfter) segments_removed=\(report.segmentsRemoved)"
            )
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

struct Verify: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Check every checksum, record and index of a store against its journal, without changing it.",
        discussion:
            "Exit status: 0 when the store is sound, 1 when it is damaged (the file and offset are printed), 2 when the directory is not a store or cannot be read."
    )
    @Argument(help: "The store directory.") var directory: String

    func run() throws {
        let report: VerificationReport
        do {
            report = try Store.verify(at: directory)
        } catch let e as EngineError where e.code == .corruption {
            printError("logbook: damaged: \(e)")
            print("damaged")
            throw ExitCode(1)
        } catch {
            fail(error, code: 2)
        }
        print("segments: \(report.segments) (\(report.segmentBytes) bytes)")
        print("commits replayed: \(report.commits), version \(report.version)")
        print("checkpoint: \(report.checkpoint.map { "\($0), compared with the journal" } ?? "none")")
        print("records: \(report.records), index entries: \(report.indexEntries), set members: \(report.setMembers)")
        if report.uncommittedTailBytes > 0 {
            print(
                "uncommitted tail: \(report.uncommittedTailBytes) bytes after the last commit (a torn write; the next open cuts it)"
            )
        }
        if report.isSound {
            print("sound")
            return
        }
        for p in report.problems { printError("logbook: damaged: \(p)") }
        print("damaged: \(report.problems.count) problem\(report.problems.count == 1 ? "" : "s")")
        throw ExitCode(1)
    }
}

struct Export: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Write every object of a store as JSON, streamed (memory stays bounded for any size).",
        discussion:
            "Output: {\"entities\": [{\"name\": E, \"objects\": [{\"id\": …, attributes…, relationships…}, …]}, …]}. To-one relationships are object ID URIs, to-many relationships arrays of them; dates are ISO 8601, data base64."
    )
    @Argument(help: "The store directory.") var directory: String
    @Flag(help: "Write JSON (the only format).") var json = false
    @Option(help: "Only this entity.") var entity: String?

    func run() throws {
        guard json else { fail(ValidationError("export needs --json (the only format)"), code: 1) }
        do {
            let (container, context) = try openRecorded(directory)
            var out = OutputBuffer()
            out.write("{\"entities\": [")
            let entities = try container.model.entities.filter { e in
                guard let entity else { return true }
                if container.model[entity: entity] == nil {
                    throw LogbookError(.unknownEntity, "the store has no entity named \(entity)", entity: entity)
                }
                return e.name == entity
            }
            for (n, e) in entities.enumerated() {
                out.write(n == 0 ? "\n" : ",\n")
                out.write("  {\"name\": \"\(escape(e.name))\", \"objects\": [")
                var first = true
                try context.enumerateObjects(ofEntity: e.name) { o in
                    out.write(first ? "\n    {" : ",\n    {")
                    first = false
                    out.write("\"id\": \"\(o.objectID.uriRepresentation.absoluteString)\"")
                    for a in e.attributes {
                        let v = try o.value(forKey: a.name)
                        if case .transformable = a.type {
                            out.write(", \"\(escape(a.name))\": \(jsonValue(v.map { "\($0)" }))")
                        } else {
                            out.write(", \"\(escape(a.name))\": \(jsonValue(v))")
                        }
                    }
                    for r in e.relationships {
                        if r.isToMany {
                            let ids = try o.objects(forKey: r.name).map(\.objectID.uriRepresentation.absoluteString)
                                .sorted()
                            out.write(
                                ", \"\(escape(r.name))\": [" + ids.map { "\"\($0)\"" }.joined(separator: ", ") + "]")
                        } else {
                            let target = try o.value(forKey: r.name) as? ManagedObject
                            out.write(
                                ", \"\(escape(r.name))\": "
                                    + (target.map { "\"\($0.objectID.uriRepresentation.absoluteString)\"" } ?? "null"))
                        }
                    }
                    out.write("}")
                }
                out.write(first ? "]}" : "\n  ]}")
            }
            out.write("\n]}\n")
            out.flush()
            try? container.close()
        } catch { fail(error) }
    }
}

/// Standard output in 64 KiB writes.
struct OutputBuffer {
    private var bytes: [UInt8] = []

    init() { bytes.reserveCapacity(1 << 16) }

    mutating func write(_ s: String) {
        bytes.append(contentsOf: s.utf8)
        if bytes.count >= 1 << 16 { flush() }
    }

    mutating func flush() {
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { Foundation.write(1, $0.baseAddress!, $0.count) }
            if n <= 0 { break }
            offset += n
        }
        bytes.removeAll(keepingCapacity: true)
    }
}

struct History: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print the transactions history recorded (saves made with history tracking on).",
        discussion: """
            One line per transaction: its version, time, author and context name, and per entity \
            the number of objects inserted (+), updated (~) and deleted (-).
            """)
    @Argument(help: "The store directory.") var directory: String
    @Option(help: "Only the transactions after this version.") var since: UInt64?
    @Flag(help: "Print JSON (one array).") var json = false

    func run() throws {
        do {
            let (container, _) = try openRecorded(directory)
            let transactions = try container.history(after: since.map(HistoryToken.init(version:)))
            if json { print("[", terminator: "") }
            for (n, t) in transactions.enumerated() {
                let version = t.token.version
                let counts = t.counts().sorted { $0.key < $1.key }
                if json {
                    let entities = counts.map {
                        "\"\(escape($0.key))\": {\"inserted\": \($0.value.inserted), \"updated\": \($0.value.updated), \"deleted\": \($0.value.deleted)}"
                    }.joined(separator: ", ")
                    print(
                        (n == 0 ? "\n" : ",\n")
                            + "  {\"version\": \(version), \"time\": \(jsonValue(t.timestamp)), \"author\": \(jsonValue(t.author)), \"contextName\": \(jsonValue(t.contextName)), \"entities\": {\(entities)}}",
                        terminator: "")
                } else {
                    let summary = counts.map {
                        "\($0.key) +\($0.value.inserted) ~\($0.value.updated) -\($0.value.deleted)"
                    }.joined(separator: ", ")
                    print(
                        "version=\(version) time=\(isoFormatter.string(from: t.timestamp))"
                            + " author=\(t.author ?? "-") context=\(t.contextName ?? "-") \(summary)")
                }
            }
            if json { print("\n]") }
            try? container.close()
        } catch { fail(error) }
    }
}
