import ArgumentParser
import Foundation
import LogbookEngine
import LogbookGraph

struct ImportCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Read what `logbook export --json` wrote back into a store: a new one, or one with the same model.",
        discussion: """
            The objects keep their identities (entity and serial number), relationships (by those identities), \
            ordered positions and exact values. Into a directory that does not exist (or is empty), the store is \
            made; into an existing store with the same model, the objects are added (an object it already has is \
            an error). Either way the import is built beside the store and put in its place at the end: an error \
            (reported with its line number) leaves the directory as it was. Memory stays bounded: the file is read \
            twice, objects first, then relationships, saved in batches. A progress bar goes to standard error.
            """
    )
    @Argument(help: "The store directory.") var directory: String
    @OptionGroup var key: KeyOption
    @Flag(help: "Read JSON Lines (the only format).") var json = false
    @Argument(help: "The file `logbook export --json` wrote; standard input when - or not given.") var file: String?
    @Option(help: "Objects per save.") var batch = 10_000
    @Flag(help: "No progress bar.") var quiet = false

    func run() throws {
        guard json else { fail(ValidationError("import needs --json (the only format)"), code: 1) }
        let fm = FileManager.default
        var spooled: String?
        defer { if let spooled { try? fm.removeItem(atPath: spooled) } }
        let staging = directory + ".importing-\(UUID().uuidString)"
        defer { try? fm.removeItem(atPath: staging) }
        do {
            // Standard input is read twice: it is kept in a file first.
            let input: String
            if let file, file != "-" {
                input = file
            } else {
                let path = NSTemporaryDirectory() + "logbook-import-\(UUID().uuidString).jsonl"
                spooled = path
                try spool(to: path)
                input = path
            }
            var reader = try LineReader(path: input)
            guard let headerLine = try reader.next() else { throw ExchangeError("line 1: the file is empty") }
            let header: [String: Any]
            do {
                header = try JSONSerialization.jsonObject(with: Data(headerLine)) as? [String: Any] ?? [:]
            } catch { throw ExchangeError("line 1: not JSON: \(error)") }
            guard header["format"] as? String == Exchange.format else {
                throw ExchangeError("line 1: not a Logbook export (no \"format\": \"\(Exchange.format)\" header)")
            }
            guard (header["version"] as? Int ?? 0) <= Exchange.version else {
                throw ExchangeError(
                    "line 1: an export of version \(header["version"] ?? "?"), later than this tool reads")
            }
            let model: ManagedObjectModel
            do { model = try Exchange.model(fromSchema: header["schema"]) } catch {
                throw ExchangeError("line 1: \(error)")
            }

            // The store is built beside the directory, then put in its place.
            let exists =
                fm.fileExists(atPath: directory) && !((try? fm.contentsOfDirectory(atPath: directory)) ?? []).isEmpty
            if exists {
                let recorded = try ManagedObjectModel(recordedIn: directory, encryptionKey: key.key())
                let a = try JSONSerialization.data(
                    withJSONObject: Exchange.schemaJSON(recorded), options: [.sortedKeys])
                let b = try JSONSerialization.data(withJSONObject: Exchange.schemaJSON(model), options: [.sortedKeys])
                guard a == b else {
                    throw ExchangeError(
                        "the store at \(directory) has another model than the export's: import into a new directory")
                }
                try fm.copyItem(atPath: directory, toPath: staging)
            }
            // With `--key-file`, a new store is encrypted with the key; an existing one opens with it.
            var options = ContainerOptions()
            options.encryptionKey = try key.key()
            let container = try PersistentContainer(
                name: "import",
                model: exists
                    ? try ManagedObjectModel(recordedIn: staging, encryptionKey: options.encryptionKey) : model,
                directory: staging, options: options)
            let total = (try? fm.attributesOfItem(atPath: input)[.size] as? Int) ?? 0
            var progress = Progress(total: 2 * max(1, total), quiet: quiet)
            let imported = try importObjects(input, into: container, progress: &progress, relationships: false)
            _ = try importObjects(input, into: container, progress: &progress, relationships: true)
            progress.finish()
            try container.close()

            if exists {
                let old = directory + ".replaced-\(UUID().uuidString)"
                try fm.moveItem(atPath: directory, toPath: old)
                try fm.moveItem(atPath: staging, toPath: directory)
                try? fm.removeItem(atPath: old)
            } else {
                if fm.fileExists(atPath: directory) { try fm.removeItem(atPath: directory) }
                try fm.moveItem(atPath: staging, toPath: directory)
            }
            print("import objects=\(imported) directory=\(directory)")
        } catch {
            // `fail` exits: the deferred clean-ups would not run.
            try? fm.removeItem(atPath: staging)
            if let spooled { try? fm.removeItem(atPath: spooled) }
            fail(error)
        }
    }

    /// Copies standard input to `path`.
    func spool(to path: String) throws {
        guard FileManager.default.createFile(atPath: path, contents: nil), let out = FileHandle(forWritingAtPath: path)
        else { throw ExchangeError("cannot write \(path)") }
        defer { try? out.close() }
        while let chunk = try FileHandle.standardInput.read(upToCount: 1 << 20), !chunk.isEmpty {
            try out.write(contentsOf: chunk)
        }
    }

    /// One pass over the objects: their values (`relationships` false), or their relationships.
    /// Returns how many objects it read.
    func importObjects(
        _ input: String, into container: PersistentContainer, progress: inout Progress, relationships: Bool
    ) throws -> Int {
        var reader = try LineReader(path: input)
        _ = try reader.next()  // the header
        let context = container.newContext(concurrencyType: .confinement)
        let store = container.storeIdentifier
        var count = 0
        var pending = 0
        func object(_ uri: String, line: Int) throws -> ManagedObject {
            guard let (entity, serial) = Exchange.identity(uri),
                let id = container.objectID(
                    forURIRepresentation: URL(
                        string:
                            "x-logbook://\(store)/\(entity.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? entity)/p\(serial)"
                    )!)
            else { throw ExchangeError("line \(line): \(uri) is not an object ID of the export") }
            do { return try context.existingObject(with: id) } catch {
                throw ExchangeError("line \(line): \(uri) names no object of the export")
            }
        }
        while let bytes = try reader.next() {
            let line = reader.lineNumber
            progress.advance(by: bytes.count + 1)
            if bytes.allSatisfy({ $0 == 0x20 || $0 == 0x0D }) { continue }
            let parsed: [String: Any]
            do {
                guard let p = try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any] else {
                    throw ExchangeError("not an object")
                }
                parsed = p
            } catch { throw ExchangeError("line \(line): not a JSON object: \(error)") }
            guard let entityName = parsed["entity"] as? String, let uri = parsed["id"] as? String,
                let values = parsed["values"] as? [String: Any], let (idEntity, serial) = Exchange.identity(uri),
                idEntity == entityName
            else { throw ExchangeError("line \(line): an object needs \"entity\", \"id\" and \"values\"") }
            guard let flat = container.model.flattenedEntity(named: entityName) else {
                throw ExchangeError("line \(line): the schema has no entity \(entityName)")
            }
            do {
                if !relationships {
                    let o = try context.insertNewObject(forEntityName: entityName, serial: serial)
                    for a in flat.attributes where !a.isTransient {
                        try Exchange.setAttribute(o, a, values[a.name] ?? NSNull())
                    }
                } else {
                    let o = try object(uri, line: line)
                    for r in flat.relationships where setsFromThisSide(r, of: flat, in: container.model) {
                        let v = values[r.name] ?? NSNull()
                        if r.isToMany {
                            guard let uris = v as? [String] else {
                                throw ExchangeError("\(r.name) is not an array of object IDs")
                            }
                            let members = try uris.map { try object($0, line: line) }
                            try o.setValue(members, forKey: r.name)
                        } else if let target = v as? String {
                            try o.setValue(try object(target, line: line), forKey: r.name)
                        }
                    }
                }
            } catch let e as ExchangeError {
                throw e.description.hasPrefix("line ") ? e : ExchangeError("line \(line): \(e)")
            } catch { throw ExchangeError("line \(line): \(error)") }
            count += 1
            pending += 1
            if pending >= max(1, batch) {
                try context.save()
                context.reset()
                pending = 0
            }
        }
        try context.save()
        return count
    }

    /// Whether a relationship is set from this side: ordered ones always (their order is theirs),
    /// an unordered one only when its inverse does not set it (a to-one beats a to-many; of two
    /// unordered to-many, the first by entity and name; no inverse: this side).
    func setsFromThisSide(_ r: RelationshipDescription, of e: EntityDescription, in model: ManagedObjectModel) -> Bool {
        if r.isOrdered { return true }
        guard let inverseName = r.inverse, let destination = model.flattenedEntity(named: r.destination),
            let inverse = destination.relationships.first(where: { $0.name == inverseName })
        else { return true }
        if inverse.isOrdered { return false }
        if r.isToMany != inverse.isToMany { return !r.isToMany }
        return (e.name, r.name) <= (destination.name, inverse.name)
    }
}

/// Reads a file line by line in bounded memory.
struct LineReader {
    private let handle: FileHandle
    private var buffer: [UInt8] = []
    private var start = 0
    private var done = false
    private(set) var lineNumber = 0

    init(path: String) throws {
        guard let h = FileHandle(forReadingAtPath: path) else { throw ExchangeError("cannot read \(path)") }
        handle = h
    }

    mutating func next() throws -> ArraySlice<UInt8>? {
        while true {
            if let nl = buffer[start...].firstIndex(of: 0x0A) {
                let line = buffer[start..<nl]
                start = nl + 1
                lineNumber += 1
                return line
            }
            if done {
                guard start < buffer.count else { return nil }
                let line = buffer[start...]
                start = buffer.count
                lineNumber += 1
                return line
            }
            buffer.removeFirst(start)
            start = 0
            if let chunk = try handle.read(upToCount: 1 << 20), !chunk.isEmpty {
                buffer.append(contentsOf: chunk)
            } else {
                done = true
            }
        }
    }
}

/// A progress bar on standard error.
struct Progress {
    let total: Int
    let quiet: Bool
    private var done = 0
    private var shown = -1

    init(total: Int, quiet: Bool) {
        self.total = total
        self.quiet = quiet || isatty(2) == 0
    }

    mutating func advance(by n: Int) {
        done += n
        let percent = min(100, done * 100 / max(1, total))
        guard !quiet, percent != shown else { return }
        shown = percent
        let bar = String(repeating: "#", count: percent / 4) + String(repeating: ".", count: 25 - percent / 4)
        printError("\rimport [\(bar)] \(percent)%", newline: false)
    }

    func finish() { if !quiet { printError("") } }
}
