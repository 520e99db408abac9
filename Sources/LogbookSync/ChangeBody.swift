import Foundation
import LogbookGraph

/// One change log row's body, as JSON (docs/sync.md): `{"o": [objects], "m": [memberships]}`.
/// An object: `{"e": entity, "id": uuid, "op": "i"|"u"|"d", "a": {attribute: value},
/// "r": {to-one: uuid or null}}`; a membership change: `{"e": entity, "id": owner uuid, "rel":
/// relationship, "add": [uuid], "rem": [uuid], "ord": [uuid] (an ordered relationship's
/// order)}`. Values: strings, URLs and decimals as strings; integers as numbers; doubles as
/// numbers (`"NaN"`, `"Infinity"`, `"-Infinity"` as strings); booleans; dates as seconds since
/// 2001 (a number, every bit kept); bytes and transformable values as base64; UUIDs as strings.
struct BodyWriter: Sendable {
    private(set) var text = "{\"o\":["
    private var objects = 0
    private var members = 0
    private var inMembers = false
    var count: Int { objects + members }
    /// What the body holds (for the statements the server runs).
    private(set) var summary = BodySummary()

    mutating func object(
        entity: String, id: UUID, op: String, attributes: [(String, (any Sendable)?)], toOne: [(String, UUID?)]
    ) {
        precondition(!inMembers)
        switch op {
        case "i": summary.inserted.insert(entity)
        case "u": summary.updated.insert(entity)
        default: summary.deleted.insert(entity)
        }
        for (name, _) in attributes where op == "u" { summary.properties.insert("\(entity).\(name)") }
        for (name, _) in toOne { summary.properties.insert("\(entity).\(name)") }
        if objects > 0 { text += "," }
        objects += 1
        text += "{\"e\":"
        Self.string(entity, &text)
        text += ",\"id\":\"\(id.uuidString.lowercased())\",\"op\":\"\(op)\""
        if !attributes.isEmpty {
            text += ",\"a\":{"
            for (i, (name, value)) in attributes.enumerated() {
                if i > 0 { text += "," }
                Self.string(name, &text)
                text += ":"
                Self.value(value, &text)
            }
            text += "}"
        }
        if !toOne.isEmpty {
            text += ",\"r\":{"
            for (i, (name, target)) in toOne.enumerated() {
                if i > 0 { text += "," }
                Self.string(name, &text)
                text += target.map { ":\"\($0.uuidString.lowercased())\"" } ?? ":null"
            }
            text += "}"
        }
        text += "}"
    }

    mutating func members(
        entity: String, owner: UUID, relationship: String, added: [UUID], removed: [UUID], order: [UUID]?
    ) {
        if !inMembers {
            text += "],\"m\":["
            inMembers = true
        }
        summary.members.insert("\(entity).\(relationship)")
        if members > 0 { text += "," }
        members += 1
        text += "{\"e\":"
        Self.string(entity, &text)
        text += ",\"id\":\"\(owner.uuidString.lowercased())\",\"rel\":"
        Self.string(relationship, &text)
        func list(_ name: String, _ ids: [UUID]) {
            text += ",\"\(name)\":["
            text += ids.map { "\"\($0.uuidString.lowercased())\"" }.joined(separator: ",")
            text += "]"
        }
        list("add", added)
        list("rem", removed)
        if let order { list("ord", order) }
        text += "}"
    }

    func finished() -> String { text + (inMembers ? "]}" : "],\"m\":[]}") }

    static func string(_ s: String, _ out: inout String) {
        out += "\""
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case let c where c.value < 0x20: out += String(format: "\\u%04x", c.value)
            default: out.unicodeScalars.append(scalar)
            }
        }
        out += "\""
    }

    static func value(_ value: (any Sendable)?, _ out: inout String) {
        switch value {
        case nil: out += "null"
        case let s as String: string(s, &out)
        case let i as Int64: out += String(i)
        case let d as Double: number(d, &out)
        case let b as Bool: out += b ? "true" : "false"
        case let d as Date: number(d.timeIntervalSinceReferenceDate, &out)
        case let d as Data: string(d.base64EncodedString(), &out)
        case let u as UUID: string(u.uuidString.lowercased(), &out)
        case let u as URL: string(u.absoluteString, &out)
        case let d as Decimal: string("\(d)", &out)
        default: out += "null"
        }
    }

    static func number(_ d: Double, _ out: inout String) {
        if d.isNaN {
            out += "\"NaN\""
        } else if d.isInfinite {
            out += d < 0 ? "\"-Infinity\"" : "\"Infinity\""
        } else {
            out += "\(d)"
        }
    }
}

/// A body read back, with its values still as JSON gives them.
struct Body {
    struct Object {
        var entity: String
        var id: UUID
        var op: String
        var attributes: [String: Any]
        var toOne: [String: UUID?]
    }
    struct Members {
        var entity: String
        var owner: UUID
        var relationship: String
        var added: [UUID]
        var removed: [UUID]
        var order: [UUID]?
    }
    var objects: [Object] = []
    var members: [Members] = []

    init(json: String) throws {
        guard let root = try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any] else {
            throw SyncError(.server, "a change log body is not a JSON object")
        }
        func ids(_ value: Any?) -> [UUID] { (value as? [String])?.compactMap(UUID.init(uuidString:)) ?? [] }
        for o in root["o"] as? [[String: Any]] ?? [] {
            guard let e = o["e"] as? String, let id = (o["id"] as? String).flatMap(UUID.init(uuidString:)),
                let op = o["op"] as? String
            else { throw SyncError(.server, "a change log body names an object without entity, id or op") }
            var toOne: [String: UUID?] = [:]
            for (k, v) in o["r"] as? [String: Any] ?? [:] { toOne[k] = (v as? String).flatMap(UUID.init(uuidString:)) }
            objects.append(Object(entity: e, id: id, op: op, attributes: o["a"] as? [String: Any] ?? [:], toOne: toOne))
        }
        for m in root["m"] as? [[String: Any]] ?? [] {
            guard let e = m["e"] as? String, let id = (m["id"] as? String).flatMap(UUID.init(uuidString:)),
                let rel = m["rel"] as? String
            else { throw SyncError(.server, "a change log body names a membership without entity, id or relationship") }
            members.append(
                Members(
                    entity: e, owner: id, relationship: rel, added: ids(m["add"]), removed: ids(m["rem"]),
                    order: m["ord"] == nil ? nil : ids(m["ord"])))
        }
    }

    /// A JSON value as the attribute's type holds it (nil for null or a value that does not
    /// fit, which the receiving store then leaves as nil).
    static func value(_ json: Any, type: AttributeType) -> (any Sendable)? {
        if json is NSNull { return nil }
        func double() -> Double? {
            if let s = json as? String {
                switch s {
                case "NaN": return .nan
                case "Infinity": return .infinity
                case "-Infinity": return -.infinity
                default: return Double(s)
                }
            }
            return (json as? NSNumber)?.doubleValue
        }
        switch type {
        case .string: return json as? String
        case .url: return (json as? String).flatMap { URL(string: $0) }
        case .decimal: return (json as? String).flatMap { Decimal(string: $0) }
        case .int16, .int32, .int64: return (json as? NSNumber)?.int64Value
        case .double, .float: return double()
        case .bool: return (json as? NSNumber)?.boolValue ?? (json as? Bool)
        case .date: return double().map { Date(timeIntervalSinceReferenceDate: $0) }
        case .data, .transformable: return (json as? String).flatMap { Data(base64Encoded: $0) }
        case .uuid: return (json as? String).flatMap(UUID.init(uuidString:))
        }
    }
}
