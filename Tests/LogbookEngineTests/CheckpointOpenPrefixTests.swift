import Foundation
import LogbookTestSupport
import Testing

@testable import LogbookEngine

/// An open of a version-3 checkpoint decompresses only what holds the sections before the
/// secondary indexes (the first 64 KiB of the stream, else its first chunks, more each time
/// those sections run past them); the thread that checks the secondary indexes decompresses
/// the rest (`Checkpoint.read`). These tests check that a store opened so is the store its
/// journal gives, whichever part of the stream its sections end in, and what an open does with
/// a chunk of the index section that does not decompress.
@Suite struct CheckpointOpenPrefixTests {
    /// Keys in keyspace 1, each in index 1 under a 24-byte key of its own (so that the index
    /// section spans several 1 MiB chunks), and `sets` sets of `members` members in
    /// keyspace 9: few, so that the sections before the indexes end in the first 64 KiB, or
    /// many, so that they run into the second chunk.
    func makeStore(_ dir: TemporaryDirectory, keys: UInt64, sets: UInt64, members: UInt64) throws -> UInt64 {
        let store = try Store.open(at: dir.store(), options: quietOptions(.none))
        var random = SeededGenerator(seed: 42)
        var t = Transaction()
        var pending = 0
        func commitEvery20000() throws {
            pending += 1
            guard pending >= 20_000 else { return }
            try store.commit(t)
            t = Transaction()
            pending = 0
        }
        for i in 0..<keys {
            // 8 random bytes and 16 alike: the entries share little with each other (most
            // of each key stays in the section) and the chunks still compress.
            var indexKey = [UInt8](repeating: 0x5A, count: 24)
            withUnsafeBytes(of: random.next()) { indexKey.replaceSubrange(0..<8, with: $0) }
            t.put(key(1, i), value: bytes("v\(i)"), indexKey: IndexKey(index: 1, bytes: indexKey))
            try commitEvery20000()
        }
        for s in 0..<sets {
            // Members spread over the keys, each set's own.
            t.addMembers((0..<members).map { key(1, (s * 7 + $0 * 1_009) % keys) }, toSet: key(9, s + 1))
            try commitEvery20000()
        }
        try store.commit(t)
        try store.checkpoint()
        let number = try #require(store.statistics().checkpoint)
        try store.close()
        return number
    }

    /// Everything a snapshot shows of the store: its keys and a sample of values, its sets'
    /// members, its index's entries in order.
    func contents(_ s: Snapshot, sets: UInt64) throws -> [String] {
        var out = ["keys \(s.keys(inKeyspace: 1))", "v0 \(string(try s.value(forKey: key(1, 0))) ?? "nil")"]
        out.append("last \(string(try s.value(forKey: key(1, UInt64(s.count(inKeyspace: 1) - 1)))) ?? "nil")")
        for set in 0..<sets { out.append("set \(set) \(s.members(ofSet: key(9, set + 1)))") }
        out.append("index \(try s.indexCount(index: 1)) \(try s.primaryKeys(index: 1))")
        return out
    }

    /// The store opened from its checkpoint and replayed from its journal alone.
    func expectCheckpointGivesTheJournalsStore(_ dir: TemporaryDirectory, sets: UInt64) throws {
        let store = try Store.open(at: dir.store(), options: quietOptions())
        #expect(store.recoveryReport.checkpoint != nil, "the open used the checkpoint")
        #expect(store.recoveryReport.checkpointProblem == nil)
        let fromCheckpoint = try contents(store.snapshot(), sets: sets)
        #expect(store.snapshot().state.secondary.checkProblem() == nil)
        try store.close()
        var options = quietOptions()
        options.ignoresCheckpoint = true
        options.readOnly = true
        let replayed = try Store.open(at: dir.store(), options: options)
        #expect(replayed.recoveryReport.checkpoint == nil)
        let fromJournal = try contents(replayed.snapshot(), sets: sets)
        try replayed.close()
        #expect(fromCheckpoint.count == fromJournal.count)
        for (a, b) in zip(fromCheckpoint, fromJournal) { #expect(a == b) }
    }

    /// The checkpoint file's data frames (their offsets), in order.
    func dataFrames(_ path: String) throws -> (bytes: [UInt8], salt: UInt32, frames: [Frame.Parsed]) {
        let file = fileBytes(path)
        let header = try file.withUnsafeBytes {
            try FileHeader.decode(
                $0, magic: JournalFormat.checkpointMagic, versions: JournalFormat.readableCheckpointVersions)
        }
        var frames: [Frame.Parsed] = []
        var position = JournalFormat.fileHeaderSize
        try file.withUnsafeBytes { raw in
            while position < raw.count {
                guard case .frame(let frame) = Frame.parse(raw, at: position, salt: header.salt) else {
                    Issue.record("a frame of the checkpoint does not parse at \(position)")
                    return
                }
                if frame.type == .checkpointData { frames.append(frame) }
                position = frame.end
                _ = try #require(frame.end > 0)
            }
        }
        return (file, header.salt, frames)
    }

    /// A store made by `makeStore`, whose checkpoint holds at least `frames` data frames,
    /// opened from its checkpoint and from its journal alone: the same store.
    func expectTheJournalsStore(keys: UInt64, sets: UInt64, members: UInt64, frames: Int) throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let number = try makeStore(dir, keys: keys, sets: sets, members: members)
        #expect(try dataFrames(joinPath(dir.store(), Checkpoint.fileName(number))).frames.count >= frames)
        try expectCheckpointGivesTheJournalsStore(dir, sets: sets)
    }

    /// The index section spans several chunks; the sections before it end early in the first.
    @Test func sectionsThatEndInTheFirst64KiBGiveTheJournalsStore() throws {
        try expectTheJournalsStore(keys: 150_000, sets: 20, members: 5, frames: 3)
    }

    /// Few keys, an index section of two chunks: the open decompresses the first 64 KiB and
    /// the check decompresses the rest on its thread (the thread sanitizer runs this one).
    @Test func theCheckDecompressesTheIndexChunksOnItsThread() throws {
        try expectTheJournalsStore(keys: 50_000, sets: 3, members: 4, frames: 2)
    }

    /// 60,000 sets of 12 members: some 1.2 MB of set section, past the first 1 MiB chunk.
    @Test func setsThatRunPastTheFirstChunkGiveTheJournalsStore() throws {
        try expectTheJournalsStore(keys: 150_000, sets: 60_000, members: 12, frames: 4)
    }

    @Test func anIndexChunkThatDoesNotDecompressIsReplacedFromTheJournal() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let number = try makeStore(dir, keys: 150_000, sets: 20, members: 5)
        let path = joinPath(dir.store(), Checkpoint.fileName(number))
        // The last data frame (all of it index entries): its LZ4 block made malformed, its
        // checksum computed again, as a writer's bug or a crafted file would leave it.
        var (file, salt, frames) = try dataFrames(path)
        let last = try #require(frames.last)
        #expect(last.codec == .lz4)
        let blockStart = last.payload.lowerBound + 4
        for i in blockStart..<min(blockStart + 64, last.payload.upperBound) { file[i] = 0xFF }
        let header = last.payload.lowerBound - 12
        file.withUnsafeMutableBytes { raw in
            let crc = Frame.checksum(
                salt: salt, headerTail: UnsafeRawBufferPointer(rebasing: raw[(header + 4)..<(header + 12)]),
                payload: UnsafeRawBufferPointer(rebasing: raw[last.payload]))
            raw.storeBytes(of: crc.littleEndian, toByteOffset: header, as: UInt32.self)
        }
        try Data(file).write(to: URL(fileURLWithPath: path))
        // A read that decompresses every chunk refuses the file.
        #expect(throws: EngineError.self) {
            try Checkpoint.read(path: path, number: number, fileSystem: PosixFileSystem())
        }

        let store = try Store.open(at: dir.store(), options: quietOptions())
        #expect(store.recoveryReport.checkpoint != nil, "the open used the checkpoint")
        #expect(store.recoveryReport.checkpointProblem == nil, "the open did not decompress the index section")
        let s = store.snapshot()
        #expect(s.count(inKeyspace: 1) == 150_000)
        #expect(s.members(ofSet: key(9, 3)) == (0..<UInt64(5)).map { key(1, (2 * 7 + $0 * 1_009) % 150_000) }.sorted())
        #expect(try s.indexCount(index: 1) == 150_000)
        #expect(s.state.secondary.checkProblem()?.contains("replaced from the journal") == true)
        #expect(s.state.secondary.checkProblem()?.contains("does not decompress") == true)
        try store.close()
    }
}
