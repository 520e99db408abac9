import Foundation
import LogbookTestSupport
import Testing

@testable import LogbookEngine
@testable import LogbookGraph

/// A store whose checkpoint holds a secondary-index section that fails the check made after
/// the open, and whose journal cannot give the indexes either (`DeferredIndexes`): what an
/// app sees through the object layer.
@Suite struct UnreadableIndexTests {
    @Test func fetchesScanInsteadAndSavesAreRefusedWithTheReason() throws {
        let store = TemporaryStore()
        let base = Date(timeIntervalSince1970: 1_700_000_000)
        // Where the journal ends (its one segment's last commit; the file is longer while the
        // store is open: space is allocated ahead of commits).
        func journalBytes(_ container: PersistentContainer) -> UInt64 {
            UInt64(container.store.statistics().fileBytes)
        }
        // The first version of every item is superseded by a batch update: damage in it is
        // damage that only a replay of the whole journal meets.
        let (insertStart, insertEnd): (UInt64, UInt64)
        do {
            let container = try makeContainer(store, model: todoModel())
            let context = container.newContext(concurrencyType: .confinement)
            insertStart = journalBytes(container)
            _ = try context.execute(
                BatchInsertRequest(entityName: "TodoItem", count: 1_000) { i, row in
                    row.set("Item \(i + 1)", forKey: "name")
                    row.set(base + Double(i), forKey: "createdAt")
                    row.set(i % 2 == 1, forKey: "done")
                })
            insertEnd = journalBytes(container)
            var rename = BatchUpdateRequest(entityName: "TodoItem")
            rename.propertiesToUpdate = ["name": "Item"]
            _ = try context.execute(rename)
            try container.store.checkpoint()
            try container.close()
        }
        // The checkpoint rewritten with a byte after its last section (its checksums right),
        // and the journal damaged where neither an open from that checkpoint nor a read of a
        // live record reads.
        let directory = store.path
        let number = try #require(
            try FileManager.default.contentsOfDirectory(atPath: directory).compactMap {
                Recovery.number($0, JournalFormat.checkpointPrefix, JournalFormat.checkpointSuffix)
            }.first)
        let loaded = try Checkpoint.read(
            path: joinPath(directory, Checkpoint.fileName(number)), number: number, fileSystem: PosixFileSystem())
        try Checkpoint.write(number: number, directory: directory, fileSystem: PosixFileSystem()) { chunk, leaf in
            Checkpoint.encode(loaded.state, segment: loaded.segment, offset: loaded.offset, leaf: leaf, chunk: chunk)
            [UInt8(1)].withUnsafeBytes { chunk($0) }
        }
        let segment = try #require(
            try FileManager.default.contentsOfDirectory(atPath: directory).filter {
                $0.hasPrefix(JournalFormat.segmentPrefix)
            }.sorted().first)
        let handle = try #require(FileHandle(forUpdatingAtPath: joinPath(directory, segment)))
        let middle = (insertStart + insertEnd) / 2
        try handle.seek(toOffset: middle)
        let byte = try #require(try handle.read(upToCount: 1)?.first)
        try handle.seek(toOffset: middle)
        try handle.write(contentsOf: [byte ^ 0xFF])
        try handle.close()

        let container = try makeContainer(store, model: todoModel())
        defer { try? container.close() }
        let context = container.newContext(concurrencyType: .confinement)
        // Conditions on indexed attributes are answered by scanning the records.
        var done = FetchRequest<TodoItem>()
        done.predicate = try FetchPredicate(format: "done == YES")
        #expect(try context.count(for: done) == 500)
        var range = FetchRequest<TodoItem>()
        range.predicate = try FetchPredicate(format: "createdAt >= %@", base + 990)
        range.sortDescriptors = [FetchSortDescriptor(key: "createdAt", ascending: false)]
        #expect(try context.fetch(range).map(\.createdAt).prefix(2) == [base + 999, base + 998])
        var first = FetchRequest<TodoItem>()
        first.sortDescriptors = [FetchSortDescriptor(key: "createdAt")]
        first.fetchLimit = 1
        #expect(try context.fetch(first).map(\.createdAt) == [base])
        #expect(try context.explain(done).description.contains("SCAN"))
        // A save of an object with indexed attributes (its record carries its index keys) is
        // refused with the reason, and the context keeps the change.
        let item = try #require(try context.fetch(first).first)
        item.done = true
        let error = try #require(throws: LogbookError.self) { try context.save() }
        #expect("\(error)".contains("secondary indexes are malformed"))
        #expect(context.hasChanges)
        #expect(item.done)
    }
}
