import Foundation
import LogbookEngine
import LogbookGraph

/// The exchange format of `logbook export --json` and `logbook import --json`: JSON Lines
/// (one JSON value per line), so that a reader streams it and an error names its line.
///
/// Line 1, the header: `{"format": "logbook-export", "version": 1, "store": UUID, "schema":
/// {"entities": [...]}}` — each entity with its own attributes (name, type as Xcode names it,
/// optional, indexed, transformer), relationships (destination, inverse, to-many, ordered,
/// delete rule), parent, abstract, uniqueness constraints and compound indexes.
/// Then one line per object, entities in the model's order and objects in key order:
/// `{"entity": E, "id": "x-logbook://STORE/E/pN", "values": {...}}` with every attribute
/// (inherited ones included) and relationship. Values are exact: integers as integers;
/// doubles, floats and dates (seconds since 2001, as `Date` holds them) as the shortest number
/// that reads back to the same bits, and non-finite ones as the strings "nan", "inf", "-inf";
/// data and transformable values (the bytes the transformer stored) as base64; UUIDs, URLs
/// and decimals as strings; to-one relationships as an object ID URI or null; to-many ones as
/// arrays of them, ordered ones in their order, the others sorted.
enum Exchange {
    static let format = "logbook-export"
    static let version = 1

    // MARK: The schema

    static func schemaJSON(_ model: ManagedObjectModel) -> [String: Any] {
        [
            "entities": model.entities.map { e -> [String: Any] in
                var entity: [String: Any] = [
                    "name": e.name,
                    "attributes": e.attributes.map { a -> [String: Any] in
                        var out: [String: Any] = [
                            "name": a.name, "type": typeName(a.type), "optional": a.isOptional, "indexed": a.isIndexed
                        ]
                        if case .transformable(let t) = a.type { out["transformer"] = t }
                        return out
                    },
                    "relationships": e.relationships.map { r -> [String: Any] in
                        [
                            "name": r.name, "destination": r.destination, "inverse": r.inverse as Any? ?? NSNull(),
                            "toMany": r.isToMany, "ordered": r.isOrdered, "deleteRule": r.deleteRule.rawValue,
                            "optional": r.isOptional
                        ]
                    },
                    "abstract": e.isAbstract,
                    "constraints": e.uniquenessConstraints,
                    "indexes": e.compoundIndexes
                ]
                if let p = e.parentEntity { entity["parent"] = p }
                return entity
            }
        ]
    }

    static func model(fromSchema json: Any?) throws -> ManagedObjectModel {
        guard let schema = json as? [String: Any], let entities = schema["entities"] as? [[String: Any]] else {
            throw ExchangeError("the header has no schema")
        }
        return try ManagedObjectModel(
            entities: entities.map { e in
                guard let name = e["name"] as? String else {
                    throw ExchangeError("an entity of the schema has no name")
                }
                var entity = EntityDescription(
                    name,
                    attributes: try (e["attributes"] as? [[String: Any]] ?? []).map { a in
                        guard let n = a["name"] as? String, let t = a["type"] as? String,
                            let type = attributeType(t, transformer: a["transformer"] as? String)
                        else { throw ExchangeError("entity \(name) has an attribute of no known type") }
                        return AttributeDescription(
                            n, type, optional: a["optional"] as? Bool ?? true, indexed: a["indexed"] as? Bool ?? false)
                    },
                    relationships: try (e["relationships"] as? [[String: Any]] ?? []).map { r in
                        guard let n = r["name"] as? String, let d = r["destination"] as? String else {
                            throw ExchangeError("entity \(name) has a relationship with no name or destination")
                        }
                        return RelationshipDescription(
                            n, to: d, inverse: r["inverse"] as? String, toMany: r["toMany"] as? Bool ?? false,
                            ordered: r["ordered"] as? Bool ?? false,
                            deleteRule: DeleteRule(rawValue: r["deleteRule"] as? String ?? "") ?? .nullify,
                            optional: r["optional"] as? Bool ?? true)
                    }, parent: e["parent"] as? String, abstract: e["abstract"] as? Bool ?? false)
                entity.uniquenessConstraints = e["constraints"] as? [[String]] ?? []
                entity.compoundIndexes = e["indexes"] as? [[String]] ?? []
                return entity
            })
    }

    static func typeName(_ t: AttributeType) -> String {
        if case .transformable = t { return "Transformable" }
        return t.description
    }

    static func attributeType(_ name: String, transformer: String?) -> AttributeType? {
        switch name {
        case "String": .string
        case "Integer 16": .int16
        case "Integer 32": .int32
        case "Integer 64": .int64
        case "Double": .double
        case "Float": .float
        case "Boolean": .bool
        case "Date": .date
        case "Binary": .data
        case "UUID": .uuid
        case "URI": .url
        case "Decimal": .decimal
        case "Transformable": .transformable(transformer: transformer ?? "")
        default: nil
        }
    }

    // MARK: Values

    /// A number that reads back to the same bits; non-finite ones as strings.
    static func number(_ d: Double) -> String {
        if d.isNaN { return "\"nan\"" }
        if d.isInfinite { return d > 0 ? "\"inf\"" : "\"-inf\"" }
        return "\(d)"
    }

    static func double(_ v: Any) -> Double? {
        switch v {
        case let s as String: return s == "nan" ? .nan : s == "inf" ? .infinity : s == "-inf" ? -.infinity : nil
        case let n as NSNumber: return n.doubleValue
        default: return nil
        }
    }

    /// The exact JSON of attribute `a`'s value in `o`.
    static func attributeJSON(_ o: ManagedObject, _ a: AttributeDescription) throws -> String {
        if case .transformable = a.type {
            return try o.storedBytes(forKey: a.name).map { "\"\($0.base64EncodedString())\"" } ?? "null"
        }
        guard let v = try o.value(forKey: a.name) else { return "null" }
        switch v {
        case let d as Date: return number(d.timeIntervalSinceReferenceDate)
        case let x as Double: return number(x)
        case let x as Float: return number(Double(x))
        case let u as UUID: return "\"\(u.uuidString)\""
        case let u as URL: return "\"\(escape(u.absoluteString))\""
        case let d as Decimal: return "\"\(d)\""
        default: return jsonValue(v)
        }
    }

    /// Sets attribute `a` of `o` from its exported JSON value.
    static func setAttribute(_ o: ManagedObject, _ a: AttributeDescription, _ json: Any) throws {
        if json is NSNull {
            if case .transformable = a.type {
                try o.setStoredBytes(nil, forKey: a.name)
            } else {
                try o.setValue(nil, forKey: a.name)
            }
            return
        }
        func fail() -> ExchangeError { ExchangeError("\(a.name): \(json) is not a \(typeName(a.type)) value") }
        let value: Any
        switch a.type {
        case .string:
            guard let s = json as? String else { throw fail() }
            value = s
        case .int16, .int32, .int64:
            guard let n = json as? NSNumber else { throw fail() }
            value = n.int64Value
        case .double, .float:
            guard let d = double(json) else { throw fail() }
            value = d
        case .bool:
            guard let b = json as? Bool else { throw fail() }
            value = b
        case .date:
            guard let d = double(json) else { throw fail() }
            value = Date(timeIntervalSinceReferenceDate: d)
        case .data:
            guard let s = json as? String, let d = Data(base64Encoded: s) else { throw fail() }
            value = d
        case .uuid:
            guard let s = json as? String, let u = UUID(uuidString: s) else { throw fail() }
            value = u
        case .url:
            guard let s = json as? String, let u = URL(string: s) else { throw fail() }
            value = u
        case .decimal:
            guard let s = json as? String, let d = Decimal(string: s, locale: Locale(identifier: "en_US_POSIX")) else {
                throw fail()
            }
            value = d
        case .transformable:
            guard let s = json as? String, let d = Data(base64Encoded: s) else { throw fail() }
            try o.setStoredBytes(d, forKey: a.name)
            return
        }
        try o.setValue(value, forKey: a.name)
    }

    /// The entity and serial an exported object ID names (`x-logbook://STORE/Entity/pN`).
    static func identity(_ uri: String) -> (entity: String, serial: UInt64)? {
        guard let url = URL(string: uri), url.scheme == "x-logbook" else { return nil }
        let parts = url.path.split(separator: "/")
        guard parts.count == 2, parts[1].hasPrefix("p"), let serial = UInt64(parts[1].dropFirst()),
            let entity = String(parts[0]).removingPercentEncoding
        else { return nil }
        return (entity, serial)
    }
}

struct ExchangeError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
