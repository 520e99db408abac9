import Foundation

/// Reading the recorded schema without `JSONDecoder`: every open of a container reads it, and
/// the first use of `JSONDecoder` in a process (its containers, the schema's `Decodable`
/// witnesses, their metadata) cost about 1.3 ms of an open that takes 5–10 (`docs/benchmarks.md`,
/// W2 open). The JSON is the same (`encoded()` still writes it with `JSONEncoder`); this reads
/// what that writes — objects, arrays, strings with their escapes, integers, booleans, null,
/// keys in any order, unknown keys skipped — and gives nil for anything else (a fraction, an
/// exponent, a value of the wrong kind), which `decode` then hands to `JSONDecoder`.
extension StoredSchema {
    init?(json bytes: [UInt8]) {
        var parser = JSONScanner(bytes)
        guard let value = parser.document(), let schema = Self(value) else { return nil }
        self = schema
    }

    private init?(_ value: JSONScanner.Value) {
        guard case .object(let fields) = value,
            let uuidString = fields["storeUUID"]?.string, let uuid = UUID(uuidString: uuidString),
            let entities = fields["entities"]?.array?.map(Entity.init), !entities.contains(where: { $0 == nil }),
            let nextKeyspace = fields["nextKeyspace"]?.integer(UInt16.self),
            let nextIndex = fields["nextIndex"]?.integer(UInt32.self)
        else { return nil }
        self.init(storeUUID: uuid, entities: entities.map { $0! }, nextKeyspace: nextKeyspace, nextIndex: nextIndex)
        if let format = fields["format"] {
            guard let f = format.integer(Int.self) else { return nil }
            self.format = f
        }
    }
}

extension StoredSchema.Entity {
    fileprivate init?(_ value: JSONScanner.Value) {
        guard case .object(let f) = value, let name = f["name"]?.string,
            let keyspace = f["keyspace"]?.integer(UInt16.self),
            let attributes = f["attributes"]?.array?.map(StoredSchema.Attribute.init),
            !attributes.contains(where: { $0 == nil }),
            let relationships = f["relationships"]?.array?.map(StoredSchema.Relationship.init),
            !relationships.contains(where: { $0 == nil }),
            let constraints = f.optionalArray("constraints", StoredSchema.Constraint.init),
            let compoundIndexes = f.optionalArray("compoundIndexes", StoredSchema.Constraint.init),
            let parent = f.optional("parent", \.string), let abstract = f.optional("abstract", \.bool)
        else { return nil }
        self.init(
            name: name, constraints: constraints, compoundIndexes: compoundIndexes, parent: parent,
            abstract: abstract, keyspace: keyspace, attributes: attributes.map { $0! },
            relationships: relationships.map { $0! })
    }
}

extension StoredSchema.Attribute {
    fileprivate init?(_ value: JSONScanner.Value) {
        guard case .object(let f) = value, let name = f["name"]?.string, let type = f["type"]?.string,
            let optional = f["optional"]?.bool, let transformer = f.optional("transformer", \.string),
            let index = f.optional("index", { $0.integer(UInt32.self) })
        else { return nil }
        self.init(name: name, type: type, transformer: transformer, optional: optional, index: index)
    }
}

extension StoredSchema.Relationship {
    fileprivate init?(_ value: JSONScanner.Value) {
        guard case .object(let f) = value, let name = f["name"]?.string,
            let destination = f["destination"]?.string, let toMany = f["toMany"]?.bool,
            let deleteRule = f["deleteRule"]?.string, let inverse = f.optional("inverse", \.string),
            let setKeyspace = f.optional("setKeyspace", { $0.integer(UInt16.self) }),
            let polymorphic = f.optional("polymorphic", \.bool),
            let orderKeyspace = f.optional("orderKeyspace", { $0.integer(UInt16.self) }),
            let index = f.optional("index", { $0.integer(UInt32.self) })
        else { return nil }
        self.init(
            name: name, destination: destination, inverse: inverse, toMany: toMany, deleteRule: deleteRule,
            setKeyspace: setKeyspace, polymorphic: polymorphic, orderKeyspace: orderKeyspace, index: index)
    }
}

extension StoredSchema.Constraint {
    fileprivate init?(_ value: JSONScanner.Value) {
        guard case .object(let f) = value, let keys = f["keys"]?.array?.map(\.string),
            !keys.contains(where: { $0 == nil }), let index = f["index"]?.integer(UInt32.self)
        else { return nil }
        self.init(keys: keys.map { $0! }, index: index)
    }
}

extension [String: JSONScanner.Value] {
    /// A key that may be missing or null: `.some(nil)` then; nil when present with a value
    /// `read` does not take.
    fileprivate func optional<T>(_ key: String, _ read: (JSONScanner.Value) -> T?) -> T?? {
        guard let value = self[key], value != .null else { return .some(nil) }
        return read(value).map { .some($0) }
    }

    fileprivate func optionalArray<T>(_ key: String, _ element: (JSONScanner.Value) -> T?) -> [T]?? {
        optional(key) { value -> [T]? in
            guard let items = value.array?.map(element), !items.contains(where: { $0 == nil }) else { return nil }
            return items.map { $0! }
        }
    }
}

/// A JSON reader for what `JSONEncoder` writes (RFC 8259 values; numbers only as integers).
struct JSONScanner {
    indirect enum Value: Equatable {
        case object([String: Value])
        case array([Value])
        case string(String)
        case integer(Int64)
        case bool(Bool)
        case null

        var string: String? { if case .string(let s) = self { s } else { nil } }
        var bool: Bool? { if case .bool(let b) = self { b } else { nil } }
        var array: [Value]? { if case .array(let a) = self { a } else { nil } }
        func integer<T: FixedWidthInteger>(_: T.Type) -> T? {
            if case .integer(let n) = self { T(exactly: n) } else { nil }
        }
    }

    private let bytes: [UInt8]
    private var i = 0
    private var depth = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    /// The one value the bytes hold, with nothing but whitespace around it.
    mutating func document() -> Value? {
        guard let v = value() else { return nil }
        skipSpace()
        return i == bytes.count ? v : nil
    }

    private mutating func skipSpace() {
        while i < bytes.count, bytes[i] == 0x20 || bytes[i] == 0x0A || bytes[i] == 0x0D || bytes[i] == 0x09 { i += 1 }
    }

    private mutating func literal(_ word: StaticString, _ v: Value) -> Value? {
        let n = word.utf8CodeUnitCount
        guard i + n <= bytes.count else { return nil }
        for k in 0..<n where bytes[i + k] != word.utf8Start[k] { return nil }
        i += n
        return v
    }

    private mutating func value() -> Value? {
        skipSpace()
        guard i < bytes.count, depth < 64 else { return nil }
        switch bytes[i] {
        case UInt8(ascii: "{"):
            i += 1
            depth += 1
            defer { depth -= 1 }
            var fields: [String: Value] = [:]
            skipSpace()
            if i < bytes.count, bytes[i] == UInt8(ascii: "}") {
                i += 1
                return .object(fields)
            }
            while true {
                skipSpace()
                guard let key = string() else { return nil }
                skipSpace()
                guard i < bytes.count, bytes[i] == UInt8(ascii: ":") else { return nil }
                i += 1
                guard let v = value() else { return nil }
                fields[key] = v
                skipSpace()
                guard i < bytes.count else { return nil }
                if bytes[i] == UInt8(ascii: ",") {
                    i += 1
                } else if bytes[i] == UInt8(ascii: "}") {
                    i += 1
                    return .object(fields)
                } else {
                    return nil
                }
            }
        case UInt8(ascii: "["):
            i += 1
            depth += 1
            defer { depth -= 1 }
            var items: [Value] = []
            skipSpace()
            if i < bytes.count, bytes[i] == UInt8(ascii: "]") {
                i += 1
                return .array(items)
            }
            while true {
                guard let v = value() else { return nil }
                items.append(v)
                skipSpace()
                guard i < bytes.count else { return nil }
                if bytes[i] == UInt8(ascii: ",") {
                    i += 1
                } else if bytes[i] == UInt8(ascii: "]") {
                    i += 1
                    return .array(items)
                } else {
                    return nil
                }
            }
        case UInt8(ascii: "\""): return string().map(Value.string)
        case UInt8(ascii: "t"): return literal("true", .bool(true))
        case UInt8(ascii: "f"): return literal("false", .bool(false))
        case UInt8(ascii: "n"): return literal("null", .null)
        default: return integer()
        }
    }

    /// An integer: optional minus, digits without a leading zero; a fraction or exponent
    /// after it is not read here (nil).
    private mutating func integer() -> Value? {
        let negative = bytes[i] == UInt8(ascii: "-")
        if negative { i += 1 }
        let start = i
        var magnitude: UInt64 = 0
        while i < bytes.count, bytes[i] >= UInt8(ascii: "0"), bytes[i] <= UInt8(ascii: "9") {
            let (m, o1) = magnitude.multipliedReportingOverflow(by: 10)
            let (s, o2) = m.addingReportingOverflow(UInt64(bytes[i] - UInt8(ascii: "0")))
            guard !o1, !o2 else { return nil }
            magnitude = s
            i += 1
        }
        guard i > start, i - start == 1 || bytes[start] != UInt8(ascii: "0") else { return nil }
        if i < bytes.count, [UInt8(ascii: "."), UInt8(ascii: "e"), UInt8(ascii: "E")].contains(bytes[i]) { return nil }
        if negative {
            guard magnitude <= UInt64(Int64.max) + 1 else { return nil }
            return .integer(magnitude == UInt64(Int64.max) + 1 ? .min : -Int64(magnitude))
        }
        guard magnitude <= UInt64(Int64.max) else { return nil }
        return .integer(Int64(magnitude))
    }

    /// A string at `i` (its opening quote), escapes resolved; nil if malformed.
    private mutating func string() -> String? {
        var at = i
        defer { i = at }
        return bytes.withUnsafeBufferPointer { JSONStrings.read($0, &at) }
    }
}

/// JSON strings, read the one way for the model's JSON (`JSONScanner`) and for sync's change
/// bodies (LogbookSync's `JSONReader`).
package enum JSONStrings {
    /// Reads the JSON string whose opening quote is at `i` and leaves `i` after its closing
    /// quote: escapes resolved (a surrogate pair as one scalar). Nil when it is malformed: no
    /// closing quote, a raw control character, an unknown escape, a lone surrogate, bytes that
    /// are not UTF-8.
    ///
    /// ```swift
    /// var i = 0
    /// let s = Array(#""a\n\u00e9""#.utf8).withUnsafeBufferPointer { JSONStrings.read($0, &i) }  // "a\né"
    /// ```
    package static func read(_ bytes: UnsafeBufferPointer<UInt8>, _ i: inout Int) -> String? {
        let (quote, backslash) = (UInt8(ascii: "\""), UInt8(ascii: "\\"))
        guard i < bytes.count, bytes[i] == quote else { return nil }
        i += 1
        // The common case: no escape, read in place.
        let start = i
        while i < bytes.count, bytes[i] != quote, bytes[i] != backslash, bytes[i] >= 0x20 { i += 1 }
        guard i < bytes.count else { return nil }
        if bytes[i] == quote {
            defer { i += 1 }
            return String(validating: UnsafeBufferPointer(rebasing: bytes[start..<i]), as: UTF8.self)
        }
        var out = Array(bytes[start..<i])
        while i < bytes.count {
            let c = bytes[i]
            i += 1
            switch c {
            case quote: return String(validating: out, as: UTF8.self)
            case backslash:
                guard i < bytes.count else { return nil }
                let e = bytes[i]
                i += 1
                switch e {
                case quote, backslash, UInt8(ascii: "/"): out.append(e)
                case UInt8(ascii: "b"): out.append(0x08)
                case UInt8(ascii: "f"): out.append(0x0C)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "u"):
                    guard var scalar = hex4(bytes, &i) else { return nil }
                    if (0xD800..<0xDC00).contains(scalar) {
                        // A surrogate pair: the low half must follow as \uXXXX.
                        guard i + 1 < bytes.count, bytes[i] == backslash, bytes[i + 1] == UInt8(ascii: "u")
                        else { return nil }
                        i += 2
                        guard let low = hex4(bytes, &i), (0xDC00..<0xE000).contains(low) else { return nil }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    }
                    guard let u = Unicode.Scalar(scalar) else { return nil }
                    out.append(contentsOf: Array(String(Character(u)).utf8))
                default: return nil
                }
            case 0..<0x20: return nil
            default: out.append(c)
            }
        }
        return nil
    }

    /// Four hexadecimal digits at `i`.
    private static func hex4(_ bytes: UnsafeBufferPointer<UInt8>, _ i: inout Int) -> UInt32? {
        guard i + 4 <= bytes.count else { return nil }
        var v: UInt32 = 0
        for _ in 0..<4 {
            let c = bytes[i]
            i += 1
            let d: UInt8
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): d = c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): d = c - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): d = c - UInt8(ascii: "A") + 10
            default: return nil
            }
            v = v << 4 | UInt32(d)
        }
        return v
    }
}
