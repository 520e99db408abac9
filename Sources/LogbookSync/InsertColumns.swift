import Foundation
import LogbookGraph
import PostgresNIO

/// The inserted objects of one entity in a change body, column by column (docs/sync.md: a
/// body's `"i"`): their ids, each attribute's values and each to-one's references, in the
/// same order. A first push of a large store is mostly inserts; as columns, the body is about
/// half the bytes for the server to parse, and the server's table takes the rows from typed
/// arrays bound to one set-based insert, not from the `jsonb` object by object.
struct InsertColumns: Sendable {
    var entity: String
    var ids: [UUID] = []
    var attributeNames: [String]
    /// By attribute, then by object (nil: a null value).
    var attributes: [[(any Sendable)?]]
    var toOneNames: [String]
    /// By to-one relationship, then by object.
    var toOne: [[UUID?]]

    init(entity: String, attributeNames: [String], toOneNames: [String]) {
        self.entity = entity
        self.attributeNames = attributeNames
        self.attributes = attributeNames.map { _ in [] }
        self.toOneNames = toOneNames
        self.toOne = toOneNames.map { _ in [] }
    }

    /// The block's JSON: `{"e": entity, "id": [uuid], "a": {attribute: [value]}, "r": {to-one:
    /// [uuid or null]}}`, values written as an object's are.
    func write(_ out: inout String) {
        out += "{\"e\":"
        BodyWriter.string(entity, &out)
        out += ",\"id\":["
        for (i, id) in ids.enumerated() {
            if i > 0 { out += "," }
            BodyWriter.uuid(id, &out)
        }
        out += "],\"a\":{"
        for (n, name) in attributeNames.enumerated() {
            if n > 0 { out += "," }
            BodyWriter.string(name, &out)
            out += ":["
            for (i, value) in attributes[n].enumerated() {
                if i > 0 { out += "," }
                BodyWriter.value(value, &out)
            }
            out += "]"
        }
        out += "},\"r\":{"
        for (n, name) in toOneNames.enumerated() {
            if n > 0 { out += "," }
            BodyWriter.string(name, &out)
            out += ":["
            for (i, target) in toOne[n].enumerated() {
                if i > 0 { out += "," }
                if let target { BodyWriter.uuid(target, &out) } else { out += "null" }
            }
            out += "]"
        }
        out += "}}"
    }
}

/// A one-dimensional PostgreSQL array in the binary wire format (`array_send`'s: dimensions,
/// a null flag, the element type, then each element's length and bytes, -1 for a null), made
/// from a column of values — postgres-nio's own arrays take no null elements.
struct ColumnArray: PostgresThrowingDynamicTypeEncodable {
    let psqlType: PostgresDataType
    var psqlFormat: PostgresFormat { .binary }
    private let bytes: ByteBuffer

    private init(
        arrayType: PostgresDataType, elementType: PostgresDataType, count: Int, write: (inout ByteBuffer) -> Bool
    ) {
        var elements = ByteBuffer()
        let hasNull = write(&elements)
        var out = ByteBuffer()
        out.reserveCapacity(20 + elements.readableBytes)
        out.writeInteger(Int32(1))
        out.writeInteger(Int32(hasNull ? 1 : 0))
        out.writeInteger(UInt32(elementType.rawValue))
        out.writeInteger(Int32(count))
        out.writeInteger(Int32(1))
        out.writeBuffer(&elements)
        psqlType = arrayType
        bytes = out
    }

    func encode<JSONEncoder: PostgresJSONEncoder>(
        into byteBuffer: inout ByteBuffer, context: PostgresEncodingContext<JSONEncoder>
    ) throws {
        var copy = bytes
        byteBuffer.writeBuffer(&copy)
    }

    /// References (or ids): `uuid[]`.
    init(uuids: [UUID?]) {
        self.init(arrayType: .uuidArray, elementType: .uuid, count: uuids.count) { out in
            var hasNull = false
            for u in uuids {
                guard let u else {
                    out.writeInteger(Int32(-1))
                    hasNull = true
                    continue
                }
                out.writeInteger(Int32(16))
                withUnsafeBytes(of: u.uuid) { out.writeBytes($0) }
            }
            return hasNull
        }
    }

    /// The SQL array type the values of an attribute of `type` travel as.
    static func sqlType(_ type: AttributeType) -> String {
        switch type {
        case .string, .url, .decimal: "text[]"
        case .int16, .int32, .int64: "bigint[]"
        case .double, .float, .date: "double precision[]"
        case .bool: "boolean[]"
        case .data, .transformable: "bytea[]"
        case .uuid: "uuid[]"
        }
    }

    /// An attribute's values, as its column's type takes them (a date as its seconds since
    /// 2001, turned into a `timestamptz` by the statement as the JSON path does: every bit
    /// the same either way). A value of another Swift type goes as null, as in the JSON.
    init(_ values: [(any Sendable)?], type: AttributeType) {
        let (arrayType, elementType): (PostgresDataType, PostgresDataType) =
            switch type {
            case .string, .url, .decimal: (.textArray, .text)
            case .int16, .int32, .int64: (.int8Array, .int8)
            case .double, .float, .date: (.float8Array, .float8)
            case .bool: (.boolArray, .bool)
            case .data, .transformable: (.byteaArray, .bytea)
            case .uuid: (.uuidArray, .uuid)
            }
        self.init(arrayType: arrayType, elementType: elementType, count: values.count) { out in
            var hasNull = false
            for value in values {
                let start = out.writerIndex
                out.writeInteger(Int32(0))
                var written = true
                switch (elementType, value) {
                case (.text, let s as String): out.writeString(s)
                case (.text, let u as URL): out.writeString(u.absoluteString)
                case (.text, let d as Decimal): out.writeString("\(d)")
                case (.int8, let i as Int64): out.writeInteger(i)
                case (.float8, let d as Double): out.writeInteger(d.bitPattern)
                case (.float8, let d as Date): out.writeInteger(d.timeIntervalSinceReferenceDate.bitPattern)
                case (.bool, let b as Bool): out.writeInteger(UInt8(b ? 1 : 0))
                case (.bytea, let d as Data): out.writeBytes(d)
                case (.uuid, let u as UUID): withUnsafeBytes(of: u.uuid) { out.writeBytes($0) }
                default: written = false
                }
                if written {
                    out.setInteger(Int32(out.writerIndex - start - 4), at: start)
                } else {
                    out.setInteger(Int32(-1), at: start)
                    hasNull = true
                }
            }
            return hasNull
        }
    }
}

extension ServerSchema {
    /// A statement with its values.
    struct Bound {
        var sql: String
        var binds: PostgresBindings
    }

    /// The statements that put a body's column blocks into the tables, with their values bound
    /// as typed arrays: for each block, an insert that skips tombstones (a delete wins), and
    /// the same insert as an upsert for when a row is there already (from an earlier push of
    /// the same object: the caller runs it after the first fails on the key); then, once every
    /// block is in, the to-one references whose destination came after their object.
    struct InsertStatements: Sendable {
        var inserts: [(Bound, upsert: String)] = []
        var references: [Bound] = []
    }

    func insertStatements(_ blocks: [InsertColumns]) throws -> InsertStatements {
        var inserts: [(Bound, upsert: String)] = []
        var references: [Bound] = []
        for block in blocks {
            guard let table = tables[block.entity], !block.ids.isEmpty else { continue }
            let t = name(table.entity)
            var binds = PostgresBindings()
            try binds.append(ColumnArray(uuids: block.ids), context: .default)
            var columns = ["id"]
            var arguments = ["$1::uuid[]"]
            var values = ["u.c0"]
            for column in table.columns {
                switch column.kind {
                case .attribute(let type):
                    guard let n = block.attributeNames.firstIndex(of: column.name) else { continue }
                    try binds.append(ColumnArray(block.attributes[n], type: type), context: .default)
                    let c = "u.c\(arguments.count)"
                    values.append(type == .date ? Self.fromRecord(c, .date) : c)
                case .toOne(let destination, let foreignKey):
                    guard let n = block.toOneNames.firstIndex(of: column.name) else { continue }
                    try binds.append(ColumnArray(uuids: block.toOne[n]), context: .default)
                    let c = "u.c\(arguments.count)"
                    let checked = foreignKey && tables[destination] != nil
                    values.append(checked ? "(SELECT d.id FROM \(name(destination)) d WHERE d.id = \(c))" : c)
                    if checked {
                        // A destination inserted after its object (a later block, or none yet):
                        // the reference goes in once every block is.
                        var b = PostgresBindings()
                        try b.append(ColumnArray(uuids: block.ids), context: .default)
                        try b.append(ColumnArray(uuids: block.toOne[n]), context: .default)
                        references.append(
                            Bound(
                                sql: """
                                    UPDATE \(t) AS t SET \(quoted(column.name)) = u.c1
                                    FROM unnest($1::uuid[], $2::uuid[]) AS u(c0, c1)
                                    WHERE t.id = u.c0 AND u.c1 IS NOT NULL AND t.\(quoted(column.name)) IS NULL
                                      AND EXISTS (SELECT 1 FROM \(name(destination)) d WHERE d.id = u.c1)
                                    """, binds: b))
                    }
                case .order:
                    continue
                }
                columns.append(quoted(column.name))
                arguments.append(
                    "$\(arguments.count + 1)::"
                        + {
                            if case .attribute(let type) = column.kind { return ColumnArray.sqlType(type) }
                            return "uuid[]"
                        }())
            }
            let aliases = (0..<arguments.count).map { "c\($0)" }.joined(separator: ", ")
            let insert = """
                INSERT INTO \(t) (\(columns.joined(separator: ", ")))
                SELECT \(values.joined(separator: ", ")) FROM unnest(\(arguments.joined(separator: ", "))) AS u(\(aliases))
                WHERE NOT EXISTS (SELECT 1 FROM \(tombstones) z WHERE z.id = u.c0)
                """
            let updates = columns.dropFirst().map { "\($0) = EXCLUDED.\($0)" }.joined(separator: ", ")
            inserts.append(
                (
                    Bound(sql: insert, binds: binds),
                    upsert: insert + "\nON CONFLICT (id) DO \(updates.isEmpty ? "NOTHING" : "UPDATE SET \(updates)")"
                ))
        }
        return InsertStatements(inserts: inserts, references: references)
    }
}

/// A body ready to send: its text and the statements of its inserted columns, made where the
/// body is (for a first push, on the thread that makes the parts, not on the sending task).
struct PreparedBody: Sendable {
    var text: String
    var count: Int
    var summary: BodySummary
    var inserts: ServerSchema.InsertStatements

    init(_ body: BodyWriter, layout: ServerSchema) throws {
        text = body.finished()
        count = body.count
        summary = body.summary
        inserts = try layout.insertStatements(body.inserts)
    }
}
