import ArgumentParser
import Foundation
import LogbookEngine
import LogbookGraph

struct VerifyCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Check every checksum, record and index of a store against its journal, without changing it.",
        discussion:
            "Exit status: 0 when the store is sound, 1 when it is damaged (the file and offset are printed), 2 when the directory is not a store or cannot be read."
    )
    @Argument(help: "The store directory.") var directory: String
    @OptionGroup var key: KeyOption

    func run() throws {
        let report: VerificationReport
        do {
            report = try Store.verify(at: directory, encryptionKey: key.key())
        } catch let e as EngineError where e.code == .corruption {
            printError("logbook: damaged: \(e)")
            print("damaged")
            throw ExitCode(1)
        } catch {
            fail(error, code: 2)
        }
        print("segments: \(report.segments) (\(report.segmentBytes) bytes)")
        print("commits replayed: \(report.commits), version \(report.version)")
        print("checkpoint: \(report.checkpoint.map { "\($0), compared with the journal" } ?? "none")")
        print("records: \(report.records), index entries: \(report.indexEntries), set members: \(report.setMembers)")
        if report.uncommittedTailBytes > 0 {
            print(
                "uncommitted tail: \(report.uncommittedTailBytes) bytes after the last commit (a torn write; the next open cuts it)"
            )
        }
        if report.isSound {
            print("sound")
            return
        }
        for p in report.problems { printError("logbook: damaged: \(p)") }
        print("damaged: \(report.problems.count) problem\(report.problems.count == 1 ? "" : "s")")
        throw ExitCode(1)
    }
}
