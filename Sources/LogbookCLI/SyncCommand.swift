import ArgumentParser
import Dispatch
import Foundation
import LogbookEngine
import LogbookGraph
import LogbookSync

/// `logbook sync setup|status|push|pull`: a store kept in step through PostgreSQL (docs/sync.md).
struct SyncCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sync",
        abstract: "Keep a store in step with others through PostgreSQL (docs/sync.md).",
        subcommands: [Setup.self, Status.self, Push.self, Pull.self])

    /// What every sync subcommand takes.
    struct Connection: ParsableArguments {
        @Argument(help: "The store directory.") var directory: String
        @Option(
            help: ArgumentHelp(
                "The server: postgres://user:password@host:port/database[?sslmode=require]. The user is the store's scope.",
                valueName: "url"))
        var postgres: String
        @Option(help: "The schema of the change log and the tables.") var schema = "logbook"
        @Option(help: "Changes per round trip.") var batchSize = 1000
        @OptionGroup var key: KeyOption
        @Flag(help: "Print JSON.") var json = false

        func configuration() throws -> SyncConfiguration {
            try SyncConfiguration(url: postgres, schema: schema, batchSize: batchSize)
        }

        /// The store, opened to write with history and member changes recorded, and its engine.
        func open() throws -> (PersistentContainer, SyncEngine) {
            let key = try key.key()
            let model = try ManagedObjectModel(recordedIn: directory, encryptionKey: key)
            var options = ContainerOptions()
            options.encryptionKey = key
            options.persistentHistoryTracking = true
            options.historyRecordsMemberChanges = true
            let container = try PersistentContainer(name: "sync", model: model, directory: directory, options: options)
            return (container, try SyncEngine(container: container, configuration: configuration()))
        }
    }

    struct Setup: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Create (or bring up to the store's model) the server's schema, change log and tables, with row-level security; grant the scope roles named.",
            discussion: "Run it with the URL of a role that owns the schema (or may create it).")
        @OptionGroup var connection: Connection
        @Option(name: .customLong("scope"), help: "A role that may sync (repeatable).") var scopes: [String] = []

        func run() throws {
            let connection = self.connection
            let scopes = self.scopes
            try waitFor {
                let key = try connection.key.key()
                let model = try ManagedObjectModel(recordedIn: connection.directory, encryptionKey: key)
                try await SyncServer.prepare(
                    model: model, configuration: try connection.configuration(), scopes: scopes)
                print(connection.json ? "{\"prepared\": true}" : "prepared \(connection.schema)")
            }
        }
    }

    struct Status: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "The store's version, the last version pushed, what is left to push and to pull.")
        @OptionGroup var connection: Connection

        func run() throws {
            let connection = self.connection
            try waitFor {
                let (container, engine) = try connection.open()
                defer { try? container.close() }
                let s = try await engine.status()
                if connection.json {
                    print(
                        "{\"localVersion\": \(s.localVersion), \"pushedVersion\": \(s.pushedVersion.map(String.init) ?? "null"), \"pendingTransactions\": \(s.pendingTransactions), \"pulledSequence\": \(s.pulledSequence), \"serverSequence\": \(s.serverSequence)}"
                    )
                } else {
                    print(
                        "version=\(s.localVersion) pushed=\(s.pushedVersion.map(String.init) ?? "never") to_push=\(s.pendingTransactions) pulled=\(s.pulledSequence) server=\(s.serverSequence) to_pull=\(max(0, s.serverSequence - s.pulledSequence))"
                    )
                }
            }
        }
    }

    struct Push: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Send the local transactions the server lacks.")
        @OptionGroup var connection: Connection

        func run() throws {
            let connection = self.connection
            try waitFor {
                try await withProgress("push", connection) { engine, progress in
                    try await engine.push(progress: progress)
                }
            }
        }
    }

    struct Pull: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Apply the changes of other stores the server holds, in its order.")
        @OptionGroup var connection: Connection

        func run() throws {
            let connection = self.connection
            try waitFor {
                try await withProgress("pull", connection) { engine, progress in
                    try await engine.pull(progress: progress)
                }
            }
        }
    }
}

/// Opens the store, runs a push or pull with a progress bar named `label`, prints its report.
func withProgress(
    _ label: String, _ connection: SyncCommand.Connection,
    _ work: (SyncEngine, @escaping @Sendable (Int, Int) -> Void) async throws -> SyncReport
) async throws {
    let (container, engine) = try connection.open()
    defer { try? container.close() }
    let bar = Locked(ProgressBar(label, total: 1))
    let report = try await work(engine) { done, total in
        bar.withLock { b in
            if b.total != max(1, total) { b = ProgressBar(label, total: total) }
            b.update(done)
        }
    }
    bar.withLock { $0.finish() }
    printReport(report, json: connection.json)
}

func printReport(_ r: SyncReport, json: Bool) {
    if json {
        print(
            "{\"pushedTransactions\": \(r.pushedTransactions), \"pushedChanges\": \(r.pushedChanges), \"pulledRows\": \(r.pulledRows), \"appliedChanges\": \(r.appliedChanges)}"
        )
    } else {
        print(
            "pushed_transactions=\(r.pushedTransactions) pushed_changes=\(r.pushedChanges) pulled_rows=\(r.pulledRows) applied_changes=\(r.appliedChanges)"
        )
    }
}

/// Runs async work from a synchronous command, failing the command (one line, no password) on
/// an error.
func waitFor(_ work: @escaping @Sendable () async throws -> Void) throws {
    let done = DispatchSemaphore(value: 0)
    let failure = Locked<(any Error)?>(nil)
    Task {
        do { try await work() } catch { failure.withLock { $0 = error } }
        done.signal()
    }
    done.wait()
    if let error = failure.withLock({ $0 }) { fail(error) }
}
