import Foundation
import LogbookTestSupport
import Testing

@testable import LogbookEngine

/// Encrypted stores: what they write is unreadable without the key, what they read back is
/// exactly what was committed, a wrong or missing key is refused before anything is read, a
/// changed byte is damage, and a change of key is all or nothing across a crash.
@Suite struct EncryptionTests {
    static let marker = "PLAINTEXT-MARKER-"

    /// `body` throws an `EngineError` with `code`.
    func expectCode(
        _ code: EngineError.Code, sourceLocation: SourceLocation = #_sourceLocation, _ body: () throws -> some Any
    ) {
        do {
            _ = try body()
            Issue.record("no error; expected \(code)", sourceLocation: sourceLocation)
        } catch {
            #expect((error as? EngineError)?.code == code, "\(error)", sourceLocation: sourceLocation)
        }
    }

    func options(_ key: EncryptionKey?) -> StoreOptions {
        var o = quietOptions()
        o.encryptionKey = key
        return o
    }

    /// Commits of puts (with index keys) and set members whose values carry `marker`.
    func fill(_ store: Store, from: Int = 1, count: Int = 50) throws {
        for i in from..<(from + count) {
            var t = Transaction()
            t.put(
                key(1, UInt64(i)), value: bytes(Self.marker + "\(i)"),
                indexKeys: [IndexKey(index: 1, orderedUInt64: UInt64(i))])
            t.addMembers([UInt64(i)], toSet: key(2, 1))
            try store.commit(t)
        }
    }

    func expected(_ n: Int) -> [UInt64: String] {
        Dictionary(uniqueKeysWithValues: (1...n).map { (UInt64($0), Self.marker + "\($0)") })
    }

    func check(_ store: Store, _ n: Int) throws {
        let s = store.snapshot()
        #expect(try contents(s) == expected(n))
        #expect(s.members(ofSet: key(2, 1)) == (1...n).map(UInt64.init))
        #expect(try s.indexCount(index: 1) == n)
    }

    /// Whether any file of the store holds `needle`.
    func anyFileHolds(_ directory: String, _ needle: String, fs: FaultFileSystem? = nil) -> Bool {
        let names = fs?.files(in: directory) ?? listDirectory(directory)
        let pattern = Array(needle.utf8)
        for name in names {
            let data = fs?.contents(directory + "/" + name) ?? fileBytes(directory + "/" + name)
            if data.count >= pattern.count {
                for i in 0...(data.count - pattern.count) where data[i] == pattern[0] {
                    if Array(data[i..<(i + pattern.count)]) == pattern { return true }
                }
            }
        }
        return false
    }

    @Test func anEncryptedStoreReadsBackWhatWasCommittedAndWritesNoPlaintext() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let key = EncryptionKey.random()
        let store = try Store.open(at: dir.store(), options: options(key))
        #expect(store.isEncrypted)
        try fill(store)
        try store.checkpoint()
        try fill(store, from: 51, count: 10)
        try store.close()
        #expect(!anyFileHolds(dir.store(), Self.marker))
        #expect(listDirectory(dir.store()).contains { $0.hasSuffix(JournalFormat.checkpointSuffix) })

        // From the checkpoint and the journal after it; then from the journal alone.
        let reopened = try Store.open(at: dir.store(), options: options(key))
        #expect(reopened.recoveryReport.checkpoint != nil)
        #expect(reopened.recoveryReport.checkpointProblem == nil)
        try check(reopened, 60)
        try reopened.close()
        var journalOnly = options(key)
        journalOnly.ignoresCheckpoint = true
        journalOnly.readOnly = true
        let replayed = try Store.open(at: dir.store(), options: journalOnly)
        try check(replayed, 60)
        try replayed.close()

        // Compacted, then read again.
        let compacting = try Store.open(at: dir.store(), options: options(key))
        for i in 1...30 {
            var t = Transaction()
            t.put(
                EngineKey(keyspace: 1, id: UInt64(i)).rawValue, value: bytes(Self.marker + "\(i)"),
                indexKeys: [IndexKey(index: 1, orderedUInt64: UInt64(i))])
            try compacting.commit(t)
        }
        try compacting.compact()
        try check(compacting, 60)
        try compacting.close()
        #expect(!anyFileHolds(dir.store(), Self.marker))
        let afterCompaction = try Store.open(at: dir.store(), options: options(key))
        try check(afterCompaction, 60)
        try afterCompaction.close()
    }

    @Test func aMissingOrWrongKeyIsRefusedBeforeAnythingIsRead() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let key = EncryptionKey.random()
        let store = try Store.open(at: dir.store(), options: options(key))
        try fill(store, count: 3)
        try store.close()

        expectCode(.keyRequired) { try Store.open(at: dir.store(), options: options(nil)) }
        var readOnly = options(nil)
        readOnly.readOnly = true
        expectCode(.keyRequired) { try Store.open(at: dir.store(), options: readOnly) }
        expectCode(.wrongKey) {
            try Store.open(at: dir.store(), options: options(EncryptionKey.random()))
        }
        // A key from a provider that fails stops the open with the provider's error.
        struct Unavailable: Error {}
        var failing = options(nil)
        failing.encryptionKey = KeyClosure { throw Unavailable() }
        #expect(throws: Unavailable.self) { try Store.open(at: dir.store(), options: failing) }

        // A store that is not encrypted is not opened with a key.
        let plain = TemporaryDirectory()
        defer { plain.cleanUp() }
        try Store.open(at: plain.store(), options: options(nil)).close()
        expectCode(.notEncrypted) { try Store.open(at: plain.store(), options: options(key)) }

        // The right key, from a closure, still opens it.
        var provided = options(nil)
        provided.encryptionKey = KeyClosure { key }
        let reopened = try Store.open(at: dir.store(), options: provided)
        try check(reopened, 3)
        try reopened.close()
    }

    @Test func keysAreThirtyTwoBytes() throws {
        expectCode(.invalidArgument) { try EncryptionKey(bytes: [UInt8](repeating: 1, count: 16)) }
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let path = dir.path + "/key"
        writeFileBytes(path, [UInt8](repeating: 7, count: 31))
        expectCode(.invalidArgument) { try EncryptionKey(contentsOfFile: path) }
        writeFileBytes(path, [UInt8](repeating: 7, count: 32))
        #expect(try EncryptionKey(contentsOfFile: path) == EncryptionKey(bytes: [UInt8](repeating: 7, count: 32)))
        #expect(!"\(EncryptionKey.random())".contains("7"))
    }

    /// A byte changed in a sealed frame, with the frame's checksum made to match again (so
    /// that only the cipher's tag can tell): the open reports corruption, never other data (a
    /// change in the last transaction reads as its torn write: the commits before it).
    @Test func aChangedByteUnderAValidChecksumIsCorruptionNotOtherData() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let key = EncryptionKey.random()
        let store = try Store.open(at: dir.store(), options: options(key))
        try fill(store, count: 5)
        try store.close()
        // The segment the commits went to (the open that created the store started another).
        let segment = listDirectory(dir.store()).filter { $0.hasPrefix(JournalFormat.segmentPrefix) }
            .map { dir.store() + "/" + $0 }.max { fileBytes($0).count < fileBytes($1).count }!
        let original = fileBytes(segment)
        // Every frame of the first segment in turn: a payload byte flipped, its CRC fixed.
        var position = JournalFormat.fileHeaderSize
        var frames = 0
        while position + JournalFormat.frameHeaderSize <= original.count {
            let length = original.withUnsafeBytes { Int($0.loadLE(at: position + 4, as: UInt32.self)) }
            var changed = original
            changed[position + JournalFormat.frameHeaderSize + length / 2] ^= 0x40
            let salt = changed.withUnsafeBytes { $0.loadLE(at: 24, as: UInt32.self) }
            let crc = changed.withUnsafeBytes { raw in
                Frame.checksum(
                    salt: salt, headerTail: UnsafeRawBufferPointer(rebasing: raw[(position + 4)..<(position + 12)]),
                    payload: UnsafeRawBufferPointer(
                        rebasing: raw[(position + 12)..<(position + 12 + length)]))
            }
            withUnsafeBytes(of: crc.littleEndian) { for i in 0..<4 { changed[position + i] = $0[i] } }
            writeFileBytes(segment, changed)
            // Damage before a commit that proves it synced is corruption; in the last
            // transaction it reads as a torn tail (as a cut file does): the commits before it.
            var readOnly = options(key)
            readOnly.readOnly = true
            do {
                let opened = try Store.open(at: dir.store(), options: readOnly)
                #expect(frames >= 8, "only the last transaction may read as a torn tail")
                try check(opened, 4)
                try opened.close()
            } catch {
                #expect((error as? EngineError)?.code == .corruption, "\(error)")
            }
            position += JournalFormat.frameHeaderSize + length
            frames += 1
        }
        #expect(frames == 10)
        writeFileBytes(segment, original)
        let intact = try Store.open(at: dir.store(), options: options(key))
        try check(intact, 5)
        try intact.close()
    }

    /// A changed byte in a sealed checkpoint: the checkpoint is refused and the journal read
    /// instead, with every commit.
    @Test func aChangedCheckpointIsRefusedAndTheJournalReadInstead() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let key = EncryptionKey.random()
        let store = try Store.open(at: dir.store(), options: options(key))
        try fill(store, count: 20)
        try store.checkpoint()
        try store.close()
        let name = listDirectory(dir.store()).first { $0.hasSuffix(JournalFormat.checkpointSuffix) }!
        var bytes = fileBytes(dir.store() + "/" + name)
        bytes[bytes.count / 2] ^= 1
        writeFileBytes(dir.store() + "/" + name, bytes)
        let reopened = try Store.open(at: dir.store(), options: options(key))
        #expect(reopened.recoveryReport.checkpoint == nil)
        #expect(reopened.recoveryReport.checkpointProblem?.contains("does not authenticate") == true)
        try check(reopened, 20)
        try reopened.close()
    }

    /// A frame's nonce is its position: a writer's first commit starts a new segment, so that
    /// bytes a crashed writer left past its last commit are never written over with others.
    @Test func aWritersFirstCommitStartsANewSegment() throws {
        let fs = FaultFileSystem()
        let key = EncryptionKey.random()
        let store = try Store.open(at: FaultStorePaths.directory, options: options(key), fileSystem: fs)
        try fill(store, count: 3)
        let first = store.writer.withLock { $0.active!.number }
        // A transaction whose commit never comes: its frames stay past the last commit.
        fs.inject(.crash, atStep: fs.steps + 2)
        #expect(throws: (any Error).self) { try fill(store, from: 4, count: 1) }
        fs.processCrash()
        let reopened = try Store.open(at: FaultStorePaths.directory, options: options(key), fileSystem: fs)
        // Opening writes nothing; the first commit goes to a new segment.
        #expect(reopened.writer.withLock { $0.active!.number } == first)
        try fill(reopened, from: 4, count: 2)
        let second = reopened.writer.withLock { $0.active!.number }
        #expect(second != first)
        #expect(reopened.writer.withLock { $0.manifest.segments.suffix(2) } == [first, second])
        try check(reopened, 5)
        try reopened.close()
        let again = try Store.open(at: FaultStorePaths.directory, options: options(key), fileSystem: fs)
        try check(again, 5)
        try again.close()
    }

    @Test func aStoreIsEncryptedRekeyedAndDecryptedWithEveryRecord() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let store = try Store.open(at: dir.store(), options: options(nil))
        try fill(store, count: 40)
        try store.close()
        #expect(anyFileHolds(dir.store(), Self.marker))

        let first = EncryptionKey.random()
        try Store.changeKey(at: dir.store(), options: options(nil), to: first)
        #expect(!anyFileHolds(dir.store(), Self.marker))
        expectCode(.keyRequired) { try Store.open(at: dir.store(), options: options(nil)) }
        var encrypted = try Store.open(at: dir.store(), options: options(first))
        try check(encrypted, 40)
        try fill(encrypted, from: 41, count: 5)
        try encrypted.close()

        let second = EncryptionKey.random()
        try Store.changeKey(at: dir.store(), options: options(first), to: second)
        expectCode(.wrongKey) { try Store.open(at: dir.store(), options: options(first)) }
        encrypted = try Store.open(at: dir.store(), options: options(second))
        try check(encrypted, 45)
        try encrypted.close()
        #expect(!anyFileHolds(dir.store(), Self.marker))

        try Store.changeKey(at: dir.store(), options: options(second), to: nil)
        let plain = try Store.open(at: dir.store(), options: options(nil))
        try check(plain, 45)
        try plain.close()
    }

    /// A crash (or power loss) at every step of a change of key: the store opens afterwards
    /// with exactly one of the two keys, with every record.
    @Test(arguments: [false, true]) func aChangeOfKeyInterruptedAtAnyStepLeavesOneWholeStore(powerLoss: Bool) throws {
        let oldKey = EncryptionKey.random()
        let newKey = EncryptionKey.random()
        func prepared() throws -> FaultFileSystem {
            let fs = FaultFileSystem()
            let store = try Store.open(at: FaultStorePaths.directory, options: options(oldKey), fileSystem: fs)
            try fill(store, count: 12)
            try store.checkpoint()
            try fill(store, from: 13, count: 3)
            try store.close()
            return fs
        }
        let dry = try prepared()
        let before = dry.steps
        try Store.changeKey(at: FaultStorePaths.directory, options: options(oldKey), to: newKey, fileSystem: dry)
        let total = dry.steps - before
        #expect(total > 10)
        var withNew = 0
        for step in 1...total {
            let fs = try prepared()
            fs.inject(.crash, atStep: fs.steps + step)
            do {
                try Store.changeKey(at: FaultStorePaths.directory, options: options(oldKey), to: newKey, fileSystem: fs)
            } catch {}
            if powerLoss { fs.powerLoss() } else { fs.processCrash() }
            let opened: Store
            if let old = try? Store.open(at: FaultStorePaths.directory, options: options(oldKey), fileSystem: fs) {
                opened = old
            } else {
                opened = try Store.open(at: FaultStorePaths.directory, options: options(newKey), fileSystem: fs)
                withNew += 1
            }
            try check(opened, 15)
            try opened.close()
        }
        #expect(withNew > 0 && withNew < total)
    }
}
