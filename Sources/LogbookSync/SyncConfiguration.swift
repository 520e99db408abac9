import Foundation
import LogbookGraph
import NIOSSL
import PostgresNIO

/// Where and how a store syncs: a PostgreSQL server (a connection URL), the schema that holds
/// the change log and the tables, and how many changes travel in one round trip.
///
/// The scope — the set of data this store shares — is the role the URL logs in as: every row
/// on the server carries its role's name, and row-level security lets a role see and write only
/// its own rows (see docs/sync.md). Give each user or tenant a role of its own.
///
/// ```swift
/// let sync = try SyncConfiguration(url: "postgres://alice:secret@db.example.com/app?sslmode=require")
/// ```
public struct SyncConfiguration: Sendable {
    /// The connection URL: `postgres://user[:password]@host[:port]/database[?sslmode=...]`
    /// (`disable`, `prefer` or `require`; `disable` by default on loopback, `require`
    /// elsewhere). Never shown in a log or an error with its password.
    public var url: String
    /// The schema of the change log and the tables (created by `SyncServer.prepare`).
    public var schema: String
    /// At most this many object changes in one round trip.
    public var batchSize: Int
    /// How long a push, pull or status read waits for another engine syncing the same store
    /// (in this process or another) to finish its turn before it fails with `.busy`.
    public var lockTimeout: Duration = .seconds(120)
    /// Decides each conflict a pull meets: a property (an attribute or a to-one relationship)
    /// this store changed and has not pushed, which a pulled change of another store set too.
    /// Nil (the default): this store's value stays, and its push, later in the server's order,
    /// wins everywhere. See `SyncResolution` for what the answers do.
    ///
    /// ```swift
    /// var configuration = try SyncConfiguration(url: url)
    /// configuration.resolver = { conflict in
    ///     // Counters add up; anything else takes the other store's value.
    ///     if conflict.property == "count", let mine = conflict.localValue as? Int64,
    ///         let theirs = conflict.remoteValue as? Int64 {
    ///         return .value(max(mine, theirs))
    ///     }
    ///     return .takeRemote
    /// }
    /// ```
    public var resolver: SyncResolver?

    let endpoint: Endpoint

    /// A configuration; a URL that does not parse is an `.invalidURL` error (without its
    /// password).
    public init(url: String, schema: String = "logbook", batchSize: Int = 1000) throws {
        self.url = url
        self.schema = schema
        self.batchSize = max(1, batchSize)
        endpoint = try Endpoint(url)
        guard !schema.isEmpty, schema.utf8.count <= 63 else {
            throw SyncError(.invalidURL, "the schema name must be 1 to 63 bytes long")
        }
    }

    /// The URL with its password hidden, for messages.
    public var redactedURL: String { endpoint.redacted }
}

/// Decides a conflict: see `SyncConfiguration.resolver`. Called on the pulling engine, once
/// for each pulled change of a property in conflict, in the server's order; it must not use
/// the store (it runs inside the pull's transaction).
public typealias SyncResolver = @Sendable (SyncConflict) -> SyncResolution

/// A property this store changed and has not pushed, which a pulled change of another store
/// set too.
public struct SyncConflict: Sendable, CustomStringConvertible {
    /// The object in this store.
    public let objectID: ObjectID
    /// The object's identity for sync (the same in every store and on the server).
    public let syncID: UUID
    /// The object's entity.
    public let entityName: String
    /// The attribute or to-one relationship.
    public let property: String
    /// This store's value, not pushed: an attribute's value as stored (`String`, `Int64` for
    /// every integer type, `Double` (also for `Float`), `Bool`, `Date`, `Data` (also for a
    /// transformable value: its stored bytes), `UUID`, `URL`, `Decimal`), or, for a to-one
    /// relationship, the `ObjectID` of the object it names; nil for none.
    public let localValue: (any Sendable)?
    /// The other store's value, in the same form (a to-one naming an object this store does not
    /// have is nil).
    public let remoteValue: (any Sendable)?
    /// The pulled change's place in the server's order (its scope's sequence number).
    public let sequence: Int64

    public var description: String {
        "\(entityName) \(syncID).\(property): local \(localValue.map { "\($0)" } ?? "nil"), remote \(remoteValue.map { "\($0)" } ?? "nil")"
    }
}

/// What becomes of a conflict (`SyncConfiguration.resolver`). Whatever the answer, the
/// property stays one of this store's changes not pushed: its next push sends the value the
/// property then has, which comes after the pulled change in the server's order and so is the
/// value every store ends with (unless a later change of it, from any store, follows).
public enum SyncResolution: Sendable {
    /// This store's value stays (the default without a resolver).
    case keepLocal
    /// The other store's value is taken (and pushed again by this store: a change of the
    /// property that a third store pushes in between is overwritten, as by any later write).
    case takeRemote
    /// This value is set instead: an attribute's value (in the forms of
    /// `SyncConflict.localValue`; an integer attribute also takes an `Int`), or for a to-one
    /// relationship an `ObjectID` of this store (or nil). A value of the wrong type fails the
    /// pull with a `.store` error, changing nothing.
    case value((any Sendable)?)
}

/// A parsed connection URL.
struct Endpoint: Sendable {
    enum TLSMode: String, Sendable { case disable, prefer, require }
    var host: String
    var port: Int
    var user: String
    var password: String?
    var database: String
    var tls: TLSMode

    init(_ text: String) throws {
        guard let components = URLComponents(string: text),
            components.scheme == "postgres" || components.scheme == "postgresql",
            let host = components.host, !host.isEmpty
        else {
            throw SyncError(
                .invalidURL,
                "\(Endpoint.redact(text)) is not a PostgreSQL URL (postgres://user:password@host:port/database)")
        }
        self.host = host
        port = components.port ?? 5432
        user = components.user ?? "postgres"
        password = components.password
        let path = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        database = path.isEmpty ? user : path
        let loopback = host == "localhost" || host == "127.0.0.1" || host == "::1"
        let mode = components.queryItems?.first { $0.name == "sslmode" }?.value
        switch mode {
        case nil: tls = loopback ? .disable : .require
        case "disable": tls = .disable
        case "prefer", "allow": tls = .prefer
        case "require", "verify-ca", "verify-full": tls = .require
        case let other?:
            throw SyncError(.invalidURL, "sslmode \(other) is not one of disable, prefer, require")
        }
    }

    var redacted: String { "postgres://\(user)@\(host):\(port)/\(database)" }

    static func redact(_ text: String) -> String {
        guard var c = URLComponents(string: text) else { return "the URL" }
        if c.password != nil { c.password = "***" }
        return c.string ?? "the URL"
    }

    func configuration() throws -> PostgresConnection.Configuration {
        let tlsSetting: PostgresConnection.Configuration.TLS
        switch tls {
        case .disable: tlsSetting = .disable
        case .prefer, .require:
            let context: NIOSSLContext
            do { context = try NIOSSLContext(configuration: .makeClientConfiguration()) } catch {
                throw SyncError(.unreachable, "TLS could not be set up for \(redacted): \(error)")
            }
            tlsSetting = tls == .require ? .require(context) : .prefer(context)
        }
        var configuration = PostgresConnection.Configuration(
            host: host, port: port, username: user, password: password, database: database, tls: tlsSetting)
        configuration.options.connectTimeout = .seconds(10)
        return configuration
    }
}

/// Why sync could not go on. The store keeps everything it has: a push or pull that fails
/// changes nothing locally, and the next one starts where the last one that succeeded ended.
public struct SyncError: Error, CustomStringConvertible, Sendable {
    public enum Code: String, Sendable {
        /// The URL does not parse.
        case invalidURL
        /// The server cannot be reached (refused, timed out, TLS failed).
        case unreachable
        /// The server refused the user or password.
        case authentication
        /// The server is older than PostgreSQL 12.
        case incompatibleServer
        /// The server's tables do not match the model (a column missing or of another type,
        /// a table altered by hand): run `SyncServer.prepare` (`logbook sync setup`).
        case incompatibleSchema
        /// The change log misses changes this store has not read (rows removed by hand).
        case gap
        /// The container was not opened for sync (history tracking with member changes).
        case notConfigured
        /// The server reported an error.
        case server
        /// The local store failed.
        case store
        /// Another engine (in this process or another) kept syncing this store for longer
        /// than `SyncConfiguration.lockTimeout`: engines take turns, one push or pull at a time.
        case busy
    }
    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code.rawValue): \(message)" }

    /// An error of the connection or a query, with no password and no bound value in it.
    static func wrap(_ error: any Error, _ endpoint: Endpoint, doing what: String) -> SyncError {
        if let e = error as? SyncError { return e }
        if let e = error as? LogbookError { return SyncError(.store, "\(what): \(e)") }
        if let p = error as? PSQLError {
            let state = p.serverInfo?[.sqlState]
            let message = p.serverInfo?[.message] ?? p.code.description
            switch (p.code, state) {
            case (.server, "28P01"?), (.server, "28000"?), (.authMechanismRequiresPassword, _),
                (.unsupportedAuthMechanism, _), (.saslError, _):
                return SyncError(
                    .authentication, "\(endpoint.redacted) refused the login of \(endpoint.user): \(message)")
            case (.server, "3D000"?):
                return SyncError(.unreachable, "\(endpoint.redacted): \(message)")
            case (.connectionError, _), (.serverClosedConnection, _), (.sslUnsupported, _),
                (.failedToAddSSLHandler, _), (.uncleanShutdown, _):
                return SyncError(.unreachable, "\(what): \(endpoint.redacted) cannot be reached (\(p.code))")
            default:
                return SyncError(.server, "\(what): \(message)\(state.map { " (SQLSTATE \($0))" } ?? "")")
            }
        }
        if error is CancellationError { return SyncError(.unreachable, "\(what): cancelled") }
        // NIO's connection errors (refused, timed out): their text names the address only.
        return SyncError(.unreachable, "\(what): \(endpoint.redacted) cannot be reached (\(type(of: error)))")
    }
}

/// Quotes an SQL identifier.
func quoted(_ identifier: String) -> String { "\"" + identifier.replacingOccurrences(of: "\"", with: "\"\"") + "\"" }
