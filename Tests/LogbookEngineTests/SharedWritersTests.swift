import Dispatch
import LogbookTestSupport
import Testing

@testable import LogbookEngine

#if canImport(Glibc)
    import Glibc
#endif

/// Several writers on one store (two `Store` instances of one process hold their locks on
/// their own descriptors, as two processes do): commits are serialized, each writer reads the
/// others' commits before its own, and rollovers, checkpoints, compactions and leftovers of a
/// writer that died are shared correctly.
@Suite struct SharedWritersTests {
    func options(_ durability: Durability = .full, segmentSize: Int? = nil, encrypted: Bool = false) -> StoreOptions {
        var options = quietOptions(durability)
        if let segmentSize { options.segmentSize = segmentSize }
        options.compaction = .manual
        options.checkpointInterval = 0
        if encrypted { options.encryptionKey = CorruptionTests.testKey }
        return options
    }

    /// Text that does not compress: `count` hex digits drawn from `seed`.
    func noise(_ seed: Int, _ count: Int) -> String {
        var x = UInt64(seed) &* 0x9E37_79B9_7F4A_7C15 | 1
        return String(
            (0..<count).map { _ in
                x ^= x << 13
                x ^= x >> 7
                x ^= x << 17
                return Character(String(x % 16, radix: 16))
            })
    }

    func put(_ store: Store, _ id: UInt64, _ text: String, keyspace: UInt16 = 1) throws -> UInt64 {
        var t = Transaction()
        t.put(key(keyspace, id), value: bytes(text))
        t.addMembers([id], toSet: key(2, 1))
        return try store.commit(t)
    }

    @Test(arguments: [false, true]) func twoWritersAlternateAndEachReadsTheOthersCommits(encrypted: Bool) throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let a = try Store.open(at: dir.store(), options: options(segmentSize: 65536, encrypted: encrypted))
        let b = try Store.open(at: dir.store(), options: options(segmentSize: 65536, encrypted: encrypted))
        var expected: [UInt64: String] = [:]
        for i in 1...120 {
            let (writer, other) = i % 3 == 0 ? (b, a) : (a, b)
            let text = "value \(i) " + noise(i, 1500)
            #expect(try put(writer, UInt64(i), text) == UInt64(i), "versions follow each other across writers")
            expected[UInt64(i)] = text
            // The other writer sees it once it refreshes (or commits).
            if i % 10 == 0 {
                #expect(try other.refresh())
                #expect(try contents(other.snapshot()) == expected)
            }
        }
        // Rollovers happened (segments of 64 KiB) on both sides, and both read all of it.
        #expect(a.statistics().segments.count >= 3)
        for s in [a, b] {
            _ = try s.refresh()
            #expect(try contents(s.snapshot()) == expected)
            #expect(s.snapshot().members(ofSet: key(2, 1)) == (1...120).map(UInt64.init))
        }
        try a.close()
        try b.close()
        let reopened = try Store.open(at: dir.store(), options: options(encrypted: encrypted))
        #expect(try contents(reopened.snapshot()) == expected)
        #expect(reopened.snapshot().version == 120)
        try reopened.close()
    }

    @Test(arguments: [Durability.full, .normal]) func writersOnThreadsCommitEverythingOnce(durability: Durability)
        throws
    {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let stores = try (0..<3).map { _ in try Store.open(at: dir.store(), options: options(durability)) }
        let perWriter = 150
        let versions = Locked<[UInt64]>([])
        DispatchQueue.concurrentPerform(iterations: stores.count) { w in
            for i in 0..<perWriter {
                let id = UInt64(w * 1000 + i)
                guard let v = try? put(stores[w], id, "w\(w) #\(i)") else { return }
                versions.withLock { $0.append(v) }
            }
        }
        #expect(versions.withLock { $0.sorted() } == (1...UInt64(stores.count * perWriter)).map { $0 })
        for s in stores { try s.close() }
        let reopened = try Store.open(at: dir.store(), options: options())
        let all = try contents(reopened.snapshot())
        #expect(all.count == stores.count * perWriter)
        #expect(all[2149] == "w2 #149")
        try reopened.close()
    }

    @Test func aCheckpointAndACompactionOfOneWriterLeaveTheOthersWhole() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let a = try Store.open(at: dir.store(), options: options(segmentSize: 65536))
        let b = try Store.open(at: dir.store(), options: options(segmentSize: 65536))
        var expected: [UInt64: String] = [:]
        for round in 0..<4 {
            for i in 0..<60 {
                let id = UInt64(i % 40)
                let text = "round \(round) value \(i) " + noise(round * 100 + i, 800)
                _ = try put(i % 2 == 0 ? a : b, id, text)
                expected[id] = text
            }
            switch round {
            case 0: try a.checkpoint()
            case 1: _ = try b.compact()
            case 2: _ = try a.compact()
            default: try b.checkpoint()
            }
            // Both go on after it: the other one catches up (after a compaction, reloading).
            _ = try put(b, 500 + UInt64(round), "b after \(round)")
            _ = try put(a, 600 + UInt64(round), "a after \(round)")
            expected[500 + UInt64(round)] = "b after \(round)"
            expected[600 + UInt64(round)] = "a after \(round)"
            for s in [a, b] {
                _ = try s.refresh()
                #expect(try contents(s.snapshot()) == expected, "round \(round)")
            }
        }
        try a.close()
        try b.close()
        let reopened = try Store.open(at: dir.store(), options: options())
        #expect(try contents(reopened.snapshot()) == expected)
        #expect(reopened.recoveryReport.removedFiles.isEmpty, "no file left unnamed")
        try reopened.close()
        #expect(try Store.verify(at: dir.store()).problems.isEmpty)
    }

    /// What a writer that died in the middle of a commit leaves (frames with no commit record
    /// after the last commit, `TAIL` naming the commit before them): the next writer's commit
    /// writes over them in a plain store, starts a new segment in an encrypted one, and every
    /// commit is there after a reopen.
    @Test(arguments: [false, true]) func aWritersTornTransactionIsLeftBehindByTheNext(encrypted: Bool) throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let a = try Store.open(at: dir.store(), options: options(encrypted: encrypted))
        let b = try Store.open(at: dir.store(), options: options(encrypted: encrypted))
        _ = try put(a, 1, "one")
        _ = try put(b, 2, "two")
        // b "dies" in its next commit: half a transaction after the last commit.
        let segmentPath =
            dir.store() + "/" + listDirectory(dir.store()).filter { $0.hasPrefix("journal-") }.sorted().last!
        let segment = fileBytes(segmentPath)
        let end = b.writer.withLock { $0.appendOffset }
        let torn = [UInt8](repeating: 0xA5, count: 300)
        writeFileBytes(segmentPath, Array(segment.prefix(end)) + torn)
        let segmentsBefore = b.statistics().segments.count
        _ = try put(a, 3, "three")
        let after = fileBytes(segmentPath)
        if encrypted {
            // No position written twice: the torn bytes are cut, and a new segment begins.
            #expect(after.count == end)
            #expect(a.statistics().segments.count == segmentsBefore + 1)
        } else {
            // Written over: the commit follows the last whole one.
            #expect(Array(after.prefix(end)) == Array(segment.prefix(end)))
            #expect(Array(after[end..<(end + 16)]) != Array(torn.prefix(16)))
        }
        try a.close()
        let reopened = try Store.open(at: dir.store(), options: options(encrypted: encrypted))
        #expect(try contents(reopened.snapshot()) == [1: "one", 2: "two", 3: "three"])
        try reopened.close()
    }

    @Test func aChangeOfKeyWaitsForTheOnlyWriter() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let a = try Store.open(at: dir.store(), options: options())
        _ = try put(a, 1, "one")
        #expect {
            try Store.changeKey(at: dir.store(), options: options(), to: EncryptionKey.random())
        } throws: { ($0 as? EngineError)?.code == .locked }
        try a.close()
        try Store.changeKey(at: dir.store(), options: options(), to: CorruptionTests.testKey)
        let reopened = try Store.open(at: dir.store(), options: options(encrypted: true))
        #expect(try contents(reopened.snapshot()) == [1: "one"])
        try reopened.close()
    }

    @Test func workThatNeedsTheStoreToItselfWaitsForTheOtherWriters() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let a = try Store.open(at: dir.store(), options: options())
        #expect(try a.withStoreToItself("a test") { 1 } == 1, "alone: granted")
        #expect(!Store.hasWriters(at: dir.store() + "-none"))
        let b = try Store.open(at: dir.store(), options: options())
        #expect(Store.hasWriters(at: dir.store()))
        #expect { try a.withStoreToItself("a test") { 1 } } throws: {
            ($0 as? EngineError)?.code == .locked && "\($0)".contains("a test needs it to itself")
        }
        try b.close()
        #expect(try a.withStoreToItself("a test") { 2 } == 2)
        // Still a writer beside others afterwards (the lock went back to shared).
        let c = try Store.open(at: dir.store(), options: options())
        _ = try put(c, 1, "one")
        try c.close()
        try a.close()
        #expect(!Store.hasWriters(at: dir.store()))
    }
}
