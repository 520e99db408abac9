import Foundation
import LogbookContextCheck
import LogbookGraph
import LogbookTestSupport
import Testing

/// The context checker across a crash: a child process (`LogbookCrashHelper contexts`) runs a
/// seed's steps over a store and is killed with SIGKILL during a step chosen at random; the
/// store it leaves must open, hold no broken link, and equal what the checker's own run of the
/// same steps held after the last step the child finished — or after the step it was killed
/// in, when that step's save was written before the kill. Nothing acknowledged is lost,
/// nothing is half-saved.
///
/// `LOGBOOK_CONTEXT_CRASH_SEEDS=N` runs N seeds (24 by default), from `LOGBOOK_CONTEXT_CRASH_SEED`
/// (1 by default); `LOGBOOK_MODEL_CHECK_STEPS` sets the steps per seed (40).
@Suite struct ContextCrashCheckTests {
    static func environment(_ name: String) -> Int? { ProcessInfo.processInfo.environment[name].flatMap { Int($0) } }

    static var helperPath: String { crashHelperPath }

    /// Runs the child until it begins step `killAt` (or ends), kills it, and returns the steps
    /// it finished.
    static func runChild(seed: UInt64, steps: Int, path: String, killAt: Int) throws -> (ended: Int, exited: Bool) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: helperPath)
        process.arguments = ["contexts", "\(seed)", "\(steps)", path]
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        var ended = -1
        var pending = ""
        var killed = false
        let reader = pipe.fileHandleForReading
        while true {
            let data = reader.availableData
            if data.isEmpty { break }
            pending += String(decoding: data, as: UTF8.self)
            while let newline = pending.firstIndex(of: "\n") {
                let line = pending[..<newline]
                pending = String(pending[pending.index(after: newline)...])
                let parts = line.split(separator: " ")
                if parts.count == 2, parts[0] == "end", let k = Int(parts[1]) { ended = k }
                if !killed, parts.count == 2, parts[0] == "begin", Int(parts[1]) == killAt {
                    // The step runs on while the signal is on its way: it lands anywhere in it.
                    kill(process.processIdentifier, SIGKILL)
                    killed = true
                }
            }
        }
        process.waitUntilExit()
        if !killed && process.terminationStatus != 0 {
            throw CheckFailure("the child failed (status \(process.terminationStatus)) after step \(ended)")
        }
        return (ended, !killed)
    }

    @Test func aKilledRunLeavesTheStoreOfItsLastFinishedStep() throws {
        let first = UInt64(Self.environment("LOGBOOK_CONTEXT_CRASH_SEED") ?? 1)
        let seeds = Self.environment("LOGBOOK_CONTEXT_CRASH_SEEDS") ?? 24
        let count = Self.environment("LOGBOOK_MODEL_CHECK_STEPS") ?? 40
        #expect(FileManager.default.isExecutableFile(atPath: Self.helperPath), "helper at \(Self.helperPath)")
        var inFlightWritten = 0
        var stepsFinished = 0
        for seed in first..<(first + UInt64(seeds)) {
            let (specs, steps) = ContextModelChecker.draw(seed: seed, steps: count)
            var random = SeededGenerator(seed: seed &* 0x9E37_79B9_7F4A_7C15)
            let killAt = Int.random(in: 0..<steps.count, using: &random)
            let directory = TemporaryStore()
            let (ended, _) = try Self.runChild(seed: seed, steps: count, path: directory.path, killAt: killAt)
            stepsFinished += ended + 1
            // The checker's own run of the same steps: the store after each step.
            let key = ContextModelChecker.encryptionKey(seed: seed)
            let replay = try ContextModelRun(specs: specs, encryptionKey: key)
            var states: [[String]] = [try replay.dump()]
            for step in steps.prefix(min(ended + 2, steps.count)) {
                try replay.run(step)
                states.append(try replay.dump())
            }
            let container = try PersistentContainer(
                name: "Check", model: CheckedModel.make(), directory: directory.path,
                options: ContextModelRun.options(key))
            #expect(container.store.isEncrypted == (key != nil))
            defer { try? container.close() }
            try ContextModelRun.checkStore(container)
            let found = try ContextModelRun.dump(container)
            let acknowledged = states[ended + 1]
            let inFlight = states[min(ended + 2, states.count - 1)]
            if found != acknowledged && found == inFlight { inFlightWritten += 1 }
            #expect(
                found == acknowledged || found == inFlight,
                """
                seed \(seed), killed in step \(killAt + 1) (\(steps[killAt])) after \(ended + 1) finished steps:
                found \(found)
                after the last finished step \(acknowledged)
                after the step killed \(inFlight)
                """)
        }
        print(
            "context crash check: \(seeds) seeds, \(stepsFinished) steps finished before the kills, \(inFlightWritten) kills after the step's save was written"
        )
    }
}
