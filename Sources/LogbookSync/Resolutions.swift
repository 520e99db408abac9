import Foundation
import LogbookEngine
import LogbookGraph

/// The properties whose local changes a resolver gave up (`.takeRemote` on a change not pushed
/// yet): property `name` of the object with key `key`, changed by local transactions up to
/// `version`, is no longer this store's to push. Kept in one record (keyspace 65534, the last
/// id), written with the pull that took the values; entries the server already holds the
/// transactions of are dropped at the next write. Empty without a resolver.
struct TakenValues: Sendable, Equatable {
    static let recordKey = EngineKey(keyspace: Identity.keyspace, id: EngineKey.maxID).rawValue

    private(set) var versions: [UInt64: [String: UInt64]] = [:]

    /// Whether property `name` of `key`, as a local transaction at `version` changed it, was given up.
    func gaveUp(_ key: UInt64, _ name: String, at version: UInt64) -> Bool {
        guard let taken = versions[key]?[name] else { return false }
        return version <= taken
    }

    mutating func giveUp(_ key: UInt64, _ name: String, through version: UInt64) {
        versions[key, default: [:]][name] = max(versions[key]?[name] ?? 0, version)
    }

    /// Drops what concerns only transactions up to `pushed` (the server has them).
    mutating func forget(through pushed: UInt64) {
        for (key, names) in versions {
            let left = names.filter { $0.value > pushed }
            versions[key] = left.isEmpty ? nil : left
        }
    }

    static func load(_ container: PersistentContainer) throws -> TakenValues {
        guard let bytes = try container.store.snapshot().value(forKey: recordKey) else { return TakenValues() }
        var taken = TakenValues()
        var reader = ByteReader(bytes)
        guard reader.byte() == 1 else { throw SyncError(.store, "the sync record of given-up values is malformed") }
        while !reader.atEnd {
            guard let key = reader.u64(), let version = reader.u64(), let name = reader.string() else {
                throw SyncError(.store, "the sync record of given-up values is malformed")
            }
            taken.giveUp(key, name, through: version)
        }
        return taken
    }

    /// The record: a format byte (1), then for each entry its key and version (u64 LE), its
    /// name's length (u16 LE) and UTF-8 bytes.
    var encoded: [UInt8] {
        var out: [UInt8] = [1]
        for (key, names) in versions.sorted(by: { $0.key < $1.key }) {
            for (name, version) in names.sorted(by: { $0.key < $1.key }) {
                for v in [key, version] { out += (0..<8).map { UInt8(truncatingIfNeeded: v >> (8 * $0)) } }
                let utf8 = Array(name.utf8)
                out += [UInt8(truncatingIfNeeded: utf8.count), UInt8(truncatingIfNeeded: utf8.count >> 8)]
                out += utf8
            }
        }
        return out
    }
}

/// Little-endian reads from a record's bytes.
struct ByteReader {
    private let bytes: [UInt8]
    private var at = 0
    init(_ bytes: [UInt8]) { self.bytes = bytes }
    var atEnd: Bool { at >= bytes.count }

    mutating func byte() -> UInt8? {
        guard at < bytes.count else { return nil }
        defer { at += 1 }
        return bytes[at]
    }

    mutating func u64() -> UInt64? {
        guard at + 8 <= bytes.count else { return nil }
        defer { at += 8 }
        return (0..<8).reduce(UInt64(0)) { $0 | UInt64(bytes[at + $1]) << (8 * $1) }
    }

    mutating func string() -> String? {
        guard at + 2 <= bytes.count else { return nil }
        let count = Int(bytes[at]) | Int(bytes[at + 1]) << 8
        guard at + 2 + count <= bytes.count else { return nil }
        defer { at += 2 + count }
        return String(decoding: bytes[(at + 2)..<(at + 2 + count)], as: UTF8.self)
    }
}

/// Values a resolver chose for properties whose change this store had pushed already, after a
/// concurrent change of another store's that came before it in the server's order: set by a
/// local transaction after the pull (author `sync-resolver`), which the next push sends.
struct FollowUps {
    enum Value {
        case attribute((any Sendable)?)
        case toOne(ObjectID?)

        /// The value as a resolver sees it.
        var value: (any Sendable)? {
            switch self {
            case .attribute(let v): v
            case .toOne(let id): id
            }
        }
    }
    var values: [UInt64: [String: Value]] = [:]
    var isEmpty: Bool { values.isEmpty }

    /// A later pulled change of the property supersedes the resolution.
    mutating func drop(_ key: UInt64, _ name: String) {
        guard values[key]?[name] != nil else { return }
        values[key]?[name] = nil
        if values[key]?.isEmpty ?? false { values[key] = nil }
    }
}
