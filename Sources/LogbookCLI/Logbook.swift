import ArgumentParser

@main
struct LogbookCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "logbook",
        abstract: "Populate, benchmark, inspect, verify and compact Logbook stores.",
        subcommands: [
            Bench.self, Stats.self, Verify.self, Schema.self, Count.self, Query.self, History.self, Export.self,
            Compact.self
        ])
}
