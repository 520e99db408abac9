import ArgumentParser
import Foundation
import LogbookEngine
import LogbookGraph

struct ExportCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "Write every object of a store as JSON Lines, exactly, streamed (memory stays bounded for any size).",
        discussion: """
            Line 1 is a header with the store's schema; then one line per object: \
            {"entity": E, "id": "x-logbook://STORE/E/pN", "values": {...}}. Every value reads back to the same bits \
            (dates as seconds since 2001, doubles as their shortest exact form, data and transformable values in \
            base64). `logbook import` reads it back.
            """
    )
    @Argument(help: "The store directory.") var directory: String
    @OptionGroup var key: KeyOption
    @Flag(help: "Write JSON Lines (the only format).") var json = false
    @Option(help: "Only this entity (and not its sub-entities).") var entity: String?

    func run() throws {
        guard json else { fail(ValidationError("export needs --json (the only format)"), code: 1) }
        do {
            let (container, context) = try openRecorded(directory, key: key.key())
            if let entity, container.model[entity: entity] == nil {
                throw LogbookError(.unknownEntity, "the store has no entity named \(entity)", entity: entity)
            }
            var out = OutputBuffer()
            let header: [String: Any] = [
                "format": Exchange.format, "version": Exchange.version,
                "store": container.storeIdentifier, "schema": Exchange.schemaJSON(container.model)
            ]
            let headerBytes = try JSONSerialization.data(withJSONObject: header, options: [.sortedKeys])
            out.write(String(decoding: headerBytes, as: UTF8.self) + "\n")
            for e in container.model.entities where entity == nil || e.name == entity {
                guard let flat = container.model.flattenedEntity(named: e.name) else { continue }
                try context.enumerateObjects(ofEntity: e.name) { o in
                    // Only the entity's own objects (a sub-entity's are written under its name).
                    guard o.objectID.entityName == e.name else { return }
                    out.write(
                        "{\"entity\": \"\(escape(e.name))\", \"id\": \"\(o.objectID.uriRepresentation.absoluteString)\", \"values\": {"
                    )
                    var first = true
                    func field(_ name: String, _ json: String) {
                        out.write((first ? "" : ", ") + "\"\(escape(name))\": " + json)
                        first = false
                    }
                    for a in flat.attributes where !a.isTransient { field(a.name, try Exchange.attributeJSON(o, a)) }
                    for r in flat.relationships {
                        if r.isToMany {
                            let members =
                                try r.isOrdered ? o.orderedObjects(forKey: r.name) : Array(o.objects(forKey: r.name))
                            var ids = members.map(\.objectID.uriRepresentation.absoluteString)
                            if !r.isOrdered { ids.sort() }
                            field(r.name, "[" + ids.map { "\"\($0)\"" }.joined(separator: ", ") + "]")
                        } else {
                            let target = try o.value(forKey: r.name) as? ManagedObject
                            field(
                                r.name, target.map { "\"\($0.objectID.uriRepresentation.absoluteString)\"" } ?? "null")
                        }
                    }
                    out.write("}}\n")
                }
            }
            out.flush()
            try? container.close()
        } catch { fail(error) }
    }
}
