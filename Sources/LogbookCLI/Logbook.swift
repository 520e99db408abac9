import ArgumentParser

@main
struct LogbookCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "logbook",
        abstract: "Populate, benchmark, inspect, verify and compact Logbook stores.",
        subcommands: [
            BenchCommand.self, StatsCommand.self, VerifyCommand.self, SchemaCommand.self, CountCommand.self,
            QueryCommand.self, HistoryCommand.self, ExportCommand.self, ImportCommand.self,
            CompactCommand.self, RekeyCommand.self, SyncCommand.self
        ])
}
