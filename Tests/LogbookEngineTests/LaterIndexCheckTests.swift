import Foundation
import LogbookTestSupport
import Testing

@testable import LogbookEngine

/// An open of a version-3 checkpoint leaves the check of its secondary-index section to
/// another thread (`DeferredIndexes.init(checking:fallback:stream:)`): these tests give it a
/// section that fails that check with every checksum right (what a writer's bug or a crafted
/// file would do), and check what a user sees.
@Suite struct LaterIndexCheckTests {
    static let count: UInt64 = 300

    /// A store of `count` keys in index 1 by `i % 10` and index 2 by `i`, in two commits,
    /// checkpointed and closed; then its checkpoint rewritten with one byte after its last
    /// section (the frames' checksums computed over it, as the writer computes them).
    func storeWithMalformedIndexSection(_ dir: TemporaryDirectory) throws {
        let store = try Store.open(at: dir.store(), options: quietOptions())
        for half in [UInt64(0), Self.count / 2] {
            var t = Transaction()
            for i in half..<half + Self.count / 2 {
                t.put(
                    key(1, i), value: bytes("v\(i)"),
                    indexKeys: [IndexKey(index: 1, orderedInt64: Int64(i % 10)), IndexKey(index: 2, orderedUInt64: i)])
            }
            if half == 0 { t.addMembers([key(1, 1), key(1, 2)], toSet: key(9, 1)) }
            try store.commit(t)
        }
        try store.checkpoint()
        let number = try #require(store.statistics().checkpoint)
        try store.close()
        let path = joinPath(dir.store(), Checkpoint.fileName(number))
        let loaded = try Checkpoint.read(path: path, number: number, fileSystem: PosixFileSystem())
        try Checkpoint.write(number: number, directory: dir.store(), fileSystem: PosixFileSystem()) { chunk, leaf in
            Checkpoint.encode(loaded.state, segment: loaded.segment, offset: loaded.offset, leaf: leaf, chunk: chunk)
            [UInt8(7)].withUnsafeBytes { chunk($0) }
        }
    }

    func entries(_ s: Snapshot, _ index: IndexID, _ key: IndexKey) throws -> Int {
        try s.indexCount(
            index: index, from: IndexBound(key.bytes, inclusive: true), to: IndexBound(key.bytes, inclusive: true))
    }

    @Test func aSectionThatFailsTheCheckAfterTheOpenIsReplacedFromTheJournal() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        try storeWithMalformedIndexSection(dir)
        // The file is one a read that checks every section at once refuses, by its last.
        let number = try #require(
            try FileManager.default.contentsOfDirectory(atPath: dir.store()).compactMap {
                Recovery.number($0, JournalFormat.checkpointPrefix, JournalFormat.checkpointSuffix)
            }.first)
        let refused = try #require(throws: EngineError.self) {
            try Checkpoint.read(
                path: joinPath(dir.store(), Checkpoint.fileName(number)), number: number,
                fileSystem: PosixFileSystem())
        }
        #expect(refused.message.contains("bytes after the last section"))

        let store = try Store.open(at: dir.store(), options: quietOptions())
        #expect(store.recoveryReport.checkpoint != nil, "the open used the checkpoint")
        #expect(store.recoveryReport.checkpointProblem == nil, "the open did not check the index section")
        let s = store.snapshot()
        #expect(try s.indexes == [1, 2])
        #expect(try s.indexCount(index: 1) == Int(Self.count))
        #expect(try entries(s, 1, IndexKey(index: 1, orderedInt64: 3)) == Int(Self.count) / 10)
        #expect(
            try s.primaryKeys(index: 2, reverse: true, limit: 2) == [key(1, Self.count - 1), key(1, Self.count - 2)])
        #expect(s.members(ofSet: key(9, 1)) == [key(1, 1), key(1, 2)])
        #expect(s.state.secondary.checkProblem()?.contains("replaced from the journal") == true)

        // Commits change the replaced indexes; a new checkpoint is sound again.
        var t = Transaction()
        t.put(key(1, 0), value: bytes("moved"), indexKeys: [IndexKey(index: 1, orderedInt64: 3)])
        try store.commit(t)
        #expect(try entries(store.snapshot(), 1, IndexKey(index: 1, orderedInt64: 3)) == Int(Self.count) / 10 + 1)
        #expect(try entries(store.snapshot(), 1, IndexKey(index: 1, orderedInt64: 0)) == Int(Self.count) / 10 - 1)
        try store.checkpoint()
        try store.close()
        let report = try Store.verify(at: dir.store())
        #expect(report.isSound, "\(report.problems)")
        let reopened = try Store.open(at: dir.store(), options: quietOptions())
        #expect(try entries(reopened.snapshot(), 1, IndexKey(index: 1, orderedInt64: 3)) == Int(Self.count) / 10 + 1)
        #expect(reopened.snapshot().state.secondary.checkProblem() == nil)
        try reopened.close()
    }

    @Test func verifyNamesTheSectionThatFailedTheLaterCheck() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        try storeWithMalformedIndexSection(dir)
        let report = try Store.verify(at: dir.store())
        #expect(!report.isSound)
        #expect(report.problems.contains { $0.contains("bytes after the last section") }, "\(report.problems)")
    }

    @Test func whenTheJournalCannotGiveTheIndexesEitherTheirUsesAndWritesThrowAndTheRecordsStayReadable() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        try storeWithMalformedIndexSection(dir)
        // Damage in the middle of the journal, which the open (from the checkpoint, which
        // covers all of it) does not read.
        let segment = try #require(
            try FileManager.default.contentsOfDirectory(atPath: dir.store()).filter {
                $0.hasPrefix(JournalFormat.segmentPrefix)
            }.sorted().first)
        let handle = try #require(FileHandle(forUpdatingAtPath: joinPath(dir.store(), segment)))
        let middle = try handle.seekToEnd() / 2
        try handle.seek(toOffset: middle)
        let byte = try #require(try handle.read(upToCount: 1)?.first)
        try handle.seek(toOffset: middle)
        try handle.write(contentsOf: [byte ^ 0xFF])
        try handle.close()

        let store = try Store.open(at: dir.store(), options: quietOptions())
        let s = store.snapshot()
        for read in [{ _ = try s.indexCount(index: 1) }, { _ = try s.indexes }, { _ = try s.primaryKeys(index: 2) }] {
            let error = try #require(throws: EngineError.self) { try read() }
            #expect(error.code == .corruption)
            #expect(error.message.contains("does not give them either") || error.message.contains("journal ends"))
        }
        // The records, keys and sets are what the checkpoint holds.
        #expect(s.count(inKeyspace: 1) == Int(Self.count))
        #expect(string(try s.value(forKey: key(1, 7))) == "v7")
        #expect(s.members(ofSet: key(9, 1)) == [key(1, 1), key(1, 2)])
        // Every write is refused before anything reaches the journal; the store opens again
        // as it was, its indexes still unreadable.
        let journal = try #require(
            try FileManager.default.contentsOfDirectory(atPath: dir.store()).first {
                $0.hasPrefix(JournalFormat.segmentPrefix)
            })
        // Its bytes, not its length: a commit could go into space allocated ahead of it.
        func journalBytes() -> [UInt8] { fileBytes(joinPath(dir.store(), journal)) }
        let bytesBefore = journalBytes()
        var plain = Transaction()
        plain.put(key(1, 1_000), value: bytes("no index"))
        let refused = try #require(throws: EngineError.self) { try store.commit(plain) }
        #expect(refused.code == .corruption)
        var indexed = Transaction()
        indexed.put(key(1, 1_001), value: bytes("indexed"), indexKey: IndexKey(index: 1, orderedInt64: 1))
        #expect(throws: EngineError.self) { try store.commit(indexed) }
        #expect(journalBytes() == bytesBefore)
        #expect(store.statistics().indexEntries.isEmpty)
        try? store.close()
        let again = try Store.open(at: dir.store(), options: quietOptions())
        #expect(again.snapshot().count(inKeyspace: 1) == Int(Self.count))
        #expect(try again.snapshot().value(forKey: key(1, 1_000)) == nil)
        #expect(throws: EngineError.self) { try again.snapshot().indexCount(index: 1) }
        try? again.close()
    }

    @Test func aSoundSectionCheckedLaterGivesWhatTheEagerDecodeGives() throws {
        var state = IndexState()
        var t = Transaction()
        for i in UInt64(0)..<5_000 {
            t.put(key(1, i * 3), value: bytes("v"), indexKey: IndexKey(index: 4, orderedUInt64: i % 97))
        }
        let store = try Store.open(
            at: "mem-later",
            options: {
                var o = quietOptions()
                o.inMemory = true
                return o
            }())
        try store.commit(t)
        state = store.snapshot().state
        try store.close()
        let stream = Checkpoint.encode(state, segment: 1, offset: 32)
        let later = try Checkpoint.decode(
            stream, stream: { _ in stream },
            fallback: { _, _ in
                Issue.record("the fallback ran for a sound section")
                return [:]
            }
        ).state
        let eager = try Checkpoint.decode(stream).state
        #expect(later.secondary.checkProblem() == nil)
        #expect(try later.secondary.ids() == [4])
        for v in [UInt64(0), 5, 96] {
            let b = IndexKey(index: 4, orderedUInt64: v).bytes
            let bound = (IndexBound(b, inclusive: true), IndexBound(b, inclusive: true))
            #expect(
                try later.secondary.reader(4)?.primaryKeys(from: bound.0, to: bound.1, reverse: false, limit: nil)
                    == eager.indexes[4]!.primaryKeys(from: bound.0, to: bound.1, reverse: false, limit: nil))
        }
        #expect(later.indexes[4]!.count == 5_000)
    }
}
