import Dispatch
import Foundation

@testable import LogbookEngine

#if canImport(Glibc)
    import Glibc
#endif

/// A fresh directory under the system's temporary directory, removed by `cleanUp()`.
struct TemporaryDirectory {
    let path: String

    init() {
        let base = String(cString: getenv("TMPDIR") ?? strdup("/tmp"))
        var template = Array("\(base)/logbook-test-XXXXXX".utf8CString)
        let result = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        precondition(result != nil, "mkdtemp failed")
        path = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    func store(_ name: String = "store") -> String { path + "/" + name }

    func cleanUp() {
        _ = path.withCString { p in
            system("rm -rf '\(String(cString: p))'")
        }
    }
}

func key(_ keyspace: UInt16, _ id: UInt64) -> UInt64 { EngineKey(keyspace: keyspace, id: id).rawValue }

func bytes(_ s: String) -> [UInt8] { Array(s.utf8) }

func string(_ b: [UInt8]?) -> String? { b.map { String(decoding: $0, as: UTF8.self) } }

/// Every key → value of a keyspace, read through a snapshot.
func contents(_ snapshot: Snapshot, keyspace: UInt16 = 1) throws -> [UInt64: String] {
    var result: [UInt64: String] = [:]
    var keys: [UInt64] = []
    snapshot.forEachKey(inKeyspace: keyspace) {
        keys.append($0)
        return true
    }
    for k in keys { result[EngineKey(rawValue: k).id] = string(try snapshot.value(forKey: k)) }
    return result
}

/// Options for deterministic tests: no background work.
func quietOptions(_ durability: Durability = .full) -> StoreOptions {
    var o = StoreOptions()
    o.durability = durability
    o.checkpointInterval = 0
    o.checkpointOnClose = false
    o.compaction = .manual
    return o
}

func fileBytes(_ path: String) -> [UInt8] {
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

func writeFileBytes(_ path: String, _ bytes: [UInt8]) {
    guard let f = fopen(path, "wb") else { fatalError("cannot write \(path)") }
    _ = bytes.withUnsafeBytes { fwrite($0.baseAddress, 1, $0.count, f) }
    fclose(f)
}

func listDirectory(_ path: String) -> [String] {
    (try? PosixFileSystem().listDirectory(path)) ?? []
}

/// A seeded generator (SplitMix64), so that a failing random case can be run again.
struct SeededGenerator: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
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
func onOwnThread(group: DispatchGroup? = nil, _ body: @escaping @Sendable () -> Void) {
    group?.enter()
    let thread = Thread {
        body()
        group?.leave()
    }
    thread.start()
}
