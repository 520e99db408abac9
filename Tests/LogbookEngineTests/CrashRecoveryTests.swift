import Foundation
import LogbookTestSupport
import Testing

@testable import LogbookEngine

/// A child process commits and acknowledges each commit over a pipe; it is killed with
/// SIGKILL at a random moment; every acknowledged commit must be there after reopening, and
/// no commit in part. 50 iterations by default; set LOGBOOK_CRASH_ITERATIONS for more. On a
/// plain store and on an encrypted one.
@Suite struct CrashRecoveryTests {
    static var helperPath: String { crashHelperPath }

    @Test(arguments: [false, true]) func killDashNineNeverLosesAnAcknowledgedCommit(encrypted: Bool) throws {
        let iterations = Int(ProcessInfo.processInfo.environment["LOGBOOK_CRASH_ITERATIONS"] ?? "") ?? 50
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let keyFile = dir.path + "/key"
        let storeKey = EncryptionKey.random()
        writeFileBytes(keyFile, storeKey.bytes)
        let helper = Self.helperPath
        #expect(FileManager.default.isExecutableFile(atPath: helper), "helper at \(helper)")
        var lastAcknowledged = -1
        var totalAcknowledged = 0
        for iteration in 0..<iterations {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: helper)
            process.arguments = [dir.store()] + (encrypted ? [keyFile] : [])
            let pipe = Pipe()
            process.standardOutput = pipe
            try process.run()
            // Let it run between 5 and 60 ms, then kill it.
            usleep(UInt32.random(in: 5_000...60_000))
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            let acknowledged = output.split(separator: "\n").compactMap { Int($0) }
            if let last = acknowledged.last {
                lastAcknowledged = last
                totalAcknowledged += acknowledged.count
            }
            var options = StoreOptions()
            options.readOnly = true
            if encrypted { options.encryptionKey = storeKey }
            let store: Store
            do {
                store = try Store.open(at: dir.store(), options: options)
            } catch EngineError.Code.notAStore where lastAcknowledged < 0 {
                // Killed before it made the store (a slow start on a loaded machine): nothing
                // was acknowledged, so there is nothing to find.
                continue
            }
            let s = store.snapshot()
            let pairs = s.count(inKeyspace: 1)
            #expect(pairs % 2 == 0, "iteration \(iteration): a commit survived in part (\(pairs) keys)")
            let committed = pairs / 2
            #expect(
                committed >= lastAcknowledged + 1,
                "iteration \(iteration): acknowledged \(lastAcknowledged), found \(committed)")
            // Every commit present is whole and correct.
            for i in Swift.stride(from: 0, to: committed, by: max(1, committed / 50)) + [committed - 1] where i >= 0 {
                #expect(string(try s.value(forKey: key(1, 2 * UInt64(i)))) == "a\(i)")
                #expect(string(try s.value(forKey: key(1, 2 * UInt64(i) + 1))) == "b\(i)")
            }
            #expect(try s.indexCount(index: 1) == committed)
            #expect(store.isEncrypted == encrypted)
            lastAcknowledged = committed - 1
        }
        #expect(totalAcknowledged > 0)
    }
}
