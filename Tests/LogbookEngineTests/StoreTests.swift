import LogbookTestSupport
import Testing

@testable import LogbookEngine

#if canImport(Glibc)
    import Glibc
#endif

@Suite struct StoreTests {
    /// Writes every kind of record: puts with and without index keys, overwrites, deletes,
    /// set additions, removals and replacements.
    func writeEveryKind(_ store: Store) throws {
        var t = Transaction()
        for i in UInt64(1)...100 {
            t.put(
                key(1, i), value: bytes("value \(i)"),
                indexKeys: [
                    IndexKey(index: 1, orderedInt64: Int64(i % 10)),
                    IndexKey(index: 2, bytes: bytes("name \(i)"))
                ])
        }
        t.put(key(2, 1), value: [])
        t.put(key(2, 2), value: [UInt8](repeating: 7, count: 200_000))
        t.addMembers([key(1, 3), key(1, 1), key(1, 2)], toSet: key(9, 1))
        t.addMembers([key(1, 50)], toSet: key(9, 2))
        try store.commit(t)
        var u = Transaction()
        u.put(key(1, 5), value: bytes("five"), indexKeys: [IndexKey(index: 1, orderedInt64: 100)])
        u.delete(key(1, 6))
        u.delete(key(1, 999))
        u.removeMembers([key(1, 1)], fromSet: key(9, 1))
        u.replaceMembers([key(1, 7), key(1, 8)], ofSet: key(9, 2))
        u.addMembers([key(1, 4)], toSet: key(9, 1))
        try store.commit(u)
    }

    func checkEveryKind(_ s: Snapshot) throws {
        #expect(s.count(inKeyspace: 1) == 99)
        #expect(string(try s.value(forKey: key(1, 1))) == "value 1")
        #expect(string(try s.value(forKey: key(1, 5))) == "five")
        #expect(try s.value(forKey: key(1, 6)) == nil)
        #expect(try s.value(forKey: key(2, 1)) == [])
        #expect(try s.value(forKey: key(2, 2)) == [UInt8](repeating: 7, count: 200_000))
        #expect(s.members(ofSet: key(9, 1)) == [key(1, 2), key(1, 3), key(1, 4)])
        #expect(s.members(ofSet: key(9, 2)) == [key(1, 7), key(1, 8)])
        // Index 1: an entry for each of the 99 keys left (key 5's moved to 100); index 2: key 5's is gone.
        #expect(try s.indexCount(index: 1) == 99)
        #expect(try s.indexCount(index: 2) == 98)
        let three = IndexKey(index: 1, orderedInt64: 3).bytes
        var withThree: [UInt64] = []
        try s.forEachIndexEntry(
            index: 1, from: IndexBound(three, inclusive: true), to: IndexBound(three, inclusive: true)
        ) { _, pk in
            withThree.append(pk & 0xFFFF)
            return true
        }
        #expect(withThree == [3, 13, 23, 33, 43, 53, 63, 73, 83, 93])
        #expect(try s.indexKeys(forKey: key(1, 5)).map(\.index) == [1])
    }

    @Test func everyRecordKindRoundTripsAndSurvivesReopen() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let store = try Store.open(at: dir.store(), options: quietOptions())
        try writeEveryKind(store)
        try checkEveryKind(store.snapshot())
        #expect(store.version == 2)
        try store.close()
        let reopened = try Store.open(at: dir.store(), options: quietOptions())
        #expect(reopened.recoveryReport.commitsReplayed == 2)
        #expect(reopened.recoveryReport.truncatedBytes == 0)
        try checkEveryKind(reopened.snapshot())
        try reopened.close()
    }

    @Test func checkpointThenTailReplay() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let store = try Store.open(at: dir.store(), options: quietOptions())
        try writeEveryKind(store)
        try store.checkpoint()
        var t = Transaction()
        t.put(key(1, 1000), value: bytes("after the checkpoint"))
        t.delete(key(1, 1))
        try store.commit(t)
        try store.close()
        #expect(listDirectory(dir.store()).contains { $0.hasPrefix("checkpoint-") })
        let reopened = try Store.open(at: dir.store(), options: quietOptions())
        #expect(reopened.recoveryReport.checkpoint != nil)
        #expect(reopened.recoveryReport.commitsReplayed == 1, "only the commit after the checkpoint is replayed")
        let s = reopened.snapshot()
        #expect(string(try s.value(forKey: key(1, 1000))) == "after the checkpoint")
        #expect(try s.value(forKey: key(1, 1)) == nil)
        #expect(s.members(ofSet: key(9, 1)) == [key(1, 2), key(1, 3), key(1, 4)])
        #expect(try s.indexCount(index: 2) == 97)
        try reopened.close()
    }

    @Test func aDamagedCheckpointFallsBackToTheWholeJournal() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let store = try Store.open(at: dir.store(), options: quietOptions())
        try writeEveryKind(store)
        try store.checkpoint()
        try store.close()
        let name = listDirectory(dir.store()).first { $0.hasPrefix("checkpoint-") }!
        var data = fileBytes(dir.store() + "/" + name)
        // In the end frame, which the open checks before it decodes anything. (A damaged whole
        // leaf is found after the open, and mended: CheckpointLeavesTests.)
        data[data.count - 3] ^= 0x55
        writeFileBytes(dir.store() + "/" + name, data)
        let reopened = try Store.open(at: dir.store(), options: quietOptions())
        #expect(reopened.recoveryReport.checkpointProblem != nil)
        #expect(reopened.recoveryReport.commitsReplayed == 2)
        try checkEveryKind(reopened.snapshot())
    }

    @Test func segmentsRollOverAndReopen() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        var options = quietOptions()
        options.segmentSize = 4096
        options.allowsTinySegments = true
        let store = try Store.open(at: dir.store(), options: options)
        for i in UInt64(0)..<300 {
            var t = Transaction()
            t.put(key(1, i), value: bytes("record \(i) " + String(repeating: "x", count: Int(i % 50))))
            try store.commit(t)
        }
        let stats = store.statistics()
        #expect(stats.segments.count > 5)
        #expect(stats.keyCount == 300)
        try store.close()
        let reopened = try Store.open(at: dir.store(), options: options)
        let all = try contents(reopened.snapshot())
        #expect(all.count == 300)
        #expect(all[299] == "record 299 " + String(repeating: "x", count: 49))
        #expect(reopened.recoveryReport.commitsReplayed == 300)
    }

    @Test func anInMemoryStoreRollsOverChecksPointsAndCompactsWithoutAFile() throws {
        var options = quietOptions()
        options.inMemory = true
        options.segmentSize = 4096
        options.allowsTinySegments = true
        let path = "/nonexistent/in-memory-\(UInt64.random(in: 0...UInt64.max)).logbook"
        let store = try Store.open(at: path, options: options)
        for i in UInt64(0)..<300 {
            var t = Transaction()
            t.put(key(1, i), value: bytes("record \(i) " + String(repeating: "x", count: Int(i % 50))))
            if i >= 150 { t.delete(key(1, i - 150)) }
            try store.commit(t)
        }
        #expect(store.statistics().segments.count > 5)
        try store.checkpoint()
        _ = try store.compact()
        let all = try contents(store.snapshot())
        #expect(all.count == 150)
        #expect(all[299] == "record 299 " + String(repeating: "x", count: 49))
        #expect(!PosixFileSystem().fileExists(path))
        try store.close()
        // Every open is a new, empty store of its own.
        let again = try Store.open(at: path, options: options)
        #expect(try contents(again.snapshot()).isEmpty)
        try again.close()
    }

    @Test func aSecondWriterSharesTheStoreAndReadersOfAClosedStoreAreFine() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let store = try Store.open(at: dir.store(), options: quietOptions())
        var t = Transaction()
        t.put(key(1, 1), value: bytes("one"))
        try store.commit(t)
        // A second writer reads the first one's commit, and commits after it.
        let second = try Store.open(at: dir.store(), options: quietOptions())
        #expect(string(try second.snapshot().value(forKey: key(1, 1))) == "one")
        var u = Transaction()
        u.put(key(1, 2), value: bytes("two"))
        #expect(try second.commit(u) == 2)
        try second.close()
        try store.close()
        var readOnly = quietOptions()
        readOnly.readOnly = true
        let reader = try Store.open(at: dir.store(), options: readOnly)
        #expect(string(try reader.snapshot().value(forKey: key(1, 1))) == "one")
        #expect(throws: EngineError.self) { try reader.commit(t) }
        let other = try Store.open(at: dir.store(), options: readOnly)
        #expect(other.snapshot().keyCount == 2)
    }

    @Test func filesAreCreatedWithMode0600() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let store = try Store.open(at: dir.store(), options: quietOptions())
        var t = Transaction()
        t.put(1, value: bytes("x"))
        try store.commit(t)
        try store.checkpoint()
        try store.close()
        for name in listDirectory(dir.store()) {
            var st = stat()
            #expect(stat(dir.store() + "/" + name, &st) == 0)
            #expect(st.st_mode & 0o777 == 0o600, "\(name) has mode \(String(st.st_mode & 0o777, radix: 8))")
        }
    }

    @Test func somethingThatIsNotAStoreIsRefusedClearly() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        // A directory of other files.
        let other = dir.store("other")
        mkdir(other, 0o700)
        writeFileBytes(other + "/notes.txt", bytes("hello"))
        #expect { _ = try Store.open(at: other) } throws: { ($0 as? EngineError)?.code == .notAStore }
        // A plain file.
        writeFileBytes(dir.store("file"), bytes("hello"))
        #expect { _ = try Store.open(at: dir.store("file")) } throws: { ($0 as? EngineError)?.code == .notAStore }
        // A MANIFEST that is not ours.
        let fake = dir.store("fake")
        mkdir(fake, 0o700)
        writeFileBytes(fake + "/MANIFEST", bytes("this is not a manifest"))
        #expect { _ = try Store.open(at: fake) } throws: { ($0 as? EngineError)?.code == .notAStore }
        // Nothing there, read-only.
        var readOnly = StoreOptions()
        readOnly.readOnly = true
        #expect { _ = try Store.open(at: dir.store("missing"), options: readOnly) } throws: {
            ($0 as? EngineError)?.code == .notAStore
        }
        // A segment of a future format version.
        let future = dir.store("future")
        let s = try Store.open(at: future, options: quietOptions())
        try s.close()
        let segment = future + "/" + listDirectory(future).first { $0.hasPrefix("journal-") }!
        var data = fileBytes(segment)
        data[8] = 99
        writeFileBytes(segment, data)
        #expect { _ = try Store.open(at: future) } throws: { ($0 as? EngineError)?.code != nil }
    }

    @Test func statisticsReportLiveAndDeadBytesAndSnapshots() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let store = try Store.open(at: dir.store(), options: quietOptions())
        for round in 0..<3 {
            var t = Transaction()
            for i in UInt64(0)..<1000 { t.put(key(1, i), value: bytes("round \(round) item \(i)")) }
            try store.commit(t)
        }
        let pinned = store.snapshot()
        let stats = store.statistics()
        #expect(stats.keyCount == 1000)
        #expect(stats.keysPerKeyspace[1] == 1000)
        #expect(stats.deadBytes > stats.liveBytes, "two rounds of three are superseded")
        #expect(stats.pinnedSnapshots == 1)
        #expect(stats.oldestSnapshotAge != nil)
        #expect(stats.fileBytes > 0)
        _ = pinned
    }
}

@Suite struct StoreLocationTests {
    @Test func missingParentDirectoriesAreCreated() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let path = dir.path + "/a/b/c/store"
        let store = try Store.open(at: path, options: quietOptions())
        var t = Transaction()
        t.put(1, value: bytes("deep"))
        try store.commit(t)
        try store.close()
        #expect(string(try Store.open(at: path, options: quietOptions()).snapshot().value(forKey: 1)) == "deep")
    }
}

@Suite struct VerifyTests {
    @Test func aSoundStoreVerifiesAndDifferencesAreNamed() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let store = try Store.open(at: dir.store(), options: quietOptions())
        try StoreTests().writeEveryKind(store)
        try store.checkpoint()
        var t = Transaction()
        t.put(key(1, 500), value: bytes("after the checkpoint"), indexKeys: [IndexKey(index: 1, orderedInt64: 4)])
        try store.commit(t)
        try store.close()
        let report = try Store.verify(at: dir.store())
        #expect(report.isSound, "\(report.problems)")
        #expect(report.records == 102 && report.indexEntries == 198 && report.setMembers == 5, "\(report)")
        #expect(report.commits == 3 && report.version == 3 && report.checkpoint != nil)

        // The comparison names what differs: a record, an index entry, a set member.
        let other = TemporaryDirectory()
        defer { other.cleanUp() }
        let changed = try Store.open(at: other.store(), options: quietOptions())
        try StoreTests().writeEveryKind(changed)
        var u = Transaction()
        u.put(key(1, 7), value: bytes("different"), indexKeys: [IndexKey(index: 1, orderedInt64: 7)])
        u.addMembers([key(1, 9)], toSet: key(9, 2))
        try changed.commit(u)
        let reopened = try Store.open(at: dir.store(), options: quietOptions())
        var diff = VerificationReport()
        Store.compare(reopened.snapshot(), changed.snapshot(), into: &diff)
        #expect(diff.problems.contains { $0.contains("record 1000000000007") }, "\(diff.problems)")
        #expect(diff.problems.contains { $0.contains("set 9000000000002") }, "\(diff.problems)")
        #expect(diff.problems.contains { $0.contains("index 1") }, "\(diff.problems)")
        try reopened.close()
        try changed.close()
    }

    /// A transaction of hundreds of blocks is held compressed until its commit, which applies
    /// it a part at a time: what it leaves (values, index entries, sets, live bytes) is what
    /// replaying it whole gives, including a key put in one part and again in a later one.
    @Test func aLargeTransactionIsHeldCompressedAndAppliedInParts() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let store = try Store.open(at: dir.store(), options: quietOptions())
        func value(_ i: Int) -> [UInt8] { bytes("record \(i) " + String(repeating: "abcdefgh", count: 24)) }
        func entry(_ v: UInt64) -> IndexKey { IndexKey(index: 2, orderedUInt64: v) }
        var t = Transaction()
        let count = 60_000
        for i in 0..<count {
            t.put(key(1, UInt64(i)), value: value(i), indexKey: entry(UInt64(i % 1000)))
            if i == count / 2 { t.addMembers([key(1, 1), key(1, 2)], toSet: key(9, 1)) }
        }
        t.put(key(1, 5), value: bytes("put again"), indexKey: entry(7777))
        let blocks = t.commitBlocks()
        #expect(blocks.count > Store.applyPartBlocks, "more blocks than one part: \(blocks.count)")
        #expect(blocks.contains { $0.isEmpty }, "finished blocks were let go, kept compressed")
        #expect(t.finishedBlocks().allSatisfy { !$0.isEmpty }, "and read back whole")
        #expect(!t.keepsTable, "its operations are read from its blocks at the commit")
        try store.commit(t)

        func check(_ s: Snapshot) throws {
            #expect(s.count(inKeyspace: 1) == count)
            for i in [0, 1, 4, 6, count / 2, count - 1] { #expect(try s.value(forKey: key(1, UInt64(i))) == value(i)) }
            #expect(string(try s.value(forKey: key(1, 5))) == "put again")
            #expect(s.members(ofSet: key(9, 1)) == [key(1, 1), key(1, 2)])
            #expect(try s.indexCount(index: 2) == count)
            func entries(_ v: UInt64) throws -> Int {
                let b = entry(v).bytes
                return try s.indexCount(
                    index: 2, from: IndexBound(b, inclusive: true), to: IndexBound(b, inclusive: true))
            }
            #expect(try entries(5) == count / 1000 - 1, "the first put's entry left with its version")
            #expect(try entries(7777) == 1)
            #expect(try entries(6) == count / 1000)
        }
        try check(store.snapshot())
        let live = store.statistics().liveBytes
        try store.close()
        let reopened = try Store.open(at: dir.store(), options: quietOptions())
        try check(reopened.snapshot())
        #expect(reopened.statistics().liveBytes == live, "the replay, one transaction, counts the same live bytes")
        try reopened.close()
    }
}
