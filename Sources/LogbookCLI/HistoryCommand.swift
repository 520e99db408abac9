import ArgumentParser
import Foundation
import LogbookEngine
import LogbookGraph

struct HistoryCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "history",
        abstract: "Print the transactions history recorded (saves made with history tracking on).",
        discussion: """
            One line per transaction: its version, time, author and context name, and per entity \
            the number of objects inserted (+), updated (~) and deleted (-).
            """)
    @Argument(help: "The store directory.") var directory: String
    @OptionGroup var key: KeyOption
    @Option(help: "Only the transactions after this version.") var since: UInt64?
    @Flag(help: "Print JSON (one array).") var json = false

    func run() throws {
        do {
            let (container, _) = try openRecorded(directory, key: key.key())
            let transactions = try container.history(after: since.map(PersistentHistoryToken.init(version:)))
            if json { print("[", terminator: "") }
            for (n, t) in transactions.enumerated() {
                let version = t.token.version
                let counts = t.counts().sorted { $0.key < $1.key }
                if json {
                    let entities = counts.map {
                        "\"\(escape($0.key))\": {\"inserted\": \($0.value.inserted), \"updated\": \($0.value.updated), \"deleted\": \($0.value.deleted)}"
                    }.joined(separator: ", ")
                    print(
                        (n == 0 ? "\n" : ",\n")
                            + "  {\"version\": \(version), \"time\": \(jsonValue(t.timestamp)), \"author\": \(jsonValue(t.author)), \"contextName\": \(jsonValue(t.contextName)), \"entities\": {\(entities)}}",
                        terminator: "")
                } else {
                    let summary = counts.map {
                        "\($0.key) +\($0.value.inserted) ~\($0.value.updated) -\($0.value.deleted)"
                    }.joined(separator: ", ")
                    print(
                        "version=\(version) time=\(isoFormatter.string(from: t.timestamp))"
                            + " author=\(t.author ?? "-") context=\(t.contextName ?? "-") \(summary)")
                }
            }
            if json { print("\n]") }
            try? container.close()
        } catch { fail(error) }
    }
}
