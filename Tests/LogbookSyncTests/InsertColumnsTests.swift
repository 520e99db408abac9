import Foundation
import LogbookGraph
import Logging
import PostgresNIO
import Testing

@testable import LogbookSync

/// Inserted objects travel as columns (a body's `"i"`, docs/sync.md): the body reads back as
/// the objects written, and the server puts them into its tables from typed arrays — a row it
/// has already by an upsert, a reference to an object of a later block once that block is in.
@Suite struct InsertColumnsTests {
    @Test func insertsTravelAsColumnsAndReadBackAsTheObjectsWritten() throws {
        let ids = (0..<6).map { _ in UUID() }
        let folder = UUID()
        var writer = BodyWriter()
        for (i, id) in ids.prefix(3).enumerated() {
            writer.object(
                entity: "Item", id: id, op: "i",
                attributes: [("name", "item \(i)"), ("count", i == 1 ? nil : Int64(i)), ("ratio", Double.nan)],
                toOne: [("folder", i == 2 ? nil : folder)])
        }
        writer.object(entity: "Folder", id: folder, op: "i", attributes: [("name", "F")], toOne: [])
        // Another set of properties than the entity's first insert, and an object named twice:
        // each goes as an object of its own.
        writer.object(entity: "Item", id: ids[3], op: "i", attributes: [("name", "short")], toOne: [])
        writer.object(
            entity: "Item", id: ids[0], op: "i", attributes: [("name", "again"), ("count", nil), ("ratio", 1.0)],
            toOne: [("folder", nil)])
        writer.object(entity: "Item", id: ids[4], op: "u", attributes: [("name", "changed")], toOne: [])
        #expect(writer.count == 7)
        #expect(writer.summary.insertedColumns == ["Item", "Folder"])
        #expect(writer.summary.inserted == ["Item"] && writer.summary.updated == ["Item"])
        let text = writer.finished()
        #expect(text.contains("\"i\":[{\"e\":\"Item\",\"id\":["))

        let body = try Body(json: text)
        #expect(body.objects.count == 7)
        let byName = Dictionary(
            body.objects.map { (Body.value($0.attributes["name"]!, type: .string) as! String, $0) },
            uniquingKeysWith: { a, _ in a })
        for i in 0..<3 {
            let o = try #require(byName["item \(i)"])
            #expect(o.id == ids[i] && o.op == "i" && o.entity == "Item")
            #expect(Body.value(o.attributes["count"]!, type: .int64) as? Int64 == (i == 1 ? nil : Int64(i)))
            #expect((Body.value(o.attributes["ratio"]!, type: .double) as? Double)?.isNaN == true)
            #expect(o.toOne["folder"] == .some(i == 2 ? nil : folder))
        }
        #expect(byName["F"]?.entity == "Folder" && byName["F"]?.id == folder && byName["F"]?.toOne.isEmpty == true)
        #expect(byName["short"]?.attributes.count == 1 && byName["short"]?.op == "i")
        #expect(byName["again"]?.id == ids[0] && byName["changed"]?.op == "u")
    }

    @Test(arguments: [
        "{\"o\":[],\"m\":[],\"i\":[{\"e\":\"Item\",\"id\":[\"00000000-0000-0000-0000-000000000001\"],\"a\":{\"name\":[]}}]}",
        "{\"o\":[],\"m\":[],\"i\":[{\"id\":[],\"a\":{}}]}",
        "{\"o\":[],\"m\":[],\"i\":[{\"e\":\"Item\",\"id\":[],\"r\":{\"folder\":[null]}}]}",
        "{\"o\":[],\"m\":[],\"i\":[{\"e\":\"Item\",\"id\":[\"x\"]}]}"
    ])
    func malformedColumnsAreAClearError(_ text: String) {
        #expect(throws: SyncError.self) { try Body(json: text) }
    }

    /// Straight into the server's tables: nulls, every bit of a date and a double, bytes; a row
    /// the server has already (an upsert, after the plain insert fails on the key); a reference
    /// to an object of a later block; an id with a tombstone left out.
    @Test func theServerTakesTheColumnsAsTheJSONPathWould() async throws {
        try await SyncFixture.with { f in
            let layout = ServerSchema(model: f.model, schema: f.schema)
            let (folder, gone) = (UUID(), UUID())
            let items = [UUID(), UUID()]
            let when = Date(timeIntervalSinceReferenceDate: Double(bitPattern: 0x41C2_D4B1_2345_6789))
            func itemBlock(_ names: [String?]) -> InsertColumns {
                var b = InsertColumns(
                    entity: "Item", attributeNames: ["name", "done", "count", "when", "ratio", "payload"],
                    toOneNames: ["folder"])
                b.ids = items + [gone]
                let name: [(any Sendable)?] = (names + ["gone"]).map { $0 }
                b.attributes = [
                    name, [true, nil, false], [Int64.min, nil, Int64(1)], [when, nil, when], [0.1, nil, 1.0],
                    [Data([0, 1, 255]), nil, Data()]
                ]
                b.toOne = [[folder, nil, folder]]
                return b
            }
            var folders = InsertColumns(entity: "Folder", attributeNames: ["name"], toOneNames: [])
            folders.ids = [folder]
            folders.attributes = [["Inbox"]]
            try await f.adminSQL(
                "INSERT INTO \(layout.tombstones) (id, entity, scope_seq) VALUES ('\(gone.uuidString)', 'Item', 1)")
            func apply(_ blocks: [InsertColumns]) async throws {
                let statements = try layout.insertStatements(blocks)
                try await SyncServer.withConnection(f.admin, doing: "test") { c, logger in
                    try await c.withTransaction(logger: logger) { t in
                        try await SyncEngine.insertColumns(statements, t, logger)
                    }
                }
            }
            // The items' block before their folder's: the reference is set once the folder is in.
            try await apply([itemBlock(["one", nil]), folders])
            let t = "\(f.schema).\"Item\""
            #expect(
                try await f.rows(
                    """
                    SELECT concat_ws('|', coalesce(name, 'NULL'), done, count, "when" IS NOT NULL, ratio, encode(payload, 'hex'), (SELECT name FROM \(f.schema)."Folder" d WHERE d.id = i.folder))
                    FROM \(t) i ORDER BY name NULLS LAST
                    """)
                    == ["one|t|-9223372036854775808|t|0.1|0001ff|Inbox", "NULL|f"])
            // The JSON path's date for the same value, for the same bits.
            #expect(
                try await f.rows(
                    "SELECT (timestamptz '2001-01-01 00:00:00+00' + make_interval(secs => \(when.timeIntervalSinceReferenceDate)))::text"
                )
                    == f.rows("SELECT \"when\"::text FROM \(t) WHERE name = 'one'"))
            #expect(try await f.rows("SELECT count(*)::text FROM \(t) WHERE id = '\(gone.uuidString)'") == ["0"])

            // Pushed again (rows there already): the values of the later push.
            try await apply([itemBlock(["uno", "dos"])])
            #expect(try await f.rows("SELECT name FROM \(t) ORDER BY name") == ["dos", "uno"])
            #expect(try await f.rows("SELECT count(*)::text FROM \(t) WHERE folder IS NOT NULL") == ["1"])
        }
    }
}

/// The server's version: PostgreSQL 12 or later (CI runs the sync tests on 15 and 16).
@Suite struct ServerVersionTests {
    /// A server of a major version older than the one needed is refused with a clear error
    /// (the running server, checked against a minimum above its own version).
    @Test func aServerOlderThanNeededIsRefusedClearly() async throws {
        try await SyncFixture.with { f in
            let own = try #require(Int(try await f.rows("SHOW server_version_num").first ?? ""))
            #expect(SyncServer.versionName(String(own)).hasPrefix("\(own / 10_000)."))
            try await SyncServer.withConnection(f.admin, doing: "test") { c, logger in
                try await SyncServer.checkVersion(c, logger, f.admin.endpoint)
                do {
                    try await SyncServer.checkVersion(c, logger, f.admin.endpoint, minimum: own + 10_000)
                    Issue.record("a server older than the minimum was accepted")
                } catch let e as SyncError {
                    #expect(e.code == .incompatibleServer)
                    #expect(e.description.contains("needs \(own / 10_000 + 1) or later"), "\(e)")
                }
            }
        }
    }
}
