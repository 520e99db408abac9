import Foundation
import LogbookGraph
import LogbookTestSupport
import Testing

@testable import LogbookSync

#if canImport(Glibc)
    import Glibc
#endif

/// Sync under faults: a pushing or pulling process killed with SIGKILL in the middle, and the
/// server restarted while stores sync in the background. Afterwards every store and the
/// server hold the same, nothing acknowledged is lost and nothing is there twice.
@Suite(.serialized) struct SyncCrashTests {
    /// A store of `count` Items with names, in one save.
    func populated(_ f: SyncFixture, count: Int) throws -> (PersistentContainer, SyncEngine) {
        let (a, sync) = try f.store()
        let c = a.newContext(confinement: ())
        for i in 0..<count { try insert(c, "Item", ["name": "n\(i)", "count": Int64(i)]) }
        try c.save()
        return (a, sync)
    }

    /// Runs the helper's `sync` mode and kills it after it reported `batches` batches.
    func killedHelper(_ mode: String, _ path: String, _ f: SyncFixture, batches: Int) throws -> Int {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: crashHelperPath)
        process.arguments = ["sync", mode, path, try f.url(), f.schema, "200"]
        let out = Pipe()
        process.standardOutput = out
        process.standardError = Pipe()
        try process.run()
        var seen = 0
        var buffer = Data()
        let handle = out.fileHandleForReading
        while seen < batches {
            let chunk = handle.availableData
            if chunk.isEmpty { break }
            buffer.append(chunk)
            seen = String(decoding: buffer, as: UTF8.self).components(separatedBy: "batch ").count - 1
        }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        return seen
    }

    @Test func aPushKilledMidwayIsResumedWithNothingTwice() async throws {
        let f = try await SyncFixture()
        do {
            let (a, syncA) = try populated(f, count: 5_000)
            let seen = try killedHelper("push", f.stores[0].path, f, batches: 10)
            #expect(seen >= 10, "the helper pushed \(seen) batches before it was killed")
            let partial = try await f.rows("SELECT count(*)::text FROM \(f.schema).\"Item\"")
            #expect(partial != ["5000"] && partial != ["0"], "killed in the middle: \(partial)")
            try await syncA.push()
            #expect(try await f.rows("SELECT count(*)::text FROM \(f.schema).\"Item\"") == ["5000"])
            #expect(
                try await f.rows(
                    "SELECT count(*)::text FROM (SELECT store, store_version, part FROM \(f.schema).logbook_changes GROUP BY 1, 2, 3 HAVING count(*) > 1) d"
                ) == ["0"])
            let (b, syncB) = try f.store()
            try await syncB.pull()
            #expect(try dump(b) == dump(a))
        } catch {
            await f.tearDown()
            throw error
        }
        await f.tearDown()
    }

    @Test func aPullKilledMidwayIsResumedWithNothingTwice() async throws {
        let f = try await SyncFixture()
        do {
            let (a, syncA) = try populated(f, count: 5_000)
            try await syncA.push()
            let (b, syncB) = try f.store()
            // The store exists (its model recorded) and has pushed its empty state.
            try await syncB.push()
            let seen = try killedHelper("pull", f.stores[1].path, f, batches: 3)
            #expect(seen >= 3)
            let partial = try b.newContext(confinement: ()).count(for: FetchRequest<ManagedObject>(entityName: "Item"))
            #expect(partial > 0 && partial < 5_000, "killed in the middle: \(partial)")
            try await syncB.pull()
            #expect(try dump(b) == dump(a))
            #expect(
                try b.newContext(confinement: ()).count(for: FetchRequest<ManagedObject>(entityName: "Item")) == 5_000)
        } catch {
            await f.tearDown()
            throw error
        }
        await f.tearDown()
    }

    /// The server restarted (at once, cutting every connection) while two stores sync in the
    /// background and one of them saves: every save reaches the other store once the server is
    /// back, and the background tasks recover by themselves. On a server of the test's own: a
    /// restart of the shared one cut the connections of the sync tests running beside it (CI
    /// saw `fourStoresUnderFaultsConverge` fail so).
    @Test func theServerRestartedMidSyncLosesNothing() async throws {
        try await Self.withServerOfItsOwn { url, dir in
            let f = try await SyncFixture(url: url)
            do {
                let (a, syncA) = try f.store()
                let (b, syncB) = try f.store()
                await syncA.start(interval: .seconds(1))
                await syncB.start(interval: .seconds(1))
                let c = a.newContext(confinement: ())
                let started = try await f.rows("SELECT pg_postmaster_start_time()::text")
                for i in 0..<60 {
                    try insert(c, "Item", ["name": "r\(i)"])
                    try c.save()
                    if i == 20 {
                        // system(3), not Process: Process.waitUntilExit in a task did not see the
                        // shell end. Output to /dev/null: a pipe nobody reads would stop the server
                        // started again once full. (Its status is not read: another test's
                        // process handling may reap the shell first. The server's start time,
                        // below, tells that it restarted.)
                        _ = system("'\(Self.postgresScript)' restart '\(dir)' >/dev/null 2>&1")
                    }
                    try await Task.sleep(for: .milliseconds(10))
                }
                let reader = b.newContext(confinement: ())
                var count = 0
                for _ in 0..<600 {
                    count = try reader.count(for: FetchRequest<ManagedObject>(entityName: "Item"))
                    if count == 60 { break }
                    try await Task.sleep(for: .milliseconds(50))
                }
                #expect(count == 60, "every save reached the other store after the restart")
                #expect(try await f.rows("SELECT pg_postmaster_start_time()::text") != started, "the server restarted")
                await syncA.stop()
                await syncB.stop()
                #expect(try dump(a) == dump(b))
                #expect(try await f.rows("SELECT count(*)::text FROM \(f.schema).\"Item\"") == ["60"])
            } catch {
                await f.tearDown()
                throw error
            }
            await f.tearDown()
        }
    }

    /// Runs `body` with a throwaway server of its own (`.ci/postgres start`, on a port of its
    /// own), stopped and removed after it: the server's URL and directory.
    ///
    /// The port is drawn below the kernel's ephemeral range (`ip_local_port_range`): a port in it
    /// may be the local end of one of the other tests' connections at that moment, and the server
    /// then cannot bind it (CI saw a start fail so on port 57,874). A start that fails anyway is
    /// tried again on another port, up to four times.
    static func withServerOfItsOwn(_ body: (_ url: String, _ dir: String) async throws -> Void) async throws {
        var failures: [String] = []
        for _ in 0..<4 {
            let dir = NSTemporaryDirectory() + "logbook-pg-own-\(UUID().uuidString.prefix(8).lowercased())"
            let port = Self.portBelowTheEphemeralRange()
            // The script prints the URL once the server runs (system(3)'s status is not read:
            // another test's process handling may reap the shell first).
            let status = system("'\(postgresScript)' start '\(dir)' \(port) >'\(dir).url' 2>'\(dir).log'")
            defer {
                _ = system("'\(postgresScript)' stop '\(dir)' >/dev/null 2>&1")
                for path in [dir, dir + ".url", dir + ".log"] { try? FileManager.default.removeItem(atPath: path) }
            }
            guard let text = try? String(contentsOfFile: dir + ".url", encoding: .utf8),
                let url = text.split(separator: "\n").last.map(String.init), url.hasPrefix("postgres://")
            else {
                let log = (try? String(contentsOfFile: dir + ".log", encoding: .utf8)) ?? ""
                let server = (try? String(contentsOfFile: dir + "/server.log", encoding: .utf8)) ?? ""
                failures.append("port \(port) (status \(status)): \(log) \(server.suffix(600))")
                continue
            }
            try await body(url, dir)
            return
        }
        Issue.record(
            "a server of the test's own did not start (.ci/postgres start): \(failures.joined(separator: "; "))")
    }

    /// A port from 20,000 up to the start of the kernel's ephemeral range (32,768 unless
    /// `/proc/sys/net/ipv4/ip_local_port_range` says otherwise), never the shared server's.
    static func portBelowTheEphemeralRange() -> Int {
        let range = (try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8)) ?? ""
        let low = range.split(whereSeparator: \.isWhitespace).first.flatMap { Int($0) } ?? 32_768
        let top = low > 21_000 ? low : 32_768
        return Int.random(in: 20_000..<top)
    }

    /// `.ci/postgres`, found from this source file's place in the repository.
    static let postgresScript: String = {
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { url.deleteLastPathComponent() }
        return url.appendingPathComponent(".ci/postgres").path
    }()
}
