import Foundation
import LogbookGraph
import Logging
import PostgresNIO

/// The server's tables for a model, in one schema: the change log, the tombstones of deleted
/// objects, one table per concrete entity with a typed column per attribute and to-one
/// relationship (a foreign key where the destination has one table), an array column with
/// the order of each ordered relationship, and a join table per many-to-many (or
/// one-sided) to-many relationship. Every row carries its scope (the role that wrote it), and
/// row-level security keeps each role to its own rows.
struct ServerSchema: Sendable {
    struct Column: Sendable, Hashable {
        enum Kind: Sendable, Hashable {
            case attribute(AttributeType)
            /// A to-one relationship to `destination` (a foreign key when it has a table of its
            /// own and no sub-entities).
            case toOne(destination: String, foreignKey: Bool)
            /// The order of an ordered to-many relationship (an array of the members' ids).
            case order(relationship: String)
        }
        var name: String
        var sqlType: String
        var kind: Kind
    }

    struct Table: Sendable {
        var entity: String
        var columns: [Column]
    }

    /// A to-many relationship whose membership is a table of its own (no to-one inverse holds
    /// it): `owner`'s relationship `relationship` to `member`; for a many-to-many pair, the
    /// relationship whose entity and name sort first, and `inverse` the other side.
    struct Join: Sendable {
        var table: String
        var owner: String
        var relationship: String
        var member: String
        var inverse: String?
        var foreignKeys: Bool
    }

    let schema: String
    var tables: [String: Table] = [:]
    /// By "Entity.relationship" of either side.
    var joins: [String: Join] = [:]
    /// Entities whose tables a to-one may point into (the destination and its sub-entities).
    var concrete: [String: [String]] = [:]

    init(model: ManagedObjectModel, schema: String) {
        self.schema = schema
        let entities = model.flattenedEntities
        let byName = Dictionary(entities.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })
        var concreteMap: [String: [String]] = [:]
        for e in entities {
            concreteMap[e.name] = ([e.name] + model.subentities(of: e.name)).filter { byName[$0]?.isAbstract == false }
        }
        concrete = concreteMap
        let hasOneTable = { (name: String) -> Bool in concreteMap[name] == [name] }
        for e in entities where !e.isAbstract {
            var columns: [Column] = []
            for a in e.attributes where !a.isTransient {
                columns.append(Column(name: a.name, sqlType: Self.sqlType(a.type), kind: .attribute(a.type)))
            }
            for r in e.relationships {
                if !r.isToMany {
                    columns.append(
                        Column(
                            name: r.name, sqlType: "uuid",
                            kind: .toOne(destination: r.destination, foreignKey: hasOneTable(r.destination))))
                    continue
                }
                if r.isOrdered {
                    columns.append(Column(name: r.name, sqlType: "uuid[]", kind: .order(relationship: r.name)))
                }
                let inverse = r.inverse.flatMap { i in byName[r.destination]?.relationships.first { $0.name == i } }
                if let inverse, !inverse.isToMany { continue }  // the to-one holds the membership
                // A many-to-many pair has one table, named after the side that sorts first.
                let mine = "\(e.name).\(r.name)"
                let theirs = inverse.map { "\(r.destination).\($0.name)" }
                let ownerSide = theirs.map { mine <= $0 } ?? true
                let table = ownerSide ? mine : theirs!
                let join = Join(
                    table: table, owner: ownerSide ? e.name : r.destination,
                    relationship: ownerSide ? r.name : inverse!.name, member: ownerSide ? r.destination : e.name,
                    inverse: ownerSide ? inverse?.name : r.name,
                    foreignKeys: hasOneTable(e.name) && hasOneTable(r.destination))
                joins[mine] = join
            }
            tables[e.name] = Table(entity: e.name, columns: columns)
        }
    }

    static func sqlType(_ type: AttributeType) -> String {
        switch type {
        case .string, .url, .decimal: "text"
        case .int16, .int32, .int64: "bigint"
        case .double, .float: "double precision"
        case .bool: "boolean"
        case .date: "timestamptz"
        case .data, .transformable: "bytea"
        case .uuid: "uuid"
        }
    }

    func name(_ table: String) -> String { "\(quoted(schema)).\(quoted(table))" }
    var changes: String { name("logbook_changes") }
    var tombstones: String { name("logbook_tombstones") }
    var meta: String { name("logbook_meta") }
    /// The channel `NOTIFY`ed after each push.
    var channel: String { "logbook_\(schema)" }
    /// The advisory lock that serializes pushes (so that change numbers commit in order).
    var lockKey: Int64 {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in schema.utf8 {
            h ^= UInt64(b)
            h = h &* 0x100_0000_01b3
        }
        return Int64(bitPattern: h)
    }

    /// Every statement that creates what is missing (idempotent): the schema, the log, the
    /// tables and columns, the foreign keys, row-level security.
    func statements() -> [String] {
        var out = [
            "CREATE SCHEMA IF NOT EXISTS \(quoted(schema))",
            """
            CREATE TABLE IF NOT EXISTS \(meta) (key text PRIMARY KEY, value text NOT NULL)
            """,
            """
            CREATE TABLE IF NOT EXISTS \(changes) (
                seq bigserial PRIMARY KEY,
                scope text NOT NULL DEFAULT current_user,
                scope_seq bigint NOT NULL,
                store uuid NOT NULL,
                store_version bigint NOT NULL,
                part integer NOT NULL DEFAULT 0,
                more boolean NOT NULL DEFAULT false,
                author text,
                committed timestamptz NOT NULL DEFAULT now(),
                body jsonb NOT NULL,
                UNIQUE (store, store_version, part),
                UNIQUE (scope, scope_seq)
            )
            """,
            // Bodies are stored out of line without compression: a part of thousands of changes
            // compressed and decompressed at every push and pull cost more than its bytes.
            "ALTER TABLE \(changes) ALTER COLUMN body SET STORAGE EXTERNAL",
            """
            CREATE TABLE IF NOT EXISTS \(tombstones) (
                id uuid PRIMARY KEY, scope text NOT NULL DEFAULT current_user, entity text NOT NULL,
                scope_seq bigint NOT NULL)
            """
        ]
        for table in tables.values.sorted(by: { $0.entity < $1.entity }) {
            out.append(
                "CREATE TABLE IF NOT EXISTS \(name(table.entity)) (id uuid PRIMARY KEY, scope text NOT NULL DEFAULT current_user)"
            )
            for c in table.columns {
                out.append("ALTER TABLE \(name(table.entity)) ADD COLUMN IF NOT EXISTS \(quoted(c.name)) \(c.sqlType)")
            }
        }
        for join in Set(joins.values.map(\.table)).sorted() {
            let j = joins.values.first { $0.table == join }!
            out.append(
                """
                CREATE TABLE IF NOT EXISTS \(name(join)) (
                    owner uuid NOT NULL, member uuid NOT NULL, scope text NOT NULL DEFAULT current_user,
                    PRIMARY KEY (owner, member))
                """)
            if j.foreignKeys {
                out.append(foreignKey(table: join, column: "owner", to: j.owner, onDelete: "CASCADE"))
                out.append(foreignKey(table: join, column: "member", to: j.member, onDelete: "CASCADE"))
            }
        }
        for table in tables.values.sorted(by: { $0.entity < $1.entity }) {
            for c in table.columns {
                if case .toOne(let destination, true) = c.kind, tables[destination] != nil {
                    out.append(foreignKey(table: table.entity, column: c.name, to: destination, onDelete: "SET NULL"))
                }
            }
        }
        let all =
            ["logbook_changes", "logbook_tombstones"] + tables.keys.sorted() + Set(joins.values.map(\.table)).sorted()
        for t in all {
            out.append("ALTER TABLE \(name(t)) ENABLE ROW LEVEL SECURITY")
            out.append(
                """
                DO $$ BEGIN
                    IF NOT EXISTS (SELECT 1 FROM pg_policies WHERE schemaname = '\(schema.replacingOccurrences(of: "'", with: "''"))'
                                   AND tablename = '\(t.replacingOccurrences(of: "'", with: "''"))' AND policyname = 'logbook_scope') THEN
                        CREATE POLICY logbook_scope ON \(name(t)) USING (scope = current_user) WITH CHECK (scope = current_user);
                    END IF;
                END $$
                """)
        }
        return out
    }

    private func foreignKey(table: String, column: String, to destination: String, onDelete: String) -> String {
        let constraint = "fk_\(table)_\(column)".replacingOccurrences(of: "'", with: "''")
        return """
            DO $$ BEGIN
                IF NOT EXISTS (SELECT 1 FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
                               WHERE n.nspname = '\(schema.replacingOccurrences(of: "'", with: "''"))' AND c.conname = '\(constraint)') THEN
                    ALTER TABLE \(name(table)) ADD CONSTRAINT \(quoted(constraint)) FOREIGN KEY (\(quoted(column)))
                        REFERENCES \(name(destination))(id) ON DELETE \(onDelete) DEFERRABLE INITIALLY DEFERRED;
                END IF;
            END $$
            """
    }

    /// Every column the tables must have, by table, with its type as `information_schema`
    /// names it.
    func expectedColumns() -> [String: [String: String]] {
        var out: [String: [String: String]] = [:]
        func informationType(_ sql: String) -> String {
            switch sql {
            case "uuid[]": "ARRAY"
            case "timestamptz": "timestamp with time zone"
            default: sql
            }
        }
        out["logbook_changes"] = [
            "seq": "bigint", "scope": "text", "scope_seq": "bigint", "store": "uuid", "store_version": "bigint",
            "part": "integer", "more": "boolean", "body": "jsonb"
        ]
        out["logbook_tombstones"] = ["id": "uuid", "scope": "text", "entity": "text", "scope_seq": "bigint"]
        for t in tables.values {
            var columns = ["id": "uuid", "scope": "text"]
            for c in t.columns { columns[c.name] = informationType(c.sqlType) }
            out[t.entity] = columns
        }
        for j in joins.values { out[j.table] = ["owner": "uuid", "member": "uuid", "scope": "text"] }
        return out
    }
}

/// Setting up the server side (with the URL of a role that may create schemas and roles).
public enum SyncServer {
    /// Creates the schema, the change log, a table per entity (adding the columns a lightweight
    /// model change added), the foreign keys and the row-level security policies; `scopes`
    /// names roles that may sync (each is granted what it needs, and sees only its own rows).
    /// Idempotent. A column of another type than the model's is an `.incompatibleSchema`
    /// error, and nothing is changed.
    ///
    /// ```swift
    /// try await SyncServer.prepare(
    ///     model: model, configuration: SyncConfiguration(url: adminURL), scopes: ["alice", "bob"])
    /// ```
    public static func prepare(model: ManagedObjectModel, configuration: SyncConfiguration, scopes: [String] = [])
        async throws
    {
        let layout = ServerSchema(model: model, schema: configuration.schema)
        try await withConnection(configuration, doing: "preparing the server") { connection, logger in
            try await checkVersion(connection, logger, configuration.endpoint)
            // Refuse before changing anything when a column has another type.
            try await checkColumns(layout, connection, logger, requireAll: false)
            try await connection.withTransaction(logger: logger) { c in
                for statement in layout.statements() {
                    try await c.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
                for scope in scopes {
                    let role = quoted(scope)
                    try await c.query(
                        PostgresQuery(unsafeSQL: "GRANT USAGE ON SCHEMA \(quoted(layout.schema)) TO \(role)"),
                        logger: logger)
                    try await c.query(
                        PostgresQuery(
                            unsafeSQL:
                                "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA \(quoted(layout.schema)) TO \(role)"
                        ), logger: logger)
                    try await c.query(
                        PostgresQuery(
                            unsafeSQL:
                                "GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA \(quoted(layout.schema)) TO \(role)"),
                        logger: logger)
                }
            }
        }
    }

    /// Refuses servers older than PostgreSQL 12 (`minimum`, as `server_version_num` gives it).
    static func checkVersion(
        _ connection: PostgresConnection, _ logger: Logger, _ endpoint: Endpoint, minimum: Int = 120_000
    ) async throws {
        let rows = try await connection.query("SHOW server_version_num", logger: logger)
        for try await (text) in rows.decode(String.self) {
            guard let n = Int(text), n >= minimum else {
                throw SyncError(
                    .incompatibleServer,
                    "\(endpoint.redacted) runs PostgreSQL \(Self.versionName(text)); Logbook Sync needs \(minimum / 10_000) or later"
                )
            }
        }
    }

    /// "150004" as "15.4" (a `server_version_num`; as given when it is not one).
    static func versionName(_ number: String) -> String {
        guard let n = Int(number), n >= 100_000 else { return number }
        return "\(n / 10_000).\(n % 10_000)"
    }

    /// Compares the server's columns with the model's: a column of another type is an error;
    /// with `requireAll`, so is a missing table or column.
    static func checkColumns(
        _ layout: ServerSchema, _ connection: PostgresConnection, _ logger: Logger, requireAll: Bool
    )
        async throws
    {
        let rows = try await connection.query(
            "SELECT table_name, column_name, data_type FROM information_schema.columns WHERE table_schema = \(layout.schema)",
            logger: logger)
        var found: [String: [String: String]] = [:]
        for try await (table, column, type) in rows.decode((String, String, String).self) {
            found[table, default: [:]][column] = type
        }
        for (table, columns) in layout.expectedColumns().sorted(by: { $0.key < $1.key }) {
            guard let have = found[table] else {
                if requireAll {
                    throw SyncError(
                        .incompatibleSchema,
                        "the server has no table \(layout.schema).\(table): run SyncServer.prepare (logbook sync setup) with the owner's URL"
                    )
                }
                continue
            }
            for (column, type) in columns.sorted(by: { $0.key < $1.key }) {
                guard let t = have[column] else {
                    if requireAll {
                        throw SyncError(
                            .incompatibleSchema,
                            "the server's table \(layout.schema).\(table) has no column \(column): run SyncServer.prepare (logbook sync setup) with the owner's URL"
                        )
                    }
                    continue
                }
                if t != type {
                    throw SyncError(
                        .incompatibleSchema,
                        "the server's column \(layout.schema).\(table).\(column) is \(t), not \(type) as the model has it (altered by hand?); an incompatible change is not made"
                    )
                }
            }
        }
    }

    /// Runs `body` with a new connection, closed after; errors come without the password.
    static func withConnection<R: Sendable>(
        _ configuration: SyncConfiguration, doing what: String, isolation: isolated (any Actor)? = #isolation,
        _ body: (PostgresConnection, Logger) async throws -> R
    ) async throws -> R {
        let logger = Logger(label: "logbook.sync")
        let connection: PostgresConnection
        do {
            connection = try await PostgresConnection.connect(
                configuration: try configuration.endpoint.configuration(), id: 1, logger: logger)
        } catch {
            throw SyncError.wrap(error, configuration.endpoint, doing: what)
        }
        do {
            let result = try await body(connection, logger)
            try? await connection.close()
            return result
        } catch {
            try? await connection.close()
            throw SyncError.wrap(error, configuration.endpoint, doing: what)
        }
    }
}

extension SyncServer {
    /// Runs `body` with a connection of its own to `configuration`'s server (for tools and
    /// benchmarks that also talk to the server directly); errors come without the password.
    package static func withRawConnection<R: Sendable>(
        _ configuration: SyncConfiguration, isolation: isolated (any Actor)? = #isolation,
        _ body: (PostgresConnection, Logger) async throws -> R
    ) async throws -> R {
        try await withConnection(configuration, doing: "querying the server", body)
    }
}
