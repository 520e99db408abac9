import Foundation
import LogbookEngine
import LogbookGraph
import Logging
import PostgresNIO

/// What one `push()`, `pull()` or `sync()` did.
public struct SyncReport: Sendable, Codable, Equatable {
    /// Local transactions pushed (a first push counts the store's state as one).
    public var pushedTransactions = 0
    /// Object and membership changes pushed.
    public var pushedChanges = 0
    /// Change log rows pulled (this store's own rows included, which change nothing here).
    public var pulledRows = 0
    /// Object and membership changes applied to this store.
    public var appliedChanges = 0
    /// The conflicts the configuration's resolver decided (0 without one).
    public var conflicts = 0
    public init() {}
}

/// Where a store stands with the server.
public struct SyncStatus: Sendable, Codable, Equatable {
    /// The store's version.
    public var localVersion: UInt64
    /// The last local version the server holds (nil: never pushed).
    public var pushedVersion: UInt64?
    /// Local transactions not pushed yet.
    public var pendingTransactions: Int
    /// The last change of this store's scope it has pulled (0: none).
    public var pulledSequence: Int64
    /// The newest change of this store's scope on the server.
    public var serverSequence: Int64
}

/// Keeps a store in step with others through PostgreSQL (docs/sync.md).
///
/// Every local save is recorded in history (with the members of each to-many change), pushed
/// in order to the server's change log, and applied there to a table per entity; every store
/// pulls the log in the server's order and applies it as one local transaction a batch,
/// recorded with the author `sync` and merged into live contexts like another context's save.
/// Local saves never wait for the network, and a store works fully offline: `push()` and
/// `pull()` (or the background task of `start()`) catch up when the server can be reached.
///
/// ```swift
/// var options = ContainerOptions()
/// options.persistentHistoryTracking = true
/// options.historyRecordsMemberChanges = true
/// let container = try PersistentContainer(name: "Notes", model: model, options: options)
/// let sync = try SyncEngine(container: container,
///                           configuration: SyncConfiguration(url: "postgres://alice:secret@db/app"))
/// await sync.start()              // pushes saves, pulls others' changes as they come
/// ```
public actor SyncEngine {
    /// The author of the transactions a pull commits.
    public static let author = "sync"
    /// The author of the local transactions that set what a resolver chose for a change this
    /// store had pushed already (`SyncConfiguration.resolver`); they are pushed like any other.
    public static let resolverAuthor = "sync-resolver"

    public let container: PersistentContainer
    public let configuration: SyncConfiguration
    let layout: ServerSchema
    let storeID: UUID
    var identity: Identity
    private var checkedColumns = false
    private var background: Task<Void, Never>?
    /// The last error of the background task (nil after a round that succeeded).
    public private(set) var lastError: SyncError?

    /// A sync engine for `container`, which must record history with member changes
    /// (`ContainerOptions.persistentHistoryTracking` and `historyRecordsMemberChanges`: a
    /// `.notConfigured` error otherwise). Nothing is sent until `push()`, `pull()`, `sync()` or
    /// `start()`. One engine (in one process) syncs a store at a time.
    public init(container: PersistentContainer, configuration: SyncConfiguration) throws {
        guard container.recordsMemberChanges else {
            throw SyncError(
                .notConfigured,
                "the container must record history with member changes: open it with ContainerOptions.persistentHistoryTracking and .historyRecordsMemberChanges"
            )
        }
        guard !container.store.isReadOnly else {
            throw SyncError(.notConfigured, "a read-only container cannot sync (it cannot apply what it pulls)")
        }
        self.container = container
        self.configuration = configuration
        layout = ServerSchema(model: container.model, schema: configuration.schema)
        identity = try Identity.load(container)
        storeID = UUID(uuidString: container.storeIdentifier)!
    }

    // MARK: Background

    /// Starts the background task: it pushes each local save soon after it commits (the store's
    /// version is looked at every 5 ms), pulls when the server `NOTIFY`s a push (and every
    /// `interval` anyway: the change log, not the notification, is the truth), and, when the
    /// server cannot be reached, tries again with a growing pause (up to `interval`), keeping
    /// every local change. Errors are in `lastError`.
    public func start(interval: Duration = .seconds(5)) {
        guard background == nil else { return }
        background = Task { await self.run(interval: interval) }
    }

    /// Stops the background task (a round in progress ends first) and closes the connection.
    public func stop() async {
        let task = background
        background = nil
        task?.cancel()
        await task?.value
        await disconnect()
    }

    private func run(interval: Duration) async {
        let wake = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let listener = Task { await self.listen(wake.continuation) }
        defer { listener.cancel() }
        var pushedVersion: UInt64 = .max
        var lastPull = ContinuousClock.now - interval
        var pause = Duration.milliseconds(100)
        var woken = true
        let wakes = Locked(0)
        let counter = Task {
            for await _ in wake.stream { wakes.withLock { $0 += 1 } }
        }
        defer { counter.cancel() }
        while !Task.isCancelled {
            let version = container.store.version
            let notified = wakes.withLock { n -> Bool in
                defer { n = 0 }
                return n > 0
            }
            let due = ContinuousClock.now - lastPull >= interval
            if version != pushedVersion || notified || due || woken {
                do {
                    if version != pushedVersion { _ = try await push() }
                    pushedVersion = version
                    if notified || due || woken {
                        _ = try await pull()
                        lastPull = .now
                    }
                    lastError = nil
                    pause = .milliseconds(100)
                    woken = false
                } catch {
                    // A round cut short by `stop()` is no error.
                    if Task.isCancelled { break }
                    lastError = error as? SyncError ?? SyncError(.store, "\(error)")
                    try? await Task.sleep(for: pause)
                    pause = min(pause * 2, interval)
                    continue
                }
            }
            try? await Task.sleep(for: .milliseconds(5))
        }
    }

    /// Listens for the server's notifications of pushes (on a connection of its own),
    /// reconnecting as needed, until cancelled.
    private func listen(_ wake: AsyncStream<Void>.Continuation) async {
        let channel = layout.channel
        let configuration = self.configuration
        while !Task.isCancelled {
            do {
                try await SyncServer.withConnection(configuration, doing: "listening") { connection, _ in
                    let notifications = try await connection.listen(channel)
                    wake.yield()
                    for try await _ in notifications { wake.yield() }
                }
            } catch {}
            try? await Task.sleep(for: .seconds(1))
        }
    }

    // MARK: The connection

    /// The connection the background task's rounds use, kept between them (a new login costs
    /// more than a round: a scram exchange) and closed by `stop()`. A push or pull called
    /// without the background task uses a connection of its own.
    private var session: (connection: PostgresConnection, watch: ConnectionWatch)?
    private let logger = Logger(label: "logbook.sync")

    /// Runs `body` on the kept connection (made when there is none or it closed); an error
    /// drops the connection, so that the next round starts on a new one.
    private func withSession<R: Sendable>(
        doing what: String, _ body: @escaping (PostgresConnection, Logger) async throws -> R
    ) async throws -> R {
        let keep = background != nil
        let connection: PostgresConnection
        let watch: ConnectionWatch
        if keep, let session, !session.connection.isClosed {
            (connection, watch) = session
        } else {
            do {
                connection = try await PostgresConnection.connect(
                    configuration: try configuration.endpoint.configuration(), id: keep ? 2 : 1, logger: logger)
            } catch {
                throw SyncError.wrap(error, configuration.endpoint, doing: what)
            }
            watch = ConnectionWatch(connection)
            if keep { session = (connection, watch) }
        }
        do {
            let result = try await watching(connection, watch, body)
            if !keep { try? await connection.close() }
            return result
        } catch {
            if session?.connection === connection { session = nil }
            try? await connection.close()
            throw SyncError.wrap(error, configuration.endpoint, doing: what)
        }
    }

    /// Runs `body` on `connection`, and gives up (`.unreachable`) once the connection is closed
    /// while `body` still waits: postgres-nio can leave a query waiting forever on a connection
    /// the server closed (seen when the server restarted under load: the push never returned,
    /// the store's sync lock stayed held, and `stop()` waited for it for good). The abandoned
    /// wait, on a closed connection, can only end in an error.
    private func watching<R: Sendable>(
        _ connection: PostgresConnection, _ watch: ConnectionWatch,
        _ body: @escaping (PostgresConnection, Logger) async throws -> R
    ) async throws -> R {
        let outcome = Outcome<R>()
        let logger = self.logger
        Task {
            _ = self
            do { outcome.settle(.success(try await body(connection, logger))) } catch {
                outcome.settle(.failure(error))
            }
        }
        watch.watch { outcome.settle(.failure(SyncError(.unreachable, "the connection to the server was lost"))) }
        defer { watch.unwatch() }
        return try await outcome.value()
    }

    /// Closes the kept connection (the engine makes a new one when it needs it).
    public func disconnect() async {
        let connection = session?.connection
        session = nil
        try? await connection?.close()
    }

    // MARK: Status

    /// Where the store stands: local version, the last version pushed, the transactions not
    /// pushed, the last change pulled and the server's newest.
    public func status() async throws -> SyncStatus {
        try await inTurn { try await statusTurn() }
    }

    private func statusTurn() async throws -> SyncStatus {
        try await withSession(doing: "reading the sync status") { [self] c, logger in
            try await checkServer(c, logger)
            let pushed = try await lastPushed(c, logger)
            let pending = try pushed.map { try localTransactions(after: $0).count } ?? 1
            var server: Int64 = 0
            for try await (n) in try await c.query(
                PostgresQuery(unsafeSQL: "SELECT coalesce(max(scope_seq), 0) FROM \(layout.changes)"), logger: logger
            ).decode(Int64.self) { server = n }
            return SyncStatus(
                localVersion: container.store.version, pushedVersion: pushed, pendingTransactions: pending,
                pulledSequence: try pulledSequence(), serverSequence: server)
        }
    }

    /// Pushes, then pulls.
    @discardableResult
    public func sync() async throws -> SyncReport {
        try await inTurn {
            let pushed = try await pushTurn(progress: nil)
            var pulled = try await pullTurn(progress: nil)
            pulled.pushedTransactions = pushed.pushedTransactions
            pulled.pushedChanges = pushed.pushedChanges
            return pulled
        }
    }

    // MARK: Turns

    /// Whether one of this engine's operations is running (they take turns: an actor's
    /// methods interleave at each `await`), and those waiting for it.
    private var inOperation = false
    private var waiting: [CheckedContinuation<Void, Never>] = []

    /// Runs `body` as this store's only sync operation: after this engine's other operations,
    /// holding the store's sync lock (`SYNCLOCK`, docs/journal-format.md) so that another engine
    /// — in this process or another — waits for its turn (up to `lockTimeout`, then `.busy`),
    /// with the store caught up with other processes' commits and the mappings another
    /// engine's pulls wrote read.
    private func inTurn<R: Sendable>(_ body: () async throws -> R) async throws -> R {
        while inOperation { await withCheckedContinuation { waiting.append($0) } }
        inOperation = true
        defer {
            inOperation = false
            if !waiting.isEmpty { waiting.removeFirst().resume() }
        }
        let lock = try await storeLock()
        defer { lock.unlock() }
        do {
            try container.store.catchUpIfOthersCommitted()
            try identity.catchUp(container)
        } catch let e as SyncError {
            throw e
        } catch {
            throw SyncError(.store, "reading the store: \(error)")
        }
        return try await body()
    }

    private func storeLock() async throws -> any FileLock {
        let deadline = ContinuousClock.now + configuration.lockTimeout
        while true {
            do {
                if let held = try container.store.tryLockFile(JournalFormat.syncLockFileName) { return held }
            } catch {
                throw SyncError(.store, "taking the store's sync lock: \(error)")
            }
            guard ContinuousClock.now < deadline else {
                throw SyncError(
                    .busy,
                    "another sync engine (in this process or another) has been syncing this store for \(configuration.lockTimeout); engines take turns"
                )
            }
            try? await Task.sleep(for: .milliseconds(5))
        }
    }

    // MARK: Push

    /// Pushes every local transaction the server does not hold yet, in order, in batches: each
    /// becomes a change log row (numbered by the server, in order) and is applied to the
    /// tables in the same SQL transaction. A push that is cut off (a crash, a lost connection)
    /// is resumed by the next, which writes nothing twice: rows are keyed by this store's id and
    /// version. The first push of a store sends its whole state.
    /// `progress` is told, after each batch, the changes sent so far and in all.
    @discardableResult
    public func push(progress: (@Sendable (_ done: Int, _ total: Int) -> Void)? = nil) async throws -> SyncReport {
        try await inTurn { try await pushTurn(progress: progress) }
    }

    private func pushTurn(progress: (@Sendable (_ done: Int, _ total: Int) -> Void)?) async throws -> SyncReport {
        try await withSession(doing: "pushing") { [self] c, logger in
            try await checkServer(c, logger)
            var report = SyncReport()
            let pushed = try await lastPushed(c, logger)
            var rows: [PendingRow] = []
            if let pushed {
                let taken = try TakenValues.load(container)
                for transaction in try localTransactions(after: pushed) {
                    let parts = try describe(transaction, taken: taken)
                    report.pushedTransactions += 1
                    for (i, body) in parts.enumerated() {
                        rows.append(
                            PendingRow(
                                version: transaction.token.version, part: i, last: i == parts.count - 1,
                                author: transaction.author, body: try PreparedBody(body, layout: layout)))
                    }
                }
            } else {
                // The whole store, made on another thread while the parts before are sent.
                report.pushedTransactions = 1
                let version = container.store.version
                var total = 0
                let counter = container.newContext(concurrencyType: .confinement)
                for table in layout.tables.keys {
                    var request = FetchRequest<ManagedObject>(entityName: table)
                    request.includesSubentities = false
                    total += try counter.count(for: request)
                }
                // A first push cut off (a crash, a lost connection) left a prefix of this
                // version's parts: they are not made again, and the numbering goes on.
                let sentBefore = PostgresQuery(
                    unsafeSQL: """
                        SELECT count(*), coalesce(sum(jsonb_array_length(body -> 'o') + jsonb_array_length(body -> 'm')), 0)
                        FROM \(layout.changes) WHERE store = $1 AND store_version = $2
                        """,
                    binds: try Self.binds(storeID, Int64(version)))
                var (existingParts, existingChanges) = (Int64(0), Int64(0))
                for try await (n, changes) in try await c.query(sentBefore, logger: logger).decode((Int64, Int64).self)
                {
                    (existingParts, existingChanges) = (n, changes)
                }
                // Each part's text and statements are made there too.
                let (stream, parts) = AsyncThrowingStream.makeStream(of: PreparedBody.self)
                let (container, layout, identity, size) = (container, layout, identity, configuration.batchSize)
                let producer = Task.detached {
                    do {
                        try Self.snapshotParts(
                            container: container, layout: layout, identity: identity, batchSize: size, version: version,
                            skip: Int(existingChanges)
                        ) { parts.yield(try PreparedBody($0, layout: layout)) }
                        parts.finish()
                    } catch {
                        parts.finish(throwing: error)
                    }
                }
                defer { producer.cancel() }
                var held: PreparedBody?
                var part = Int(existingParts)
                var done = Int(existingChanges)
                func row(_ body: PreparedBody, last: Bool) -> PendingRow {
                    PendingRow(version: version, part: part, last: last, author: nil, body: body)
                }
                for try await body in stream {
                    if let previous = held {
                        report.pushedChanges += try await send([row(previous, last: false)], c, logger)
                        done += previous.count
                        progress?(done, max(total, done))
                        part += 1
                    }
                    held = body
                }
                // A stream cut short by cancellation (`stop()`) ends without an error: the part
                // held must not go as the last one, which would mark the whole state pushed.
                try Task.checkCancellation()
                let last = try held ?? PreparedBody(BodyWriter(), layout: layout)
                report.pushedChanges += try await send([row(last, last: true)], c, logger)
                progress?(done + last.count, max(total, done + last.count))
                return report
            }
            // Batches of about `batchSize` changes, one SQL transaction each.
            let total = rows.reduce(0) { $0 + $1.count }
            var done = 0
            var start = 0
            while start < rows.count {
                var end = start
                var changes = 0
                while end < rows.count && (end == start || changes + rows[end].count <= configuration.batchSize) {
                    changes += rows[end].count
                    end += 1
                }
                let batch = Array(rows[start..<end])
                report.pushedChanges += try await send(batch, c, logger)
                done += batch.reduce(0) { $0 + $1.count }
                progress?(done, total)
                start = end
            }
            return report
        }
    }

    struct PendingRow: Sendable {
        var version: UInt64
        var part: Int
        var last: Bool
        var author: String?
        var body: PreparedBody
        var count: Int { body.count }
    }

    /// Sends rows in one SQL transaction; returns the changes the server had not seen.
    private func send(_ rows: [PendingRow], _ c: PostgresConnection, _ logger: Logger) async throws -> Int {
        let layout = self.layout
        let store = storeID
        return try await c.withTransaction(logger: logger) { t in
            // One push at a time, so that the change numbers commit in order.
            try await t.query("SELECT pg_advisory_xact_lock(\(layout.lockKey))", logger: logger)
            var sent = 0
            for row in rows {
                let insert = PostgresQuery(
                    unsafeSQL: """
                        INSERT INTO \(layout.changes) (scope_seq, store, store_version, part, more, author, body)
                        SELECT coalesce(max(scope_seq), 0) + 1, $1, $2, $3, $4, $5, $6::jsonb FROM \(layout.changes)
                        WHERE scope = current_user
                        ON CONFLICT (store, store_version, part) DO NOTHING
                        RETURNING seq
                        """,
                    binds: try Self.binds(
                        store, Int64(row.version), Int32(row.part), !row.last, row.author, row.body.text))
                var seq: Int64?
                for try await (n) in try await t.query(insert, logger: logger).decode(Int64.self) { seq = n }
                guard let seq else { continue }  // pushed before: nothing twice
                try await Self.insertColumns(row.body.inserts, t, logger)
                for statement in layout.applyStatements(row.body.summary) {
                    try await t.query(PostgresQuery(unsafeSQL: statement, binds: try Self.binds(seq)), logger: logger)
                }
                sent += row.count
            }
            try await t.query(PostgresQuery(unsafeSQL: "NOTIFY \(quoted(layout.channel))"), logger: logger)
            return sent
        }
    }

    /// Puts a row's inserted columns into the tables: each block as a plain insert (rows the
    /// server has not seen: the common case, and twice as fast as an upsert), or, when a row is
    /// there already, as an upsert after rolling the insert back; then the references whose
    /// destination came later.
    static func insertColumns(
        _ statements: ServerSchema.InsertStatements, _ t: PostgresConnection, _ logger: Logger
    ) async throws {
        for (insert, upsert) in statements.inserts {
            try await t.query("SAVEPOINT logbook_insert", logger: logger)
            do {
                try await t.query(PostgresQuery(unsafeSQL: insert.sql, binds: insert.binds), logger: logger)
                try await t.query("RELEASE SAVEPOINT logbook_insert", logger: logger)
            } catch let e as PSQLError where e.serverInfo?[.sqlState] == "23505" {
                try await t.query("ROLLBACK TO SAVEPOINT logbook_insert", logger: logger)
                try await t.query(PostgresQuery(unsafeSQL: upsert, binds: insert.binds), logger: logger)
            }
        }
        for reference in statements.references {
            try await t.query(PostgresQuery(unsafeSQL: reference.sql, binds: reference.binds), logger: logger)
        }
    }

    static func binds(_ values: (any Sendable)?...) throws -> PostgresBindings {
        var b = PostgresBindings()
        for v in values {
            switch v {
            case nil: b.appendNull()
            case let x as UUID: b.append(x)
            case let x as Int64: b.append(x)
            case let x as Int32: b.append(x)
            case let x as String: b.append(x)
            case let x as Bool: b.append(x)
            default: b.appendNull()
            }
        }
        return b
    }

    /// The last local version the server holds whole (nil: none).
    private func lastPushed(_ c: PostgresConnection, _ logger: Logger) async throws -> UInt64? {
        // A version pushed in parts counts once its last part is there (the others have `more`).
        let q = PostgresQuery(
            unsafeSQL: "SELECT max(store_version) FROM \(layout.changes) WHERE store = $1 AND NOT more",
            binds: try Self.binds(storeID))
        var found: Int64?
        for try await (n) in try await c.query(q, logger: logger).decode(Int64?.self) { found = n }
        return found.map { UInt64($0) }
    }

    private func checkServer(_ c: PostgresConnection, _ logger: Logger) async throws {
        guard !checkedColumns else { return }
        try await SyncServer.checkVersion(c, logger, configuration.endpoint)
        try await SyncServer.checkColumns(layout, c, logger, requireAll: true)
        checkedColumns = true
    }

    /// The local transactions after `version` that a pull did not make.
    private func localTransactions(after version: UInt64) throws -> [PersistentHistoryTransaction] {
        do {
            return try container.history(after: PersistentHistoryToken(version: version)).filter {
                $0.author != Self.author
            }
        } catch let e as LogbookError where e.code == .historyTokenExpired {
            throw SyncError(
                .store,
                "the local history after version \(version) was purged before it was pushed: those changes cannot be sent (keep history until sync has pushed it)"
            )
        }
    }

    /// A context of the store as it is.
    private func reader() -> ManagedObjectContext { container.newContext(concurrencyType: .confinement) }

    /// The bodies of one local transaction (in parts of about `batchSize` changes).
    private func describe(_ transaction: PersistentHistoryTransaction, taken: TakenValues) throws -> [BodyWriter] {
        let context = reader()
        var parts: [BodyWriter] = [BodyWriter()]
        func room() {
            if parts[parts.count - 1].count >= configuration.batchSize { parts.append(BodyWriter()) }
        }
        for change in transaction.changes {
            let uuid = identity.uuid(forKey: change.changedObjectID.key)
            switch change.changeType {
            case .delete:
                room()
                parts[parts.count - 1].object(entity: change.entityName, id: uuid, op: "d", attributes: [], toOne: [])
            case .insert, .update:
                // Gone since: its deletion comes later.
                guard let o = try? context.existingObject(with: change.changedObjectID) else { continue }
                // Less the properties a resolver gave up to another store's value.
                let version = transaction.token.version
                let key = change.changedObjectID.key
                let names =
                    change.changeType == .insert
                    ? nil : change.updatedProperties?.filter { !taken.gaveUp(key, $0, at: version) }
                let (attributes, toOne) = try values(of: o, only: names)
                if change.changeType == .update && attributes.isEmpty && toOne.isEmpty { continue }
                room()
                parts[parts.count - 1].object(
                    entity: o.entity.name, id: uuid, op: change.changeType == .insert ? "i" : "u",
                    attributes: attributes, toOne: toOne)
            }
        }
        for m in transaction.memberChanges {
            guard let owner = try? context.existingObject(with: m.owner),
                let r = owner.entity.relationships.first(where: { $0.name == m.relationship })
            else { continue }
            let order =
                r.isOrdered
                ? try owner.orderedObjects(forKey: r.name).map { identity.uuid(forKey: $0.objectID.key) } : nil
            room()
            parts[parts.count - 1].members(
                entity: owner.entity.name, owner: identity.uuid(forKey: m.owner.key), relationship: r.name,
                added: m.added.map { identity.uuid(forKey: $0.key) },
                removed: m.removed.map { identity.uuid(forKey: $0.key) },
                order: order)
        }
        return parts
    }

    /// An object's attribute values and to-one references (all, or those named).
    private func values(of o: ManagedObject, only names: Set<String>?) throws -> (
        [(String, (any Sendable)?)], [(String, UUID?)]
    ) { try Self.values(of: o, only: names, identity: identity) }

    static func values(of o: ManagedObject, only names: Set<String>?, identity: Identity) throws -> (
        [(String, (any Sendable)?)], [(String, UUID?)]
    ) {
        var attributes: [(String, (any Sendable)?)] = []
        var toOne: [(String, UUID?)] = []
        for a in o.entity.attributes where !a.isTransient && (names?.contains(a.name) ?? true) {
            attributes.append((a.name, try o.storedAttribute(a.name)))
        }
        for r in o.entity.relationships where !r.isToMany && (names?.contains(r.name) ?? true) {
            let target = try o.value(forKey: r.name) as? ManagedObject
            toOne.append((r.name, target.map { identity.uuid(forKey: $0.objectID.key) }))
        }
        return (attributes, toOne)
    }

    /// The whole store as of `version`, for a first push, handed to `emit` in parts of about
    /// `batchSize` changes as they are made (on a thread of their own, while the parts before
    /// are sent): every object, its memberships held by join tables (from the owner's side)
    /// and its orders.
    static func snapshotParts(
        container: PersistentContainer, layout: ServerSchema, identity: Identity, batchSize: Int, version: UInt64,
        skip: Int = 0, emit: (BodyWriter) throws -> Void
    ) throws {
        // The changes a push cut off before had sent (its parts form a prefix): skipped.
        var skipped = 0
        func skipping() -> Bool {
            guard skipped < skip else { return false }
            skipped += 1
            return true
        }
        let context =
            (try? container.snapshot(asOf: PersistentHistoryToken(version: version)))
            ?? container.newContext(concurrencyType: .confinement)
        var part = BodyWriter()
        func room() throws {
            if part.count >= batchSize {
                try emit(part)
                part = BodyWriter()
            }
        }
        var members: [(ManagedObject, RelationshipDescription)] = []
        for table in layout.tables.values.sorted(by: { $0.entity < $1.entity }) {
            var request = FetchRequest<ManagedObject>(entityName: table.entity)
            request.includesSubentities = false
            for o in try context.fetch(request) {
                for r in o.entity.relationships where r.isToMany {
                    let join = layout.joins["\(table.entity).\(r.name)"]
                    if r.isOrdered || (join != nil && join!.owner == table.entity && join!.relationship == r.name)
                        || (join != nil && join!.table == "\(table.entity).\(r.name)")
                    {
                        members.append((o, r))
                    }
                }
                if skipping() { continue }
                let (attributes, toOne) = try values(of: o, only: nil, identity: identity)
                try room()
                part.object(
                    entity: table.entity, id: identity.uuid(forKey: o.objectID.key), op: "i", attributes: attributes,
                    toOne: toOne)
            }
        }
        for (o, r) in members where !skipping() {
            let related = r.isOrdered ? try o.orderedObjects(forKey: r.name) : Array(try o.objects(forKey: r.name))
            let ids = related.map { identity.uuid(forKey: $0.objectID.key) }
            let holdsMembers = layout.joins["\(o.entity.name).\(r.name)"] != nil
            try room()
            part.members(
                entity: o.entity.name, owner: identity.uuid(forKey: o.objectID.key), relationship: r.name,
                added: holdsMembers ? ids : [], removed: [], order: r.isOrdered ? ids : nil)
        }
        try emit(part)
    }

    // MARK: Pull

    /// Pulls the changes of this store's scope after the last one it pulled, in the server's
    /// order, in batches; each batch is one local transaction (author `sync`), committed with
    /// the pull's position, and merged into live contexts. A property this store changed and
    /// has not pushed keeps its local value (its push comes later in the server's order, so it
    /// wins there too); a delete wins over an update; memberships merge member by member.
    /// `progress` is told, after each batch, the change log rows read so far and in all.
    @discardableResult
    public func pull(progress: (@Sendable (_ done: Int, _ total: Int) -> Void)? = nil) async throws -> SyncReport {
        try await inTurn { try await pullTurn(progress: progress) }
    }

    private func pullTurn(progress: (@Sendable (_ done: Int, _ total: Int) -> Void)?) async throws -> SyncReport {
        // A store's first push sends its whole state: it goes before anything is pulled into it
        // (else pulled objects would go back as this store's).
        let first = try await withSession(doing: "pulling") { [self] c, logger in
            try await checkServer(c, logger)
            return try await lastPushed(c, logger) == nil
        }
        var report = SyncReport()
        if first {
            let pushed = try await pushTurn(progress: nil)
            report.pushedTransactions = pushed.pushedTransactions
            report.pushedChanges = pushed.pushedChanges
        }
        return try await withSession(doing: "pulling") { [self] c, logger in
            let pushed = try await lastPushed(c, logger)
            // What this store pushed after the last change it pulled: a change of another store
            // that comes before it in the server's order does not undo it here.
            let start = try pulledSequence()
            let ownLater = try await ownChanges(after: start, c, logger)
            // What this store changed and has not pushed, read once (a save made while the pull
            // runs is kept by the pull's merge policy, the store's values winning).
            // The local changes a resolver gave up: those the server holds are forgotten.
            var taken = try TakenValues.load(container)
            var takenSaved = taken
            taken.forget(through: pushed ?? 0)
            let pending = try pendingLocal(after: pushed, taken: taken)
            var newest: Int64 = start
            for try await (n) in try await c.query(
                PostgresQuery(
                    unsafeSQL: "SELECT coalesce(max(scope_seq), 0) FROM \(layout.changes) WHERE scope = current_user"),
                logger: logger
            ).decode(Int64.self) { newest = n }
            while true {
                let after = try pulledSequence()
                let q = PostgresQuery(
                    unsafeSQL: """
                        SELECT scope_seq, store, body::text FROM \(layout.changes)
                        WHERE scope = current_user AND scope_seq > $1 ORDER BY scope_seq LIMIT $2
                        """,
                    binds: try Self.binds(after, Int64(100)))
                var rows: [(seq: Int64, store: UUID, body: String)] = []
                for try await (seq, store, body) in try await c.query(q, logger: logger).decode(
                    (Int64, UUID, String).self)
                {
                    rows.append((seq, store, body))
                }
                guard !rows.isEmpty else { break }
                // Rows up to a gap are applied; the gap is an error.
                let whole = rows.enumerated().prefix { $0.element.seq == after + 1 + Int64($0.offset) }.map(\.element)
                report.pulledRows += whole.count
                // One local transaction for about `batchSize` changes (a row may hold more).
                var chunk: [(seq: Int64, text: String)] = []
                var size = 0
                for (n, row) in whole.enumerated() {
                    if row.store != storeID {
                        chunk.append((row.seq, row.body))
                        size += row.body.utf8.count / 80 + 1
                    }
                    guard size >= configuration.batchSize || n == whole.count - 1 else { continue }
                    var followUps = FollowUps()
                    let (applied, conflicts) = try apply(
                        chunk, through: row.seq, pending: pending, ownLater: ownLater, taken: &taken,
                        takenSaved: takenSaved, followUps: &followUps)
                    takenSaved = taken
                    try save(followUps)
                    report.appliedChanges += applied
                    report.conflicts += conflicts
                    progress?(Int(row.seq - start), Int(max(newest, row.seq) - start))
                    chunk = []
                    size = 0
                }
                if whole.count < rows.count {
                    let missing = after + 1 + Int64(whole.count)
                    throw SyncError(
                        .gap,
                        "the change log of this scope has no change \(missing) (the next is \(rows[whole.count].seq)): rows were removed by hand; this store keeps its changes and does not pull past the gap"
                    )
                }
            }
            return report
        }
    }

    /// The properties ("uuid.name"), memberships ("uuid.relationship.member") and orders
    /// ("uuid.relationship") this store's own rows after `after` set, with the last row's number.
    private func ownChanges(after: Int64, _ c: PostgresConnection, _ logger: Logger) async throws -> (
        seq: [String: Int64], orders: [String: [UUID]]
    ) {
        let q = PostgresQuery(
            unsafeSQL: "SELECT scope_seq, body::text FROM \(layout.changes) WHERE store = $1 AND scope_seq > $2",
            binds: try Self.binds(storeID, after))
        var out: [String: Int64] = [:]
        var orders: [String: (Int64, [UUID])] = [:]
        func note(_ key: String, _ seq: Int64) { out[key] = max(out[key] ?? 0, seq) }
        for try await (seq, text) in try await c.query(q, logger: logger).decode((Int64, String).self) {
            let body = try Body(json: text)
            for o in body.objects {
                for name in o.attributes.keys { note("\(o.id).\(name)", seq) }
                for name in o.toOne.keys { note("\(o.id).\(name)", seq) }
            }
            for m in body.members {
                for member in m.added + m.removed { note("\(m.owner).\(m.relationship).\(member)", seq) }
                if let order = m.order {
                    let key = "\(m.owner).\(m.relationship)"
                    note(key, seq)
                    if seq > orders[key]?.0 ?? 0 { orders[key] = (seq, order) }
                }
            }
        }
        return (out, orders.mapValues(\.1))
    }

    /// The last change this store pulled (0: none), from its state record.
    func pulledSequence() throws -> Int64 {
        guard let bytes = try container.store.snapshot().value(forKey: Identity.stateKey), bytes.count >= 8 else {
            return 0
        }
        return bytes[0..<8].enumerated().reduce(Int64(0)) { $0 | Int64($1.element) << (8 * $1.offset) }
    }

    /// What this store changed and has not pushed: properties by object key ("*" for an
    /// insert or a deletion), each with the newest local version that changed it (less those
    /// a resolver gave up), and memberships ("owner.relationship.member", and
    /// "owner.relationship" for an order).
    private func pendingLocal(after pushed: UInt64?, taken: TakenValues) throws -> (
        properties: [UInt64: [String: UInt64]], members: Set<String>
    ) {
        var properties: [UInt64: [String: UInt64]] = [:]
        var members = Set<String>()
        for t in try localTransactions(after: pushed ?? 0) {
            let version = t.token.version
            for c in t.changes {
                let key = c.changedObjectID.key
                switch c.changeType {
                case .insert, .delete: properties[key, default: [:]]["*"] = version
                case .update:
                    for name in c.updatedProperties ?? [] where !taken.gaveUp(key, name, at: version) {
                        properties[key, default: [:]][name] = version
                    }
                }
            }
            for m in t.memberChanges {
                for k in m.added + m.removed { members.insert("\(m.owner.key).\(m.relationship).\(k.key)") }
                if m.reordered { members.insert("\(m.owner.key).\(m.relationship)") }
            }
        }
        return (properties, members)
    }

    /// Sets, in a local transaction of its own (author `sync-resolver`, pushed like any local
    /// change), the values a resolver chose for changes this store had pushed already.
    private func save(_ followUps: FollowUps) throws {
        guard !followUps.isEmpty else { return }
        let context = container.newContext(concurrencyType: .confinement)
        context.transactionAuthor = Self.resolverAuthor
        // A save made since keeps its values: it is newer than the resolution, and pushed after it.
        context.mergePolicy = .mergeByPropertyStoreTrump
        do {
            for (key, values) in followUps.values {
                guard let o = try? context.existingObject(with: container.objectID(forKey: key)) else { continue }
                for (name, value) in values {
                    switch value {
                    case .attribute(let v): try o.setStoredAttribute(v, forKey: name)
                    case .toOne(let id):
                        try o.setValue(id.flatMap { try? context.existingObject(with: $0) }, forKey: name)
                    }
                }
            }
            try context.save()
        } catch {
            throw SyncError(.store, "saving the resolver's values: \(error)")
        }
    }

    /// Applies pulled bodies as one local transaction; returns the changes applied.
    private func apply(
        _ bodies: [(seq: Int64, text: String)], through seq: Int64,
        pending: (properties: [UInt64: [String: UInt64]], members: Set<String>),
        ownLater: (seq: [String: Int64], orders: [String: [UUID]]),
        taken: inout TakenValues, takenSaved: TakenValues, followUps: inout FollowUps
    ) throws -> (applied: Int, conflicts: Int) {
        var conflicts = 0
        let parsed = try bodies.map { (seq: $0.seq, body: try Body(json: $0.text)) }
        let context = container.newContext(concurrencyType: .confinement)
        context.transactionAuthor = Self.author
        context.mergePolicy = .mergeByPropertyStoreTrump
        // Mappings are added to the engine's identity in place (a copy of its dictionaries for
        // each batch cost a pull of a million objects 10 % of its time), and taken out again
        // if the batch fails.
        let mappingsBefore = identity.nextMapping
        var mapped: [UUID] = []
        var applied = 0
        let entityNames = Set(container.model.entities.map(\.name))
        func object(_ uuid: UUID) -> ManagedObject? {
            guard let key = identity.key(for: uuid) else { return nil }
            let id = container.objectID(forKey: key)
            guard let o = try? context.existingObject(with: id), !o.isDeleted else { return nil }
            return o
        }
        // One pulled property of `o`: set, when this store has not changed it since it last
        // pulled; else a conflict. Without a resolver this store's value stays (its push comes
        // later in the server's order). A resolver's answer is set now, or — when this store's
        // own change of the property is later in the server's order already — saved after the
        // pull as a change of its own (a follow-up), so that the server's order keeps it.
        func settle(
            _ o: ManagedObject, _ change: Body.Object, _ name: String, rowSeq: Int64, ownRowLater: Bool,
            remote: FollowUps.Value, local: () throws -> FollowUps.Value,
            chosen: ((any Sendable)?) throws -> FollowUps.Value, set: (FollowUps.Value) throws -> Void
        ) throws {
            let key = o.objectID.key
            let mine = pending.properties[key] ?? [:]
            guard ownRowLater || mine[name] != nil else {
                try set(remote)
                followUps.drop(key, name)
                return
            }
            guard let resolver = configuration.resolver else { return }
            let current = try followUps.values[key]?[name] ?? local()
            let resolution = resolver(
                SyncConflict(
                    objectID: o.objectID, syncID: change.id, entityName: o.entity.name, property: name,
                    localValue: current.value, remoteValue: remote.value, sequence: rowSeq))
            let value: FollowUps.Value
            switch resolution {
            case .keepLocal: return
            case .takeRemote: value = remote
            case .value(let v): value = try chosen(v)
            }
            conflicts += 1
            if ownRowLater {
                followUps.values[key, default: [:]][name] = value
            } else {
                try set(value)
                if case .takeRemote = resolution, let version = mine[name] {
                    taken.giveUp(key, name, through: version)
                }
            }
        }
        do {
            for (rowSeq, body) in parsed {
                // Set by a later row of this store's: not undone by this earlier one.
                func later(_ key: @autoclosure () -> String) -> Bool {
                    !ownLater.seq.isEmpty && (ownLater.seq[key()] ?? 0) > rowSeq
                }
                // Attributes (new objects made), then references, memberships, deletions.
                for change in body.objects where change.op != "d" {
                    var o = object(change.id)
                    if o == nil {
                        // Known here but gone (deleted here): the deletion stands.
                        if identity.key(for: change.id) != nil { continue }
                        guard entityNames.contains(change.entity) else { continue }
                        let made = try context.insertNewObject(forEntityName: change.entity)
                        let record = identity.map(change.id, to: made.objectID.key)
                        mapped.append(change.id)
                        context.attachedRecords[record.key] = record.value
                        o = made
                    }
                    guard let o else { continue }
                    let key = o.objectID.key
                    let mine = pending.properties[key] ?? [:]
                    if mine["*"] != nil && identity.isOwn(change.id) { continue }
                    for a in o.entity.attributes where !a.isTransient {
                        guard let json = change.attributes[a.name] else { continue }
                        try settle(
                            o, change, a.name, rowSeq: rowSeq, ownRowLater: later("\(change.id).\(a.name)"),
                            remote: .attribute(Body.value(json, type: a.type)),
                            local: { .attribute(try o.storedAttribute(a.name)) }, chosen: { .attribute($0) },
                            set: { if case .attribute(let v) = $0 { try o.setStoredAttribute(v, forKey: a.name) } })
                    }
                    applied += 1
                }
                for change in body.objects where change.op != "d" && !change.toOne.isEmpty {
                    guard let o = object(change.id) else { continue }
                    for r in o.entity.relationships where !r.isToMany {
                        guard let target = change.toOne[r.name] else { continue }
                        try settle(
                            o, change, r.name, rowSeq: rowSeq, ownRowLater: later("\(change.id).\(r.name)"),
                            remote: .toOne(target.flatMap(object)?.objectID),
                            local: { .toOne((try o.value(forKey: r.name) as? ManagedObject)?.objectID) },
                            chosen: { value in
                                switch value {
                                case nil: return .toOne(nil)
                                case let id as ObjectID:
                                    guard let named = try? context.existingObject(with: id), !named.isDeleted else {
                                        throw SyncError(
                                            .store,
                                            "the resolver chose \(id) for \(o.entity.name).\(r.name), which this store does not hold"
                                        )
                                    }
                                    return .toOne(named.objectID)
                                case let other?:
                                    throw SyncError(
                                        .store,
                                        "the resolver chose a \(type(of: other)) for the to-one relationship \(o.entity.name).\(r.name): it takes an ObjectID or nil"
                                    )
                                }
                            },
                            set: { value in
                                guard case .toOne(let id) = value else { return }
                                try o.setValue(try id.map { try context.existingObject(with: $0) }, forKey: r.name)
                            })
                    }
                }
                for m in body.members {
                    guard let owner = object(m.owner),
                        let r = owner.entity.relationships.first(where: { $0.name == m.relationship })
                    else { continue }
                    let ownerKey = owner.objectID.key
                    // A to-one inverse holds a one-to-many membership: it came with the object.
                    let inverseToOne =
                        r.inverse.flatMap { i in
                            container.model.flattenedEntities.first { $0.name == r.destination }?.relationships.first {
                                $0.name == i
                            }
                        }.map { !$0.isToMany } ?? false
                    if !inverseToOne {
                        for added in m.added {
                            guard let member = object(added),
                                !pending.members.contains("\(ownerKey).\(r.name).\(member.objectID.key)"),
                                !later("\(m.owner).\(r.name).\(added)")
                            else { continue }
                            try owner.add(member, toRelationship: r.name)
                        }
                        for removed in m.removed {
                            guard let member = object(removed),
                                !pending.members.contains("\(ownerKey).\(r.name).\(member.objectID.key)"),
                                !later("\(m.owner).\(r.name).\(removed)")
                            else { continue }
                            try owner.remove(member, fromRelationship: r.name)
                        }
                    }
                    // The order is the last one in the server's order: this row's, or a later one
                    // of this store's own, which the members this row brought must fit (as on the
                    // server and in every other store: the members it does not list follow, in
                    // the order they came).
                    let ownOrder = later("\(m.owner).\(r.name)") ? ownLater.orders["\(m.owner).\(r.name)"] : nil
                    if let order = ownOrder ?? m.order, r.isOrdered, !pending.members.contains("\(ownerKey).\(r.name)")
                    {
                        let current = try owner.orderedObjects(forKey: r.name)
                        let position = Dictionary(
                            order.enumerated().map { ($0.element, $0.offset) }, uniquingKeysWith: { a, _ in a })
                        let sorted = current.enumerated().sorted { a, b in
                            let pa = position[identity.uuid(forKey: a.element.objectID.key)] ?? Int.max
                            let pb = position[identity.uuid(forKey: b.element.objectID.key)] ?? Int.max
                            return (pa, a.offset) < (pb, b.offset)
                        }.map(\.element)
                        if sorted.map(\.objectID) != current.map(\.objectID) {
                            try owner.setValue(sorted, forKey: r.name)
                        }
                    }
                    applied += 1
                }
                for change in body.objects where change.op == "d" {
                    if let o = object(change.id) { context.delete(o) }
                    applied += 1
                }
            }
            var state = (0..<8).map { UInt8(truncatingIfNeeded: seq >> (8 * $0)) }
            state += [1]  // state format
            context.attachedRecords[Identity.stateKey] = state
            if taken != takenSaved { context.attachedRecords[TakenValues.recordKey] = taken.encoded }
            try context.save()
        } catch {
            identity.forget(mapped, restoring: mappingsBefore)
            if let e = error as? LogbookError { throw SyncError(.store, "applying pulled changes: \(e)") }
            throw error
        }
        return (applied, conflicts)
    }
}

/// The first result of a race (the work, or the watch of its connection), awaited once.
/// Tells the operation running on a connection that the connection closed: one callback on
/// the connection's close (NIO's close future), however many operations a kept connection
/// serves, and no thread polling it.
final class ConnectionWatch: @unchecked Sendable {
    // Guarded by `lock`.
    private let lock = NSLock()
    private var closed = false
    private var current: (@Sendable () -> Void)?

    init(_ connection: PostgresConnection) {
        connection.closeFuture.whenComplete { _ in self.close() }
    }

    private func close() {
        let giveUp: (@Sendable () -> Void)? = lock.withLock {
            closed = true
            defer { current = nil }
            return current
        }
        giveUp?()
    }

    /// `giveUp` runs when the connection closes before `unwatch()` (at once if it has).
    func watch(_ giveUp: @escaping @Sendable () -> Void) {
        let now: Bool = lock.withLock {
            if closed { return true }
            current = giveUp
            return false
        }
        if now { giveUp() }
    }

    func unwatch() { lock.withLock { current = nil } }
}

final class Outcome<R: Sendable>: @unchecked Sendable {
    // Guarded by `lock`.
    private let lock = NSLock()
    private var result: Result<R, any Error>?
    private var waiter: CheckedContinuation<R, any Error>?

    /// The first settlement wins; later ones are dropped.
    func settle(_ r: Result<R, any Error>) {
        let waiting: CheckedContinuation<R, any Error>? = lock.withLock {
            guard result == nil else { return nil }
            result = r
            defer { waiter = nil }
            return waiter
        }
        waiting?.resume(with: r)
    }

    func value() async throws -> R {
        try await withCheckedThrowingContinuation { k in
            let ready: Result<R, any Error>? = lock.withLock {
                if let result { return result }
                waiter = k
                return nil
            }
            if let ready { k.resume(with: ready) }
        }
    }
}
