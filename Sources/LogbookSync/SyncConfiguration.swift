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
