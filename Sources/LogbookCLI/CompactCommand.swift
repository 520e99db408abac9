import ArgumentParser
import Foundation
import LogbookEngine
import LogbookGraph

struct CompactCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "compact",
        abstract: "Compact a store: rewrite its live records and reclaim the rest.")
    @Argument(help: "The store directory.") var directory: String
    @OptionGroup var key: KeyOption

    func run() throws {
        do {
            var options = StoreOptions()
            options.compaction = .manual
            options.encryptionKey = try key.key()
            // The versions of the recorded history stay readable (`--as-of`), as in a container
            // that tracks history with its retention at `.all`: only segments before the oldest
            // recorded transaction are folded.
            let opened = Locked<Store?>(nil)
            options.beforeCompaction = {
                guard let store = opened.withLock({ $0 }) else { return nil }
                var oldest: UInt64?
                store.snapshot().forEachKey(inKeyspace: 0xFFFF) { key in
                    oldest = EngineKey(rawValue: key).id
                    return false
                }
                return oldest.map { $0 - 1 }
            }
            let store = try Store.open(at: directory, options: options)
            opened.withLock { $0 = store }
            let report = try store.compact()
            opened.withLock { $0 = nil }
            try store.close()
            print(
                "compact seconds=\(String(format: "%.3f", report.seconds)) bytes_before=\(report.bytesBefore) bytes_after=\(report.bytesAfter) segments_removed=\(report.segmentsRemoved)"
            )
        } catch { fail(error) }
    }
}
