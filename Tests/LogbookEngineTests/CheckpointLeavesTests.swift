import LogbookTestSupport
import Testing

@testable import LogbookEngine

/// A checkpoint of version 3 keeps the primary index's well-filled leaves whole, in raw
/// `checkpointSlots` frames, and an open uses them where the file's mapping holds them; the
/// sparse leaves' keys stay in the compressed stream. Files of version 2 still open.
@Suite struct CheckpointLeavesTests {
    /// Keyspace 1: 100,000 dense ids (every leaf whole). Keyspace 2: every fifth id (13 keys
    /// a leaf: all in the stream). Keyspace 3: a leaf of exactly the minimum (32 keys, whole)
    /// and one of one key fewer (in the stream). Keyspace 4: whole and sparse leaves in turn.
    func mixedState() -> IndexState {
        var state = IndexState()
        var location: UInt64 = 4_096
        state.primary.setMany(
            100_000, key: { key(1, UInt64($0) + 1) },
            value: { _ in
                location += 37
                return location
            }, previous: { _, _, _ in })
        state.primary.setMany(
            4_000, key: { key(2, UInt64($0) * 5) }, value: { UInt64(1 << 33) + UInt64($0) }, previous: { _, _, _ in })
        state.primary.setMany(32, key: { key(3, UInt64($0)) }, value: { UInt64($0) + 1 }, previous: { _, _, _ in })
        state.primary.setMany(31, key: { key(3, 64 + UInt64($0)) }, value: { UInt64($0) + 9 }, previous: { _, _, _ in })
        for leaf in UInt64(0)..<40 {
            let keys = leaf % 2 == 0 ? 64 : 3
            state.primary.setMany(
                keys, key: { key(4, leaf * 64 + UInt64($0)) }, value: { leaf * 1_000 + UInt64($0) + 1 },
                previous: { _, _, _ in })
        }
        var index = OrderedIndex()
        for i in UInt64(1)...5_000 {
            _ = IndexKey(index: 6, orderedInt64: Int64(i % 97)).bytes.withUnsafeBytes { index.insert($0, key(1, i)) }
        }
        state.indexes[6] = index
        return state
    }

    func entries(_ map: RadixMap<UInt64>) -> [(UInt64, UInt64)] {
        var all: [(UInt64, UInt64)] = []
        map.forEachEntry { k, v in
            all.append((k, v))
            return true
        }
        return all
    }

    func writeCheckpoint(_ state: IndexState, number: UInt64, in directory: String) throws -> String {
        try Checkpoint.write(number: number, directory: directory, fileSystem: PosixFileSystem()) { chunk, leaf in
            Checkpoint.encode(state, segment: 1, offset: 32, leaf: leaf, chunk: chunk)
        }
        return directory + "/" + Checkpoint.fileName(number)
    }

    @Test func wholeLeavesAreReadWhereTheFileHoldsThem() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let state = mixedState()
        let path = try writeCheckpoint(state, number: 5, in: dir.path)
        let file = fileBytes(path)
        // 1,563 leaves of keyspace 1, one of keyspace 3, 20 of keyspace 4: 512 bytes each.
        #expect(file.count > 1_584 * 512)
        #expect(file.count < 1_584 * 512 + 64 * 1024, "the sparse keys are compressed, not whole leaves")
        weak var image: FileImage?
        do {
            let loaded = try Checkpoint.read(path: path, number: 5, fileSystem: PosixFileSystem())
            let primary = loaded.state.primary
            #expect(entries(primary).elementsEqual(entries(state.primary)) { $0 == $1 })
            #expect(primary.count(inKeyspace: 1) == 100_000)
            #expect(primary.count(inKeyspace: 2) == 4_000)
            #expect(primary.count(inKeyspace: 3) == 63)
            #expect(primary.count(inKeyspace: 4) == 20 * 64 + 20 * 3)
            let whole = try #require(primary.leafInfo(for: key(1, 77_777))?.owner as? FileImage)
            image = whole
            #expect(
                primary.leafInfo(for: key(1, 1))?.owner === whole
                    && primary.leafInfo(for: key(1, 100_000))?.owner === whole)
            #expect(primary.leafInfo(for: key(2, 5))?.owner as? FileImage == nil, "13 keys a leaf are in the stream")
            #expect(primary.leafInfo(for: key(3, 0))?.owner === whole, "32 keys make a whole leaf")
            #expect(primary.leafInfo(for: key(3, 64))?.owner as? FileImage == nil, "31 do not")
            #expect(
                primary.leafInfo(for: key(4, 128))?.owner === whole && primary.leafInfo(for: key(4, 192))?.owner == nil)
            #expect(primary[key(1, 100_001)] == nil && primary[key(3, 32)] == nil && primary[key(4, 67)] == nil)
            #expect(
                primary.leafInfo(for: key(1, 64))?.occupied == 64 && primary.leafInfo(for: key(3, 0))?.occupied == 32)
            #expect(loaded.state.indexes[6]?.count == 5_000)
            // The file may go (a later checkpoint removes it): the mapping keeps its bytes.
            try PosixFileSystem().removeFile(path)
            #expect(primary[key(1, 50_000)] == state.primary[key(1, 50_000)])
        }
        #expect(image == nil, "the image is let go with the last leaf that used it")
    }

    /// In a trie of three levels or more the whole leaves are attached under mapped parents,
    /// whose leaves become nodes only when the writer first changes the parent: a copy taken
    /// before that (a snapshot) reads the loaded leaves throughout, the written leaves are heap
    /// copies, and the leaves beside them stay in the mapping. A parent that also holds leaves
    /// of the stream's sparse keys is made of nodes at the open and reads the same.
    @Test func mappedParentsKeepTheirLeavesInTheMappingUntilWritten() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        var state = mixedState()
        // Keyspace 5 (three levels): under one parent, leaves alternately whole (64 keys) and
        // sparse (3); under the next, only whole leaves.
        for leaf in UInt64(0)..<128 {
            let keys = leaf < 64 && leaf % 2 == 1 ? 3 : 64
            state.primary.setMany(
                keys, key: { key(5, 4_096 * 9 + leaf * 64 + UInt64($0)) }, value: { leaf * 1_000 + UInt64($0) + 1 },
                previous: { _, _, _ in })
        }
        let path = try writeCheckpoint(state, number: 5, in: dir.path)
        let before = fileBytes(path)
        var loaded = try Checkpoint.read(path: path, number: 5, fileSystem: PosixFileSystem()).state.primary
        #expect(entries(loaded).elementsEqual(entries(state.primary)) { $0 == $1 })
        #expect(loaded.lastKey(inKeyspace: 1) == key(1, 100_000))
        #expect(loaded.lastKey(inKeyspace: 5) == key(5, 4_096 * 9 + 127 * 64 + 63))
        #expect(loaded.leafInfo(for: key(5, 4_096 * 9))?.owner is FileImage)
        #expect(loaded.leafInfo(for: key(5, 4_096 * 9 + 64))?.owner as? FileImage == nil, "a sparse leaf")
        #expect(loaded.leafInfo(for: key(5, 4_096 * 9 + 64))?.occupied == 3)
        #expect(loaded.leafInfo(for: key(5, 4_096 * 10 + 5))?.occupied == 64)
        #expect(loaded.leafInfo(for: key(5, 4_096 * 11)) == nil && loaded[key(5, 4_096 * 8)] == nil)
        var keys = [UInt64](repeating: 0, count: 300)
        var values = [UInt64](repeating: 0, count: 300)
        let n = keys.withUnsafeMutableBufferPointer { k in
            values.withUnsafeMutableBufferPointer { v in
                loaded.collect(inKeyspace: 1, from: key(1, 4_000), through: key(1, 4_199), keys: k, values: v)
            }
        }
        #expect(n == 200 && keys[0] == key(1, 4_000) && values[199] == state.primary[key(1, 4_199)])

        let snapshot = loaded
        loaded.set(key(1, 10), 999_999)
        loaded.remove(key(1, 11))
        loaded.set(key(1, 4_096 + 70), 5)
        loaded.set(key(5, 4_096 * 10 + 1), 6)
        #expect(loaded[key(1, 10)] == 999_999 && loaded[key(1, 11)] == nil && loaded[key(1, 4_096 + 70)] == 5)
        #expect(loaded[key(5, 4_096 * 10 + 1)] == 6 && loaded[key(1, 12)] == state.primary[key(1, 12)])
        #expect(
            entries(snapshot).elementsEqual(entries(state.primary)) { $0 == $1 }, "the copy reads the file's leaves")
        #expect(snapshot.leafInfo(for: key(1, 10))?.owner is FileImage)
        #expect(loaded.leafInfo(for: key(1, 10))?.owner == nil, "the written leaf is a heap copy")
        #expect(loaded.leafInfo(for: key(1, 200))?.owner is FileImage, "its neighbour is still read in place")
        #expect(loaded.leafInfo(for: key(1, 200))?.slots == snapshot.leafInfo(for: key(1, 200))?.slots)
        #expect(loaded.count(inKeyspace: 1) == 99_999 && loaded.count(inKeyspace: 5) == 96 * 64 + 32 * 3)
        // Written in place now (nothing shares the written leaf), still not into the file.
        loaded.set(key(1, 13), 1)
        #expect(loaded[key(1, 13)] == 1 && snapshot[key(1, 13)] == state.primary[key(1, 13)])
        #expect(fileBytes(path) == before, "the mapping is private")
        var written = IndexState()
        written.primary = loaded
        let again = try writeCheckpoint(written, number: 6, in: dir.path)
        let reread = try Checkpoint.read(path: again, number: 6, fileSystem: PosixFileSystem()).state
        #expect(entries(reread.primary).elementsEqual(entries(loaded)) { $0 == $1 })
    }

    /// A write to a whole leaf changes the map, not the file; a copy of the map taken before
    /// keeps what was loaded, and the next checkpoint holds what was written.
    @Test func writesToWholeLeavesNeverReachTheFile() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let state = mixedState()
        let path = try writeCheckpoint(state, number: 5, in: dir.path)
        let before = fileBytes(path)
        var loaded = try Checkpoint.read(path: path, number: 5, fileSystem: PosixFileSystem()).state
        let old = loaded.primary[key(1, 10)]
        loaded.primary.set(key(1, 10), 999_999)
        loaded.primary.remove(key(1, 11))
        loaded.primary.set(key(4, 100), 7)
        #expect(loaded.primary[key(1, 10)] == 999_999 && loaded.primary[key(1, 11)] == nil)
        let copy = loaded
        loaded.primary.set(key(1, 12), 5)
        #expect(copy.primary[key(1, 12)] == state.primary[key(1, 12)] && loaded.primary[key(1, 12)] == 5)
        #expect(fileBytes(path) == before, "the mapping is private")
        #expect(old == state.primary[key(1, 10)])
        #expect(loaded.primary.count(inKeyspace: 1) == 99_999 && loaded.primary.count(inKeyspace: 4) == 1_341)

        let again = try writeCheckpoint(loaded, number: 6, in: dir.path)
        let reread = try Checkpoint.read(path: again, number: 6, fileSystem: PosixFileSystem()).state
        #expect(entries(reread.primary).elementsEqual(entries(loaded.primary)) { $0 == $1 })
    }

    /// A byte flipped in a slot frame fails that frame's checksum: read alone, the file is
    /// corruption. A store opened on it returns before the frames are checked (it uses the
    /// checkpoint, replaying nothing), and the first read of a whole leaf finds the damage and
    /// writes the leaves again from the journal before it answers: every record as committed,
    /// the problem told to the log and named by `verify`.
    @Test func aDamagedWholeLeafIsMendedFromTheJournal() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let path = try writeCheckpoint(mixedState(), number: 5, in: dir.path)
        var data = fileBytes(path)
        data[data.count / 2] ^= 0x01
        writeFileBytes(path, data)
        #expect(throws: EngineError.self) { try Checkpoint.read(path: path, number: 5, fileSystem: PosixFileSystem()) }

        try storeOfWholeLeaves(dir, damaging: 0x40)
        let logged = Locked<[String]>([])
        var options = quietOptions(.none)
        options.log = { line in logged.withLock { $0.append(line) } }
        let reopened = try Store.open(at: dir.store(), options: options)
        #expect(reopened.recoveryReport.checkpointProblem == nil && reopened.recoveryReport.checkpoint != nil)
        #expect(reopened.recoveryReport.commitsReplayed == 0, "the checkpoint is used: its leaves are checked later")
        let snapshot = reopened.snapshot()
        #expect(snapshot.count(inKeyspace: 1) == 20_000)
        #expect(try string(snapshot.value(forKey: key(1, 12_345))) == "v12345")
        var seen = 0
        try snapshot.scanValues(inKeyspace: 1, in: key(1, 0)...key(1, 30_000)) { k, value in
            seen += String(decoding: value, as: UTF8.self) == "v\(EngineKey(rawValue: k).id)" ? 1 : 0
            return true
        }
        #expect(seen == 20_000)
        #expect(snapshot.state.slotCheck?.problem()?.contains("written again from the journal") == true)
        #expect(logged.withLock { $0 }.contains { $0.contains("is damaged") })
        var t = Transaction()
        t.put(key(1, 7), value: bytes("new"))
        try reopened.commit(t)
        #expect(try string(reopened.snapshot().value(forKey: key(1, 7))) == "new")
        try reopened.close()
        let report = try Store.verify(at: dir.store())
        #expect(report.problems.contains { $0.contains("written again from the journal") })
        #expect(report.problems.allSatisfy { $0.hasPrefix("checkpoint:") }, "\(report.problems)")
    }

    /// A read of a whole leaf waits for its own slot frame only: a damaged frame elsewhere is
    /// found, and mended, when a leaf of it is read.
    @Test func aReadChecksTheFrameOfItsLeafOnly() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        // 1,094 whole leaves: three slot frames of 512 at most.
        try checkpointedStore(dir, keys: 70_000) { "v\($0)" }
        let name = try #require(listDirectory(dir.store()).first { $0.hasPrefix("checkpoint-") })
        let path = dir.store() + "/" + name
        let number = try #require(UInt64(name.dropFirst("checkpoint-".count).prefix(12)))
        // Where key 69,000's slot lies in the file (the image maps the file from its first byte).
        let offset = try {
            let primary = try Checkpoint.read(path: path, number: number, fileSystem: PosixFileSystem()).state.primary
            let leaf = try #require(primary.leafInfo(for: key(1, 69_000)))
            let image = try #require(leaf.owner as? FileImage)
            return UnsafeRawPointer(leaf.slots + 69_000 % 64) - UnsafeRawPointer(image.bytes.baseAddress!)
        }()
        var file = fileBytes(path)
        file[offset] ^= 0x10
        writeFileBytes(path, file)

        let logged = Locked<[String]>([])
        var options = quietOptions(.none)
        options.log = { line in logged.withLock { $0.append(line) } }
        let store = try Store.open(at: dir.store(), options: options)
        let snapshot = store.snapshot()
        #expect(try string(snapshot.value(forKey: key(1, 5))) == "v5")
        #expect(logged.withLock { $0.isEmpty }, "the first frame is sound: nothing mended")
        #expect(try string(snapshot.value(forKey: key(1, 69_000))) == "v69000")
        #expect(logged.withLock { $0 }.contains { $0.contains("slot frame at offset") })
        try store.close()
    }

    /// When the journal cannot mend a damaged whole leaf either (a bad byte in its first
    /// transaction, before the checkpoint), nothing unproven is read: the leaves read as empty,
    /// every throwing read, commit and compaction fails with the reason, and the
    /// files stay as they were (nothing committed is lost: the damage is the disk's).
    @Test func aWholeLeafTheJournalCannotMendFailsEveryUse() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        try storeOfWholeLeaves(dir, damaging: 0x40)
        let segment = try #require(listDirectory(dir.store()).first { $0.hasPrefix("journal-") })
        var journal = fileBytes(dir.store() + "/" + segment)
        journal[JournalFormat.fileHeaderSize + 200] ^= 0x08
        writeFileBytes(dir.store() + "/" + segment, journal)
        let before = listDirectory(dir.store()).sorted().map { fileBytes(dir.store() + "/" + $0) }

        let store = try Store.open(at: dir.store(), options: quietOptions(.none))
        let snapshot = store.snapshot()
        #expect(snapshot.count(inKeyspace: 2) == 1)
        #expect(throws: EngineError.self) { try snapshot.value(forKey: key(1, 12_345)) }
        #expect(!snapshot.contains(key(1, 12_345)), "no leaf is read unproven")
        let failure = try #require(snapshot.state.slotCheck?.failure)
        #expect(failure.code == .corruption && failure.message.contains("is damaged"))
        #expect(throws: EngineError.self) { try snapshot.value(forKey: key(2, 1)) }
        #expect(throws: EngineError.self) {
            try snapshot.scanValues(inKeyspace: 1, in: key(1, 0)...key(1, 30_000)) { _, _ in true }
        }
        var t = Transaction()
        t.put(key(2, 2), value: bytes("x"))
        #expect(throws: EngineError.self) { try store.commit(t) }
        // (A checkpoint has nothing to write: no commit came after the last one.)
        try? store.checkpoint()
        #expect(throws: EngineError.self) { try store.compact() }
        try? store.close()
        #expect(listDirectory(dir.store()).sorted().map { fileBytes(dir.store() + "/" + $0) } == before)
    }

    /// A store of 20,000 keys in keyspace 1 (whole leaves) and one in keyspace 2, closed with a
    /// checkpoint of the whole journal; `damaging` is XORed into the middle of the checkpoint
    /// (a slot frame).
    func storeOfWholeLeaves(_ dir: TemporaryDirectory, damaging mask: UInt8) throws {
        try checkpointedStore(dir, keys: 20_000, small: true) { "v\($0)" }
        let name = try #require(listDirectory(dir.store()).first { $0.hasPrefix("checkpoint-") })
        var file = fileBytes(dir.store() + "/" + name)
        file[file.count / 2] ^= mask
        writeFileBytes(dir.store() + "/" + name, file)
    }

    /// A store whose keys 1…`keys` of keyspace 1 hold `value(id)` (and, when `small`, key 1
    /// of keyspace 2 "small"), committed in one transaction and closed with a checkpoint of
    /// the whole journal.
    func checkpointedStore(
        _ dir: TemporaryDirectory, keys: UInt64, small: Bool = false, value: (UInt64) -> String
    ) throws {
        let store = try Store.open(at: dir.store(), options: quietOptions(.none))
        var t = Transaction()
        for i in UInt64(1)...keys { t.put(key(1, i), value: bytes(value(i))) }
        if small { t.put(key(2, 1), value: bytes("small")) }
        try store.commit(t)
        try store.checkpoint()
        try store.close()
    }

    /// A checkpoint read with the journal to fall back on lets its image go with its last
    /// leaf even when nothing ever read a leaf (the check that was left running stops).
    @Test func anImageWhoseLeavesWereNeverReadIsLetGo() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let path = try writeCheckpoint(mixedState(), number: 5, in: dir.path)
        weak var image: FileImage?
        do {
            let loaded = try Checkpoint.read(
                path: path, number: 5, fileSystem: PosixFileSystem(),
                primaryFallback: { _ throws(EngineError) in throw EngineError(.corruption, "not here") })
            #expect(loaded.state.slotCheck != nil)
            // The image, from keyspace 1's first mapped parent: no leaf read.
            let space = try #require(loaded.state.primary.spaces.first { $0.id == 1 })
            var node = try #require(space.root)
            while node.mapped == nil, let first = node.children.first { node = try #require(first) }
            image = node.mapped?.image as? FileImage
            #expect(image != nil)
        }
        #expect(image == nil)
    }

    /// A store reopened from whole leaves reads and writes as before, and its next checkpoint
    /// (which removes the file the leaves lie in) reopens too.
    @Test func aStoreKeepsWritingOverWholeLeaves() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        try checkpointedStore(dir, keys: 30_000) { "a\($0)" }
        do {
            let store = try Store.open(at: dir.store(), options: quietOptions(.none))
            #expect(store.recoveryReport.checkpoint != nil && store.recoveryReport.commitsReplayed == 0)
            var t = Transaction()
            for i in stride(from: UInt64(2), through: 30_000, by: 2) { t.put(key(1, i), value: bytes("b\(i)")) }
            for i in stride(from: UInt64(3), through: 30_000, by: 3) { t.delete(key(1, i)) }
            try store.commit(t)
            try store.checkpoint()
            var u = Transaction()
            u.put(key(1, 30_001), value: bytes("c"))
            try store.commit(u)
            try store.close()
        }
        let store = try Store.open(at: dir.store(), options: quietOptions(.none))
        let snapshot = store.snapshot()
        #expect(snapshot.count(inKeyspace: 1) == 30_001 - 10_000)
        for i in [UInt64(1), 2, 3, 4, 6, 29_999, 30_000, 30_001] {
            let expected: String? = i == 30_001 ? "c" : i % 3 == 0 ? nil : i % 2 == 0 ? "b\(i)" : "a\(i)"
            #expect(try string(snapshot.value(forKey: key(1, i))) == expected)
        }
        try store.close()
    }

    /// A version-2 file (every primary key in the stream, a 12-byte end record) still opens.
    @Test func aVersionTwoCheckpointStillOpens() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        // The version-2 stream: header; per keyspace its id, count and entries (no whole-leaf
        // list); no secondary index; no set.
        var w = ByteWriter()
        w.appendLE(UInt64(9))  // version
        w.appendLE(UInt64(1))  // segment
        w.appendLE(UInt64(32))  // offset
        w.appendLE(UInt64(100))  // live bytes
        w.appendLE(UInt64(200))  // total bytes
        w.appendVarint(2)
        var expected: [(UInt64, UInt64)] = []
        for keyspace in [UInt64(1), 2] {
            w.appendVarint(keyspace)
            w.appendVarint(100)
            var previous: UInt64 = 0
            for i in UInt64(0)..<100 {
                let id = i * keyspace
                w.appendVarint(i == 0 ? id : id - previous)
                previous = id
                w.appendVarint(zigzag(i == 0 ? 1_000 : 8))
                expected.append((key(UInt16(keyspace), id), 1_000 + 8 * i))
            }
        }
        // Version 2's order: the secondary indexes (one index of one entry), then the sets
        // (one set of two members).
        w.appendVarint(1)
        w.appendVarint(6)
        w.appendVarint(1)
        w.appendVarint(0)
        w.appendVarint(3)
        for byte: UInt8 in [1, 2, 3] { w.append(byte) }
        w.appendVarint(zigzag(Int64(key(1, 4))))
        w.appendVarint(1)
        w.appendVarint(5)
        w.appendVarint(1)
        w.appendVarint(1)
        w.appendVarint(2)
        w.appendVarint(10)
        w.appendVarint(5)
        let salt: UInt32 = 77
        var file = FileHeader(magic: JournalFormat.checkpointMagic, number: 3, salt: salt, version: 2).encoded()
        Frame.append(type: .checkpointData, payload: w.bytes, compress: true, salt: salt, to: &file)
        var end = ByteWriter()
        end.appendLE(UInt32(1))
        end.appendLE(UInt64(w.bytes.count))
        Frame.append(type: .checkpointEnd, payload: end.bytes, compress: false, salt: salt, to: &file)
        let path = dir.path + "/" + Checkpoint.fileName(3)
        writeFileBytes(path, file)
        let loaded = try Checkpoint.read(path: path, number: 3, fileSystem: PosixFileSystem())
        #expect(loaded.state.version == 9 && loaded.segment == 1 && loaded.offset == 32)
        #expect(entries(loaded.state.primary).elementsEqual(expected) { $0 == $1 })
        #expect(loaded.state.indexes[6]?.count == 1)
        var indexed: [UInt64] = []
        loaded.state.indexes[6]?.forEach(from: nil, to: nil) { bytes, pk in
            indexed.append(pk)
            return Array(bytes) == [1, 2, 3]
        }
        #expect(indexed == [key(1, 4)])
        #expect(loaded.state.sets[key(5, 1)]?.members == [10, 15])
        // The same stream read as version 3 is malformed (its counts are read as leaf lists).
        #expect(throws: Checkpoint.Malformed.self) { try Checkpoint.decode(w.bytes) }
    }

    /// A stream that names more whole leaves than the file holds, fewer, or a key of its own
    /// that falls into a whole leaf, is malformed, not a crash.
    @Test func wholeLeavesMustMatchTheStream() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        // One leaf's slots in a file, as an open would map them.
        let path = dir.path + "/leaf"
        var slots = [UInt8](repeating: 0, count: 512)
        for i in 0..<64 { slots[8 * i] = UInt8(i + 1) }
        writeFileBytes(path, slots)
        let file = try PosixFileSystem().openFile(path, writable: false, create: false, exclusive: false)
        let image = try FileImage(file, size: 512)
        file.close()
        /// A stream whose keyspace 1 names `whole` leaves (0, 1, …; 64 keys each) and then
        /// holds the keys `sparse` in the stream.
        func stream(whole: Int, sparse: [UInt64]) -> [UInt8] {
            var w = ByteWriter()
            for _ in 0..<5 { w.appendLE(UInt64(1)) }
            w.appendVarint(1)
            w.appendVarint(1)
            w.appendVarint(whole * 64 + sparse.count)
            w.appendVarint(whole)
            for j in 0..<whole {
                w.appendVarint(j == 0 ? 0 : 1)
                w.appendVarint(64)
            }
            var previous: UInt64 = 0
            for (j, id) in sparse.enumerated() {
                w.appendVarint(j == 0 ? id : id - previous)
                w.appendVarint(zigzag(7))
                previous = id
            }
            w.appendVarint(0)
            w.appendVarint(0)
            return w.bytes
        }
        func decode(_ bytes: [UInt8], leaves: Int) throws -> IndexState {
            try bytes.withUnsafeBytes { raw in
                try Checkpoint.decode(
                    raw, leaves: Checkpoint.LeafSource(image: image, frames: leaves == 0 ? [] : [(0, leaves)])
                ).state
            }
        }
        let good = try decode(stream(whole: 1, sparse: [64, 200]), leaves: 1)
        #expect(good.primary.count(inKeyspace: 1) == 66)
        #expect(good.primary[key(1, 63)] == 64 && good.primary[key(1, 64)] == 7 && good.primary[key(1, 200)] == 14)
        #expect(throws: Checkpoint.Malformed.self) { try decode(stream(whole: 1, sparse: [5]), leaves: 1) }
        #expect(throws: Checkpoint.Malformed.self) { try decode(stream(whole: 2, sparse: []), leaves: 1) }
        #expect(throws: Checkpoint.Malformed.self) { try decode(stream(whole: 0, sparse: [1]), leaves: 1) }
        // A version-3 stream without the file's leaves cannot be read.
        #expect(throws: Checkpoint.Malformed.self) { try Checkpoint.decode(stream(whole: 1, sparse: [])) }
    }
}
