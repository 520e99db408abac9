import ArgumentParser
import Foundation
import Logbook
import LogbookEngine

struct ExportCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
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
