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

    /// A fixture on the server of LOGBOOK_POSTGRES_URL, or on the one `url` names (its
    /// superuser's URL).
    init(scopes: Int = 1, url: String? = nil) async throws {
        guard let url = url ?? Self.adminURL else {
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
    func store(scope: Int = 0, configure: (inout SyncConfiguration) -> Void = { _ in }) throws -> (
        PersistentContainer, SyncEngine
    ) {
        let store = TemporaryStore()
        try FileManager.default.createDirectory(atPath: store.directory, withIntermediateDirectories: true)
        stores.append(store)
        return try open(store, scope: scope, configure: configure)
    }

    /// Another engine for `container` (a store of this fixture), as a second process's would be.
    func engine(
        for container: PersistentContainer, scope: Int = 0, configure: (inout SyncConfiguration) -> Void = { _ in }
    )
        throws -> SyncEngine
    {
        var configuration = try SyncConfiguration(url: url(scope: scope), schema: schema)
        configure(&configuration)
        return try SyncEngine(container: container, configuration: configuration)
    }

    /// Store `index` opened again (after its container was closed), with a new engine.
    func reopen(_ index: Int, scope: Int = 0) throws -> (PersistentContainer, SyncEngine) {
        try open(stores[index], scope: scope)
    }

    private func open(
        _ store: TemporaryStore, scope: Int, configure: (inout SyncConfiguration) -> Void = { _ in }
    ) throws -> (PersistentContainer, SyncEngine) {
        var options = ContainerOptions()
        options.persistentHistoryTracking = true
        options.historyRecordsMemberChanges = true
        let container = try PersistentContainer(name: "Sync", model: model, directory: store.path, options: options)
        containers.append(container)
        return (container, try engine(for: container, scope: scope, configure: configure))
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

    /// Runs `body` with a new fixture, torn down after it whether it throws or not.
    static func with(scopes: Int = 1, _ body: (SyncFixture) async throws -> Void) async throws {
        let f = try await SyncFixture(scopes: scopes)
        do {
            try await body(f)
        } catch {
            await f.tearDown()
            throw error
        }
        await f.tearDown()
    }

    func tearDown() async {
        for c in containers { try? c.close() }
        // LOGBOOK_SYNC_KEEP=1 keeps the server's schema, to read after a failure.
        if ProcessInfo.processInfo.environment["LOGBOOK_SYNC_KEEP"] != nil {
            print("kept schema \(schema)")
            return
        }
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

@Suite(.serialized) struct SyncConflictTests {
    /// Two stores change the same object offline: different properties both stay; the same
    /// property ends as the store that pushed last set it; a delete wins over an update; to-many
    /// memberships merge member by member — and every store, and the server, end the same.
    @Test func offlineChangesMergeByPropertyAndAllStoresConverge() async throws {
        let f = try await SyncFixture()
        do {
            let (a, syncA) = try f.store()
            let (b, syncB) = try f.store()
            let c = a.newContext(confinement: ())
            let item = try insert(c, "Item", ["name": "shared", "note": "first"])
            try insert(c, "Item", ["name": "doomed"])
            let red = try insert(c, "Tag", ["code": "red"])
            try insert(c, "Tag", ["code": "blue"])
            try item.add(red, toRelationship: "tags")
            try c.save()
            try await syncA.sync()
            try await syncB.sync()

            // Offline, both.
            let ca = a.newContext(confinement: ())
            let cb = b.newContext(confinement: ())
            try find(ca, "Item", "name", "shared").setValue(true, forKey: "done")
            try find(cb, "Item", "name", "shared").setValue(Int64(7), forKey: "count")
            try find(ca, "Item", "name", "shared").setValue("from a", forKey: "note")
            try find(cb, "Item", "name", "shared").setValue("from b", forKey: "note")
            ca.delete(try find(ca, "Item", "name", "doomed"))
            try find(cb, "Item", "name", "doomed").setValue("renamed", forKey: "note")
            try find(ca, "Item", "name", "shared").add(try find(ca, "Tag", "code", "blue"), toRelationship: "tags")
            try find(cb, "Item", "name", "shared").remove(try find(cb, "Tag", "code", "red"), fromRelationship: "tags")
            try ca.save()
            try cb.save()

            // A pushes first, then B: B's note is the last in the server's order.
            try await syncA.sync()
            try await syncB.sync()
            try await syncA.sync()
            let expected = try dump(a)
            let inB = try dump(b)
            #expect(inB == expected, "a: \(expected)\nb: \(inB)")
            let shared = try #require(expected.first { $0.hasPrefix("Item name=shared") })
            #expect(shared.contains("done=true") && shared.contains("count=7") && shared.contains("note=from b"))
            #expect(shared.contains("tags=[\"blue\"]"), "red removed by B, blue added by A")
            #expect(!expected.contains { $0.contains("name=doomed") }, "the delete won")
            #expect(try await f.rows("SELECT note FROM \(f.schema).\"Item\"") == ["from b"])
            #expect(try await f.rows("SELECT count(*)::text FROM \(f.schema).\"Item.tags\"") == ["1"])
        } catch {
            await f.tearDown()
            throw error
        }
        await f.tearDown()
    }

    /// A push done twice (as after a crash between the server's commit and the client hearing
    /// of it) writes nothing twice; a store pushes what it saved offline once the server is back.
    @Test func aRepeatedPushWritesNothingTwice() async throws {
        let f = try await SyncFixture()
        do {
            let (a, syncA) = try f.store()
            let c = a.newContext(confinement: ())
            for n in 0..<5 {
                try insert(c, "Item", ["name": "n\(n)"])
                try c.save()
            }
            try await syncA.push()
            let rows = try await f.rows("SELECT count(*)::text FROM \(f.schema).logbook_changes")
            let again = try await syncA.push()
            #expect(again.pushedTransactions == 0)
            #expect(try await f.rows("SELECT count(*)::text FROM \(f.schema).logbook_changes") == rows)
            // The same rows sent again by hand change nothing.
            try insert(c, "Item", ["name": "later"])
            try c.save()
            let status = try await syncA.status()
            #expect(status.pendingTransactions == 1)
            try await syncA.push()
            #expect(try await syncA.status().pendingTransactions == 0)
            #expect(try await f.rows("SELECT count(*)::text FROM \(f.schema).\"Item\"") == ["6"])
        } catch {
            await f.tearDown()
            throw error
        }
        await f.tearDown()
    }

    /// Each scope (role) sees only its own rows, enforced by the server: another role's store
    /// pulls nothing of them, and reads none of them in SQL.
    @Test func aScopeSeesOnlyItsOwnRows() async throws {
        let f = try await SyncFixture(scopes: 2)
        do {
            let (a, syncA) = try f.store(scope: 0)
            let (b, syncB) = try f.store(scope: 1)
            let c = a.newContext(confinement: ())
            try insert(c, "Item", ["name": "private to scope 0"])
            try c.save()
            try await syncA.sync()
            let pulled = try await syncB.sync()
            #expect(pulled.appliedChanges == 0)
            #expect(try b.newContext(confinement: ()).count(for: FetchRequest<ManagedObject>(entityName: "Item")) == 0)
            #expect(try await f.rows("SELECT name FROM \(f.schema).\"Item\"", as: f.url(scope: 1)).isEmpty)
            #expect(
                try await f.rows("SELECT name FROM \(f.schema).\"Item\"", as: f.url(scope: 0)) == ["private to scope 0"]
            )
            #expect(try await f.rows("SELECT scope FROM \(f.schema).\"Item\"") == [f.roles[0]])
            // Writing a row of another scope is refused by the server.
            await #expect(throws: SyncError.self) {
                _ = try await f.rows(
                    "INSERT INTO \(f.schema).\"Item\" (id, scope, name) VALUES (gen_random_uuid(), '\(f.roles[0])', 'x') RETURNING name",
                    as: f.url(scope: 1))
            }
        } catch {
            await f.tearDown()
            throw error
        }
        await f.tearDown()
    }

    /// Bad input is a clear error, without the password, and the store keeps its work: a wrong
    /// password, a server that is not there, a table altered by hand, a change log with a gap.
    @Test func badInputIsAClearErrorAndLosesNothing() async throws {
        let f = try await SyncFixture()
        do {
            let (a, syncA) = try f.store()
            let c = a.newContext(confinement: ())
            try insert(c, "Item", ["name": "kept"])
            try c.save()
            let e = f.admin.endpoint
            let wrong = try SyncEngine(
                container: a,
                configuration: SyncConfiguration(
                    url: "postgres://\(f.roles[0]):not-the-secret@\(e.host):\(e.port)/\(e.database)", schema: f.schema))
            do {
                try await wrong.push()
                Issue.record("a wrong password was accepted")
            } catch let error as SyncError {
                #expect(error.code == .authentication)
                #expect(!error.description.contains("not-the-secret"))
            }
            let nowhere = try SyncEngine(
                container: a,
                configuration: SyncConfiguration(url: "postgres://u:secret-pw@127.0.0.1:1/db", schema: f.schema))
            do {
                try await nowhere.push()
                Issue.record("an unreachable server was reached")
            } catch let error as SyncError {
                #expect(error.code == .unreachable)
                #expect(!error.description.contains("secret-pw"))
            }
            #expect(throws: SyncError.self) { try SyncConfiguration(url: "mysql://x") }

            try await syncA.push()
            // A column dropped by hand: a clear error for a new engine, nothing sent.
            try await f.adminSQL("ALTER TABLE \(f.schema).\"Item\" DROP COLUMN note")
            let (_, syncB) = try f.store()
            do {
                try await syncB.pull()
                Issue.record("a table altered by hand went unnoticed")
            } catch let error as SyncError {
                #expect(error.code == .incompatibleSchema)
                #expect(error.message.contains("note"))
            }
            // Fixed by the owner: sync goes on.
            try await SyncServer.prepare(model: f.model, configuration: f.admin, scopes: f.roles)
            let (b, syncC) = try f.store()
            try await syncC.pull()
            #expect(try dump(b) == dump(a))

            // A gap in the change log: a store that has not read past it stops there.
            try insert(c, "Item", ["name": "second"])
            try c.save()
            try await syncA.push()
            try insert(c, "Item", ["name": "third"])
            try c.save()
            try await syncA.push()
            try await f.adminSQL("DELETE FROM \(f.schema).logbook_changes WHERE scope_seq = 2")
            let (d, syncD) = try f.store()
            do {
                try await syncD.pull()
                Issue.record("a gap went unnoticed")
            } catch let error as SyncError {
                #expect(error.code == .gap)
            }
            // It keeps what it pulled before the gap, and its own work.
            #expect(try d.newContext(confinement: ()).count(for: FetchRequest<ManagedObject>(entityName: "Item")) == 1)
            #expect(try a.newContext(confinement: ()).count(for: FetchRequest<ManagedObject>(entityName: "Item")) == 3)
        } catch {
            await f.tearDown()
            throw error
        }
        await f.tearDown()
    }

    /// With the background task on, a save in one store reaches a context of another that
    /// merges automatically, without a call (the server's NOTIFY wakes the other).
    @Test func theBackgroundTaskCarriesASaveToAnotherStore() async throws {
        let f = try await SyncFixture()
        do {
            let (a, syncA) = try f.store()
            let (b, syncB) = try f.store()
            await syncA.start(interval: .seconds(2))
            await syncB.start(interval: .seconds(2))
            let reader = b.newContext(concurrencyType: .privateQueue)
            reader.automaticallyMergesChangesFromOtherContexts = true
            let c = a.newContext(confinement: ())
            var latencies: [Double] = []
            for n in 0..<10 {
                try insert(c, "Item", ["name": "bg\(n)"])
                let t0 = Date()
                try c.save()
                var seen = false
                for _ in 0..<1000 {
                    seen = try reader.performAndWait {
                        try reader.count(for: FetchRequest<ManagedObject>(entityName: "Item")) == n + 1
                    }
                    if seen { break }
                    try await Task.sleep(for: .milliseconds(2))
                }
                #expect(seen, "save \(n) reached the other store")
                latencies.append(Date().timeIntervalSince(t0))
            }
            await syncA.stop()
            await syncB.stop()
            let errorA = await syncA.lastError
            let errorB = await syncB.lastError
            #expect(errorA == nil && errorB == nil, "\(String(describing: errorA)) \(String(describing: errorB))")
            print("sync latency ms:", latencies.map { Int($0 * 1000) })
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
