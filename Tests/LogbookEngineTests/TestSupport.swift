import Dispatch
import Foundation

@testable import LogbookEngine

#if canImport(Glibc)
    import Glibc
#endif

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

/// The directory and first segment of a store on a `FaultFileSystem`.
enum FaultStorePaths {
    static let directory = "/store"
    static let segment = "/store/" + JournalFormat.segmentPrefix + "000000000001" + JournalFormat.segmentSuffix
}

/// Commits one put of `text` under key `id` of keyspace 1.
func commitOne(_ store: Store, _ id: UInt64, _ text: String) throws {
    var t = Transaction()
    t.put(key(1, id), value: bytes(text))
    try store.commit(t)
}
