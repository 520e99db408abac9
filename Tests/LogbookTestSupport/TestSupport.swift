import Dispatch
import Foundation
import LogbookEngine

#if canImport(Glibc)
    import Glibc
#endif

// Helpers the test targets share: temporary directories and stores, file bytes, a seeded
// generator, threads of their own. (The fault-injecting file system is beside this file.)

/// A fresh directory under the system's temporary directory, removed by `cleanUp()`.
package struct TemporaryDirectory {
    package let path: String

    package init() {
        let base = String(cString: getenv("TMPDIR") ?? strdup("/tmp"))
        var template = Array("\(base)/logbook-test-XXXXXX".utf8CString)
        let result = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        precondition(result != nil, "mkdtemp failed")
        path = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    package func store(_ name: String = "store") -> String { path + "/" + name }

    package func cleanUp() {
        _ = path.withCString { p in
            system("rm -rf '\(String(cString: p))'")
        }
    }
}

package func fileBytes(_ path: String) -> [UInt8] {
    guard let f = fopen(path, "rb") else { return [] }
    defer { fclose(f) }
    var result: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 1 << 16)
    while true {
        let n = fread(&buffer, 1, buffer.count, f)
        if n <= 0 { break }
        result.append(contentsOf: buffer[0..<n])
    }
    return result
}

package func writeFileBytes(_ path: String, _ bytes: [UInt8]) {
    guard let f = fopen(path, "wb") else { fatalError("cannot write \(path)") }
    _ = bytes.withUnsafeBytes { fwrite($0.baseAddress, 1, $0.count, f) }
    fclose(f)
}

package func listDirectory(_ path: String) -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted()
}

/// A seeded generator (SplitMix64), so that a failing random case can be run again.
package struct SeededGenerator: RandomNumberGenerator {
    private var state: UInt64
    package init(seed: UInt64) { state = seed }
    package mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Runs `body` on a thread of its own, inside `group` until it returns. Not on the global
/// queue: the test runner's tasks run on that queue's threads too, and while tests that run
/// for a long time hold all of them (one per core), work queued there may wait for minutes.
package func onOwnThread(group: DispatchGroup? = nil, _ body: @escaping @Sendable () -> Void) {
    group?.enter()
    let thread = Thread {
        body()
        group?.leave()
    }
    thread.start()
}

/// A fresh store directory, removed at the end.
package final class TemporaryStore {
    package let directory: String
    package init() {
        directory =
            FileManager.default.temporaryDirectory.appendingPathComponent("logbook-tests-\(UUID().uuidString)").path
    }
    package var path: String { directory + "/store" }
    deinit { try? FileManager.default.removeItem(atPath: directory) }
}

/// The path of `LogbookCrashHelper`, the executable the crash tests run and kill: beside the
/// test bundle's executable (or a directory above it, when the tests run inside a bundle).
package var crashHelperPath: String {
    let executable =
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    var directory = URL(fileURLWithPath: executable).deletingLastPathComponent()
    while directory.path != "/"
        && !FileManager.default.fileExists(atPath: directory.appendingPathComponent("LogbookCrashHelper").path)
    {
        directory = directory.deletingLastPathComponent()
    }
    return directory.appendingPathComponent("LogbookCrashHelper").path
}
