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

    /// Inserted objects, by entity, as columns (`"i"`), in the order their entities came.
    private(set) var inserts: [InsertColumns] = []
    private var insertBlock: [String: Int] = [:]
    private var inserted = Set<UUID>()
    /// The objects of `objects` that went into `inserts` (not into the text).
    private var columnObjects = 0

    mutating func object(
        entity: String, id: UUID, op: String, attributes: [(String, (any Sendable)?)], toOne: [(String, UUID?)]
    ) {
        precondition(!inMembers)
        if op == "i" && inColumns(entity: entity, id: id, attributes: attributes, toOne: toOne) {
            summary.insertedColumns.insert(entity)
            objects += 1
            columnObjects += 1
            return
        }
        switch op {
        case "i": summary.inserted.insert(entity)
        case "u": summary.updated.insert(entity)
        default: summary.deleted.insert(entity)
        }
        for (name, _) in attributes where op == "u" { summary.properties.insert("\(entity).\(name)") }
        for (name, _) in toOne { summary.properties.insert("\(entity).\(name)") }
        if objects > columnObjects { text += "," }
        objects += 1
        text += "{\"e\":"
        Self.string(entity, &text)
        text += ",\"id\":"
        Self.uuid(id, &text)
        text += ",\"op\":\"\(op)\""
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
                text += ":"
                if let target { Self.uuid(target, &text) } else { text += "null" }
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
        text += ",\"id\":"
        Self.uuid(owner, &text)
        text += ",\"rel\":"
        Self.string(relationship, &text)
        func list(_ name: String, _ ids: [UUID]) {
            text += ",\"\(name)\":["
            for (i, id) in ids.enumerated() {
                if i > 0 { text += "," }
                Self.uuid(id, &text)
            }
            text += "]"
        }
        list("add", added)
        list("rem", removed)
        if let order { list("ord", order) }
        text += "}"
    }

    /// Adds an inserted object to its entity's columns; false when it does not fit them (an
    /// object already in the body, or other properties than the entity's first insert named),
    /// which then goes as an object of its own.
    private mutating func inColumns(
        entity: String, id: UUID, attributes: [(String, (any Sendable)?)], toOne: [(String, UUID?)]
    ) -> Bool {
        let n: Int
        if let found = insertBlock[entity] {
            n = found
            let block = inserts[n]
            guard block.attributeNames.count == attributes.count, block.toOneNames.count == toOne.count,
                zip(block.attributeNames, attributes).allSatisfy({ $0 == $1.0 }),
                zip(block.toOneNames, toOne).allSatisfy({ $0 == $1.0 })
            else { return false }
        } else {
            n = inserts.count
            inserts.append(
                InsertColumns(entity: entity, attributeNames: attributes.map(\.0), toOneNames: toOne.map(\.0)))
            insertBlock[entity] = n
        }
        guard inserted.insert(id).inserted else { return false }
        inserts[n].ids.append(id)
        for (i, (_, value)) in attributes.enumerated() { inserts[n].attributes[i].append(value) }
        for (i, (_, target)) in toOne.enumerated() { inserts[n].toOne[i].append(target) }
        return true
    }

    func finished() -> String {
        var out = text + (inMembers ? "]" : "],\"m\":[")
        if !inMembers { out += "]" }
        if !inserts.isEmpty {
            out += ",\"i\":["
            for (i, block) in inserts.enumerated() {
                if i > 0 { out += "," }
                block.write(&out)
            }
            out += "]"
        }
        return out + "}"
    }

    static func string(_ s: String, _ out: inout String) {
        out += "\""
        // Most strings need no escape: appended whole.
        if !s.utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) {
            out += s
            out += "\""
            return
        }
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

    /// A UUID as a JSON string, lower-case (without `uuidString`'s formatting and copy).
    static func uuid(_ u: UUID, _ out: inout String) {
        let digits = Array("0123456789abcdef".utf8)
        var text = [UInt8](repeating: UInt8(ascii: "-"), count: 38)
        text[0] = UInt8(ascii: "\"")
        text[37] = UInt8(ascii: "\"")
        withUnsafeBytes(of: u.uuid) { raw in
            var at = 1
            for (i, b) in raw.enumerated() {
                if i == 4 || i == 6 || i == 8 || i == 10 { at += 1 }
                text[at] = digits[Int(b >> 4)]
                text[at + 1] = digits[Int(b & 15)]
                at += 2
            }
        }
        out += String(decoding: text, as: UTF8.self)
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
        case let u as UUID: uuid(u, &out)
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

/// A JSON value of a body's attribute, as read (no `Any`, no `NSNumber`).
enum JSONValue: Equatable {
    case null
    case bool(Bool)
    /// A number's text (an integer keeps every digit; a double parses from it).
    case number(Substring)
    case string(String)
}

/// A body read back, with its values still as JSON gives them.
///
/// Read by a parser of its own over the UTF-8 bytes (the server's `jsonb` text: any key
/// order, any whitespace): JSONSerialization's objects, `NSNumber`s and casts took a quarter
/// of a pull's time.
struct Body {
    struct Object {
        var entity: String
        var id: UUID
        var op: String
        var attributes: [String: JSONValue]
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

    init() {}

    init(json: String) throws {
        var text = json
        self = try text.withUTF8 { bytes in
            var reader = JSONReader(bytes)
            let body = try reader.body()
            reader.skipSpace()
            guard reader.atEnd else { throw JSONReader.malformed("text after the body") }
            return body
        }
    }

    /// A JSON value as the attribute's type holds it (nil for null or a value that does not
    /// fit, which the receiving store then leaves as nil).
    static func value(_ json: JSONValue, type: AttributeType) -> (any Sendable)? {
        func double() -> Double? {
            switch json {
            case .number(let n): return Double(n)
            case .string("NaN"): return .nan
            case .string("Infinity"): return .infinity
            case .string("-Infinity"): return -.infinity
            case .string(let s): return Double(s)
            default: return nil
            }
        }
        func string() -> String? {
            if case .string(let s) = json { return s }
            return nil
        }
        switch type {
        case .string: return string()
        case .url: return string().flatMap { URL(string: $0) }
        case .decimal: return string().flatMap { Decimal(string: $0) }
        case .int16, .int32, .int64:
            guard case .number(let n) = json else { return nil }
            return Int64(n) ?? Double(n).flatMap { Int64(exactly: $0) }
        case .double, .float: return double()
        case .bool:
            if case .bool(let b) = json { return b }
            return nil
        case .date: return double().map { Date(timeIntervalSinceReferenceDate: $0) }
        case .data, .transformable: return string().flatMap { Data(base64Encoded: $0) }
        case .uuid: return string().flatMap(UUID.init(uuidString:))
        }
    }
}

/// Reads a change body's JSON from its UTF-8 bytes.
struct JSONReader {
    private let bytes: UnsafeBufferPointer<UInt8>
    private var at = 0

    init(_ bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    static func malformed(_ what: String) -> SyncError {
        SyncError(.server, "a change log body is not the JSON sync writes: \(what)")
    }

    var atEnd: Bool { at >= bytes.count }

    mutating func skipSpace() {
        while at < bytes.count, bytes[at] == 0x20 || bytes[at] == 0x0A || bytes[at] == 0x0D || bytes[at] == 0x09 {
            at += 1
        }
    }

    private mutating func expect(_ byte: UInt8) throws {
        skipSpace()
        guard at < bytes.count, bytes[at] == byte else {
            throw Self.malformed("expected '\(Character(Unicode.Scalar(byte)))' at byte \(at)")
        }
        at += 1
    }

    /// Consumes `byte` if it comes next.
    private mutating func take(_ byte: UInt8) -> Bool {
        skipSpace()
        guard at < bytes.count, bytes[at] == byte else { return false }
        at += 1
        return true
    }

    /// The members of an object, each handed to `member` with the reader at its value.
    private mutating func object(_ member: (inout JSONReader, String) throws -> Void) throws {
        try expect(UInt8(ascii: "{"))
        if take(UInt8(ascii: "}")) { return }
        repeat {
            let key = try string()
            try expect(UInt8(ascii: ":"))
            try member(&self, key)
        } while take(UInt8(ascii: ","))
        try expect(UInt8(ascii: "}"))
    }

    private mutating func array(_ element: (inout JSONReader) throws -> Void) throws {
        try expect(UInt8(ascii: "["))
        if take(UInt8(ascii: "]")) { return }
        repeat { try element(&self) } while take(UInt8(ascii: ","))
        try expect(UInt8(ascii: "]"))
    }

    mutating func string() throws -> String {
        skipSpace()
        guard let s = JSONStrings.read(bytes, &at) else {
            throw Self.malformed("a malformed string before byte \(at)")
        }
        return s
    }

    static func hexDigit(_ b: UInt8) -> UInt8? {
        switch b {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): b - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): b - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): b - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    /// A UUID string (36 characters, any case) without Foundation's scanner.
    mutating func uuid() throws -> UUID {
        try expect(UInt8(ascii: "\""))
        var raw = [UInt8](repeating: 0, count: 16)
        var n = 0
        while n < 32 {
            guard at < bytes.count else { throw Self.malformed("a short UUID") }
            let b = bytes[at]
            at += 1
            if b == UInt8(ascii: "-") { continue }
            guard let d = Self.hexDigit(b) else {
                throw Self.malformed("a UUID with '\(Character(Unicode.Scalar(b)))'")
            }
            raw[n / 2] = raw[n / 2] << 4 | d
            n += 1
        }
        guard at < bytes.count, bytes[at] == UInt8(ascii: "\"") else { throw Self.malformed("a long UUID") }
        at += 1
        return UUID(
            uuid: (
                raw[0], raw[1], raw[2], raw[3], raw[4], raw[5], raw[6], raw[7], raw[8], raw[9], raw[10], raw[11],
                raw[12], raw[13], raw[14], raw[15]
            ))
    }

    fileprivate mutating func optionalUUID() throws -> UUID? {
        if literal("null") { return nil }
        return try uuid()
    }

    private mutating func literal(_ word: StaticString) -> Bool {
        skipSpace()
        let n = word.utf8CodeUnitCount
        guard at + n <= bytes.count else { return false }
        for i in 0..<n where bytes[at + i] != word.utf8Start[i] { return false }
        at += n
        return true
    }

    mutating func value() throws -> JSONValue {
        skipSpace()
        guard at < bytes.count else { throw Self.malformed("a missing value") }
        switch bytes[at] {
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "n") where literal("null"): return .null
        case UInt8(ascii: "t") where literal("true"): return .bool(true)
        case UInt8(ascii: "f") where literal("false"): return .bool(false)
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            let start = at
            while at < bytes.count {
                let b = bytes[at]
                guard
                    (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(b) || b == UInt8(ascii: "-")
                        || b == UInt8(ascii: "+") || b == UInt8(ascii: ".") || b == UInt8(ascii: "e")
                        || b == UInt8(ascii: "E")
                else { break }
                at += 1
            }
            return .number(Substring(String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<at]), as: UTF8.self)))
        default:
            // An object or array where a value of an attribute goes: not what sync writes.
            throw Self.malformed("an unexpected value at byte \(at)")
        }
    }

    fileprivate mutating func uuids() throws -> [UUID] {
        var out: [UUID] = []
        try array { out.append(try $0.uuid()) }
        return out
    }

    mutating func body() throws -> Body {
        var body = Body()
        try object { reader, key in
            switch key {
            case "o":
                try reader.array { reader in
                    var (entity, id, op): (String?, UUID?, String?) = (nil, nil, nil)
                    var attributes: [String: JSONValue] = [:]
                    var toOne: [String: UUID?] = [:]
                    try reader.object { reader, key in
                        switch key {
                        case "e": entity = try reader.string()
                        case "id": id = try reader.uuid()
                        case "op": op = try reader.string()
                        case "a": try reader.object { reader, name in attributes[name] = try reader.value() }
                        case "r": try reader.object { reader, name in toOne[name] = try reader.optionalUUID() }
                        default: _ = try reader.value()
                        }
                    }
                    guard let entity, let id, let op else {
                        throw SyncError(.server, "a change log body names an object without entity, id or op")
                    }
                    body.objects.append(
                        Body.Object(entity: entity, id: id, op: op, attributes: attributes, toOne: toOne))
                }
            case "m":
                try reader.array { reader in
                    var (entity, id, rel): (String?, UUID?, String?) = (nil, nil, nil)
                    var (added, removed, order): ([UUID], [UUID], [UUID]?) = ([], [], nil)
                    try reader.object { reader, key in
                        switch key {
                        case "e": entity = try reader.string()
                        case "id": id = try reader.uuid()
                        case "rel": rel = try reader.string()
                        case "add": added = try reader.uuids()
                        case "rem": removed = try reader.uuids()
                        case "ord": order = try reader.uuids()
                        default: _ = try reader.value()
                        }
                    }
                    guard let entity, let id, let rel else {
                        throw SyncError(
                            .server, "a change log body names a membership without entity, id or relationship")
                    }
                    body.members.append(
                        Body.Members(
                            entity: entity, owner: id, relationship: rel, added: added, removed: removed, order: order))
                }
            case "i":
                try reader.array { reader in try reader.insertColumns(into: &body) }
            default: _ = try reader.value()
            }
        }
        return body
    }

    /// A block of inserted objects as columns (`{"e", "id": [...], "a": {name: [...]}, "r":
    /// {name: [...]}}`), read into objects with op "i", as if written one by one.
    private mutating func insertColumns(into body: inout Body) throws {
        var entity: String?
        var ids: [UUID] = []
        var attributes: [(String, [JSONValue])] = []
        var toOne: [(String, [UUID?])] = []
        try object { reader, key in
            switch key {
            case "e": entity = try reader.string()
            case "id": ids = try reader.uuids()
            case "a":
                try reader.object { reader, name in
                    var values: [JSONValue] = []
                    try reader.array { values.append(try $0.value()) }
                    attributes.append((name, values))
                }
            case "r":
                try reader.object { reader, name in
                    var targets: [UUID?] = []
                    try reader.array { targets.append(try $0.optionalUUID()) }
                    toOne.append((name, targets))
                }
            default: _ = try reader.value()
            }
        }
        guard let entity else { throw SyncError(.server, "a change log body has inserted columns without an entity") }
        guard attributes.allSatisfy({ $0.1.count == ids.count }), toOne.allSatisfy({ $0.1.count == ids.count }) else {
            throw Self.malformed("inserted columns of \(entity) whose lengths differ from their ids'")
        }
        body.objects.reserveCapacity(body.objects.count + ids.count)
        for (i, id) in ids.enumerated() {
            var a: [String: JSONValue] = [:]
            a.reserveCapacity(attributes.count)
            for (name, values) in attributes { a[name] = values[i] }
            var r: [String: UUID?] = [:]
            for (name, targets) in toOne { r[name] = targets[i] }
            body.objects.append(Body.Object(entity: entity, id: id, op: "i", attributes: a, toOne: r))
        }
    }
}
