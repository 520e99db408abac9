import ArgumentParser
import Foundation
import LogbookEngine
import LogbookGraph

struct StatsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stats", abstract: "Print a store's segments, sizes and counts.")
    @Argument(help: "The store directory.") var directory: String
    @OptionGroup var key: KeyOption

    func run() throws {
        var options = StoreOptions()
        options.readOnly = true
        let names: RecordedNames
        let store: Store
        do {
            options.encryptionKey = try key.key()
            names = try RecordedNames(in: directory, encryptionKey: options.encryptionKey)
            store = try Store.open(at: directory, options: options)
        } catch { fail(error) }
        let s = store.statistics()
        print("version: \(s.version)")
        print("encrypted: \(store.isEncrypted ? "yes (AES-256-GCM)" : "no")")
        if let oldest = try? store.oldestVersion() {
            print("oldest readable version: \(oldest) (`--as-of` reads any version from it to \(s.version))")
        }
        print("segments: \(s.segments.count) (\(s.fileBytes) bytes)")
        for seg in s.segments { print("  \(seg.number): \(seg.bytes) bytes") }
        print("live bytes: \(s.liveBytes), dead bytes: \(s.deadBytes)")
        print("keys: \(s.keyCount)")
        for (ks, n) in s.keysPerKeyspace.sorted(by: { $0.key < $1.key }) {
            if let entity = names.entities[ks] {
                print("  \(entity) (keyspace \(ks)): \(n) records")
            } else if ks == 0 {
                print("  keyspace 0 (schema and counters): \(n) records")
            } else if ks == 0xFFFF {
                // History records (a tracked save's changes), keyed by version.
                let snapshot = store.snapshot()
                var bytes = 0
                snapshot.forEachKey(inKeyspace: ks) { key in
                    bytes += (try? snapshot.value(forKey: key))??.count ?? 0
                    return true
                }
                print("  history (keyspace \(ks)): \(n) transactions, \(bytes) bytes")
            } else if let relationship = names.relationships[ks] {
                print("  \(relationship) (keyspace \(ks)): \(n) records")
            } else {
                print("  keyspace \(ks): \(n) records")
            }
        }
        for (ix, n) in s.indexEntries.sorted(by: { $0.key < $1.key }) {
            print("  \(ix)\(names.indexes[ix].map { " (\($0))" } ?? ""): \(n) entries")
        }
        print("sets: \(s.setCount)")
        print("index memory: \(s.indexMemoryBytes) bytes")
        print("pinned snapshots: \(s.pinnedSnapshots)")
        print("checkpoint: \(s.checkpoint.map(String.init) ?? "none")")
    }
}
