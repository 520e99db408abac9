import Foundation
import LogbookGraph
import LogbookTestSupport
import Logging
import PostgresNIO
import Testing

@testable import LogbookSync

/// A schema and a scope role of their own on the test server (LOGBOOK_POSTGRES_URL, the
/// superuser's URL that .ci/test starts), dropped when the test ends.
final class SyncFixture: @unchecked Sendable {
    let admin: SyncConfiguration
    let schema: String
    var roles: [String] = []
    let model: ManagedObjectModel
    var stores: [TemporaryStore] = []
    var containers: [PersistentContainer] = []

    static let adminURL: String? = ProcessInfo.processInfo.environment["LOGBOOK_POSTGRES_URL"]

    init(scopes: Int = 1) async throws {
        guard let url = Self.adminURL else {
            throw SyncError(
                .notConfigured, "LOGBOOK_POSTGRES_URL is not set: run the tests with .ci/test, which starts a server")
        }
        let suffix = UUID().uuidString.prefix(8).lowercased()
        schema = "t_\(suffix)"
        admin = try SyncConfiguration(url: url, schema: schema)
        model = try Self.makeModel()
        for i in 0..<scopes {
            let role = "r_\(suffix)_\(i)"
            try await adminSQL("CREATE ROLE \(quoted(role)) LOGIN PASSWORD 'pw-\(role)'")
            roles.append(role)
        }
        try await SyncServer.prepare(model: model, configuration: admin, scopes: roles)
    }

    static func makeModel() throws -> ManagedObjectModel {
        try ManagedObjectModel {
            EntityDescription("Folder") {
                AttributeDescription("name", .string)
                RelationshipDescription(
                    "items", to: "Item", inverse: "folder", toMany: true, ordered: true, deleteRule: .nullify)
            }
            EntityDescription("Item") {
                AttributeDescription("name", .string)
                AttributeDescription("done", .bool, default: false)
                AttributeDescription("count", .int64, optional: true)
                AttributeDescription("when", .date, optional: true)
                AttributeDescription("ratio", .double, optional: true)
                AttributeDescription("payload", .data, optional: true)
                AttributeDescription("note", .string, optional: true)
                RelationshipDescription("folder", to: "Folder", inverse: "items", deleteRule: .nullify)
                RelationshipDescription("tags", to: "Tag", inverse: "items", toMany: true, deleteRule: .nullify)
            }
            EntityDescription("Tag") {
                AttributeDescription("code", .string)
                RelationshipDescription("items", to: "Item", inverse: "tags", toMany: true, deleteRule: .nullify)
            }
        }
    }

    /// The URL a scope role logs in with.
    func url(scope: Int = 0) throws -> String {
        let e = admin.endpoint
        return "postgres://\(roles[scope]):pw-\(roles[scope])@\(e.host):\(e.port)/\(e.database)"
    }

    /// A new store with a sync engine for scope `scope`.
    func store(scope: Int = 0) throws -> (PersistentContainer, SyncEngine) {
        let store = TemporaryStore()
        try FileManager.default.createDirectory(atPath: store.directory, withIntermediateDirectories: true)
        stores.append(store)
        var options = ContainerOptions()
        options.persistentHistoryTracking = true
        options.historyRecordsMemberChanges = true
        let container = try PersistentContainer(name: "Sync", model: model, directory: store.path, options: options)
        containers.append(container)
        return (
            container,
            try SyncEngine(
                container: container, configuration: SyncConfiguration(url: url(scope: scope), schema: schema))
        )
    }

    /// Runs SQL as the superuser.
    func adminSQL(_ sql: String) async throws {
        try await SyncServer.withConnection(admin, doing: "test setup") { c, logger in
            try await c.query(PostgresQuery(unsafeSQL: sql), logger: logger)
        }
    }

    /// The first column of each row of a query, as text, run as `url`'s role (the superuser's
    /// by default).
    func rows(_ sql: String, as url: String? = nil) async throws -> [String] {
        let configuration = try url.map { try SyncConfiguration(url: $0, schema: schema) } ?? admin
        return try await SyncServer.withConnection(configuration, doing: "test query") { c, logger in
            var out: [String] = []
            for try await (text) in try await c.query(PostgresQuery(unsafeSQL: sql), logger: logger).decode(
                String?.self)
            {
                out.append(text ?? "NULL")
            }
            return out
        }
    }

    func tearDown() async {
        for c in containers { try? c.close() }
        try? await adminSQL("DROP SCHEMA IF EXISTS \(quoted(schema)) CASCADE")
        for role in roles { try? await adminSQL("DROP ROLE IF EXISTS \(quoted(role))") }
    }
}

/// What a store holds, as sorted lines keyed by names (the objects' keys differ by store).
func dump(_ container: PersistentContainer) throws -> [String] {
    let c = container.newContext(concurrencyType: .confinement)
    var lines: [String] = []
    for f in try c.fetch(FetchRequest<ManagedObject>(entityName: "Folder")) {
        let items = try f.orderedObjects(forKey: "items").map { try $0.value(forKey: "name") as? String ?? "?" }
        lines.append("Folder \(try f.value(forKey: "name") as? String ?? "?") items=\(items)")
    }
    for i in try c.fetch(FetchRequest<ManagedObject>(entityName: "Item")) {
        let tags = try i.objects(forKey: "tags").map { try $0.value(forKey: "code") as? String ?? "?" }.sorted()
        let folder = try (i.value(forKey: "folder") as? ManagedObject).map {
            try $0.value(forKey: "name") as? String ?? "?"
        }
        let values = try ["name", "done", "count", "when", "ratio", "payload", "note"].map { key -> String in
            let v = try i.value(forKey: key)
            if let d = v as? Date { return "\(key)=\(d.timeIntervalSinceReferenceDate.bitPattern)" }
            if let d = v as? Double { return "\(key)=\(d.bitPattern)" }
            return "\(key)=\(v.map { "\($0)" } ?? "nil")"
        }
        lines.append("Item \(values.joined(separator: " ")) folder=\(folder ?? "nil") tags=\(tags)")
    }
    for t in try c.fetch(FetchRequest<ManagedObject>(entityName: "Tag")) {
        lines.append("Tag \(try t.value(forKey: "code") as? String ?? "?")")
    }
    return lines.sorted()
}

@discardableResult
func insert(_ c: ManagedObjectContext, _ entity: String, _ values: [String: Any?]) throws -> ManagedObject {
    let o = try c.insertNewObject(forEntityName: entity)
    for (k, v) in values { try o.setValue(v, forKey: k) }
    return o
}

func find(_ c: ManagedObjectContext, _ entity: String, _ key: String, _ value: String) throws -> ManagedObject {
    var request = FetchRequest<ManagedObject>(entityName: entity)
    request.predicate = try FetchPredicate(format: "\(key) == %@", value)
    guard let o = try c.fetch(request).first else { throw SyncError(.store, "no \(entity) with \(key) \(value)") }
    return o
}

@Suite(.serialized) struct SyncTests {
    @Test func twoStoresConvergeAndTheTablesReadInSQL() async throws {
        let f = try await SyncFixture()
        do {
            let (a, syncA) = try f.store()
            let (b, syncB) = try f.store()
            let c = a.newContext(concurrencyType: .confinement)
            let folder = try insert(c, "Folder", ["name": "Inbox"])
            let when = Date(timeIntervalSinceReferenceDate: Double(bitPattern: 0x41C2_D4B1_2345_6789))
            let one = try insert(
                c, "Item",
                [
                    "name": "one", "done": true, "count": Int64.max, "when": when, "ratio": 0.1,
                    "payload": Data([0, 1, 2, 255]), "note": "quote \" and \\ and é"
                ])
            let two = try insert(c, "Item", ["name": "two"])
            let tag = try insert(c, "Tag", ["code": "red"])
            try folder.insert(two, at: 0, inRelationship: "items")
            try folder.insert(one, at: 1, inRelationship: "items")
            try one.add(tag, toRelationship: "tags")
            try c.save()

            let pushed = try await syncA.sync()
            #expect(pushed.pushedTransactions == 1)
            try await syncB.sync()
            #expect(try dump(b) == dump(a))
            #expect(try dump(b).contains { $0.hasPrefix("Folder Inbox items=[\"two\", \"one\"]") })

            // B changes; A pulls it.
            let d = b.newContext(confinement: ())
            let bOne = try find(d, "Item", "name", "one")
            try bOne.setValue("uno", forKey: "name")
            try bOne.add(try insert(d, "Tag", ["code": "blue"]), toRelationship: "tags")
            try d.save()
            try await syncB.sync()
            try await syncA.sync()
            #expect(try dump(a) == dump(b))
            #expect(try dump(a).contains { $0.contains("name=uno") && $0.contains("tags=[\"blue\", \"red\"]") })

            // The server's tables, read without Logbook.
            #expect(try await f.rows("SELECT name FROM \(f.schema).\"Item\" ORDER BY name") == ["two", "uno"])
            #expect(
                try await f.rows("SELECT count::text FROM \(f.schema).\"Item\" WHERE name = 'uno'") == ["\(Int64.max)"])
            #expect(
                try await f.rows(
                    "SELECT t.code FROM \(f.schema).\"Item.tags\" j JOIN \(f.schema).\"Tag\" t ON t.id = j.member ORDER BY 1"
                )
                    == ["blue", "red"])
            #expect(
                try await f.rows(
                    "SELECT f.name FROM \(f.schema).\"Item\" i JOIN \(f.schema).\"Folder\" f ON f.id = i.folder WHERE i.name = 'two'"
                )
                    == ["Inbox"])
            #expect(
                try await f.rows("SELECT array_length(items, 1)::text FROM \(f.schema).\"Folder\"") == ["2"])
        } catch {
            await f.tearDown()
            throw error
        }
        await f.tearDown()
    }
}

extension PersistentContainer {
    func newContext(confinement: Void) -> ManagedObjectContext { newContext(concurrencyType: .confinement) }
}
