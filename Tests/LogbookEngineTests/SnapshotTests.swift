import Dispatch
import LogbookTestSupport
import Synchronization
import Testing

@testable import LogbookEngine

@Suite struct SnapshotTests {
    @Test func snapshotsSeeWholeCommitsWhileAWriterCommits() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let store = try Store.open(at: dir.store(), options: quietOptions(.none))
        // Invariant of every commit: keys 0..<50 all hold the same round number, and the
        // index holds exactly 50 entries for that round.
        func commitRound(_ round: Int) throws {
            var t = Transaction()
            for i in UInt64(0)..<50 {
                t.put(key(1, i), value: bytes("\(round)"), indexKeys: [IndexKey(index: 1, orderedInt64: Int64(round))])
            }
            try store.commit(t)
        }
        try commitRound(0)
        let done = Atomic<Bool>(false)
        let violations = Atomic<Int>(0)
        let reads = Atomic<Int>(0)
        let group = DispatchGroup()
        for _ in 0..<2 {
            onOwnThread(group: group) {
                while !done.load(ordering: .acquiring) {
                    let s = store.snapshot()
                    let values = Set((0..<50).map { string(try? s.value(forKey: key(1, $0))) ?? "missing" })
                    guard values.count == 1, let round = Int(values.first!) else {
                        violations.add(1, ordering: .relaxed)
                        continue
                    }
                    let r = IndexKey(index: 1, orderedInt64: Int64(round)).bytes
                    if (try? s.indexCount(index: 1)) != 50
                        || (try? s.indexCount(
                            index: 1, from: IndexBound(r, inclusive: true), to: IndexBound(r, inclusive: true))) != 50
                    {
                        violations.add(1, ordering: .relaxed)
                    }
                    if s.version != UInt64(round + 1) { violations.add(1, ordering: .relaxed) }
                    reads.add(1, ordering: .relaxed)
                }
            }
        }
        // Keep writing until the readers have read a good number of snapshots meanwhile.
        var round = 1
        while round <= 300 || (reads.load(ordering: .relaxed) < 200 && round < 100_000) {
            try commitRound(round)
            round += 1
        }
        done.store(true, ordering: .releasing)
        group.wait()
        #expect(violations.load(ordering: .relaxed) == 0)
        #expect(reads.load(ordering: .relaxed) > 0)
    }

    @Test func aPinnedSnapshotKeepsItsVersionAndItsSegmentsThroughCompaction() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        var options = quietOptions()
        options.segmentSize = 16 << 10
        options.allowsTinySegments = true
        let store = try Store.open(at: dir.store(), options: options)
        for round in 0..<5 {
            var t = Transaction()
            for i in UInt64(0)..<500 {
                t.put(
                    key(1, i), value: bytes("round \(round) item \(i)"),
                    indexKeys: [IndexKey(index: 1, orderedUInt64: i)])
            }
            t.addMembers([UInt64(round)], toSet: key(5, 1))
            try store.commit(t)
        }
        var t = Transaction()
        for i in UInt64(0)..<100 { t.delete(key(1, i)) }
        try store.commit(t)
        let pinned = store.snapshot()
        let before = try contents(pinned)
        let filesBefore = Set(listDirectory(dir.store()).filter { $0.hasPrefix("journal-") })
        let statsBefore = store.statistics()

        let report = try store.compact()
        #expect(report.segmentsRemoved > 0)
        #expect(report.bytesAfter < report.bytesBefore)
        // The switch (under the writer's lock) is a part of the whole, apart from the checkpoint.
        #expect(report.switchSeconds > 0 && report.switchSeconds + report.checkpointSeconds <= report.seconds)
        // The old segments' names are gone; the pinned snapshot still reads them through its
        // open descriptors.
        let stillThere = Set(listDirectory(dir.store()).filter { $0.hasPrefix("journal-") })
        #expect(filesBefore.isDisjoint(with: stillThere))
        #expect(try contents(pinned) == before)
        // New snapshots read the compacted segments and see the same data.
        let fresh = store.snapshot()
        #expect(try contents(fresh) == before)
        #expect(fresh.members(ofSet: key(5, 1)) == [0, 1, 2, 3, 4])
        #expect(try fresh.indexCount(index: 1) == 400)
        let statsAfter = store.statistics()
        #expect(statsAfter.deadBytes < statsBefore.deadBytes / 10, "dead bytes are reclaimed")
        // Writers go on after compaction.
        var after = Transaction()
        after.put(key(1, 7), value: bytes("new"))
        try store.commit(after)
        // Releasing the snapshot deletes the replaced segments.
        _ = consume pinned
        let remaining = Set(listDirectory(dir.store()).filter { $0.hasPrefix("journal-") })
        #expect(remaining.isDisjoint(with: filesBefore))
        try store.close()
        let reopened = try Store.open(at: dir.store(), options: options)
        var expected = before
        expected[7] = "new"
        #expect(try contents(reopened.snapshot()) == expected)
        #expect(reopened.snapshot().members(ofSet: key(5, 1)) == [0, 1, 2, 3, 4])
    }

    @Test func commitsMadeWhileACompactionRemapsAreCarriedOverByItsSwitch() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        var options = quietOptions(.none)
        options.segmentSize = 64 << 10
        let holder = Locked<Store?>(nil)
        let expected = Locked<[UInt64: String]>([:])
        // Between the compaction's remap of its copy and its switch: replace some records that
        // the compaction moved, delete others, add new ones, and delete one of those again.
        options.beforeCompactionSwitch = {
            guard let store = holder.withLock({ $0 }) else { return }
            var t = Transaction()
            var changes: [UInt64: String?] = [:]
            for i in stride(from: UInt64(0), to: 2_000, by: 7) {
                t.put(key(1, i), value: bytes("during \(i)"))
                changes[i] = "during \(i)"
            }
            for i in stride(from: UInt64(3), to: 2_000, by: 11) where changes[i] == nil {
                t.delete(key(1, i))
                changes[i] = .some(nil)
            }
            for i in UInt64(5_000)..<5_010 {
                t.put(key(1, i), value: bytes("new \(i)"))
                changes[i] = "new \(i)"
            }
            try! store.commit(t)
            var again = Transaction()
            again.delete(key(1, 5_003))
            changes[5_003] = .some(nil)
            try! store.commit(again)
            expected.withLock { e in
                for (k, v) in changes { e[k] = v }
            }
        }
        let store = try Store.open(at: dir.store(), options: options)
        var first = Transaction()
        var model: [UInt64: String] = [:]
        for i in UInt64(0)..<2_000 {
            first.put(key(1, i), value: bytes("v\(i)"))
            model[i] = "v\(i)"
        }
        try store.commit(first)
        expected.withLock { $0 = model }
        holder.withLock { $0 = store }
        let report = try store.compact()
        holder.withLock { $0 = nil }
        #expect(report.liveBytesRewritten > 0)
        let want = expected.withLock { $0 }.mapValues { $0 }
        #expect(want[0] == "during 0" && want[3] == nil && want[5_001] == "new 5001" && want[5_003] == nil)
        #expect(try contents(store.snapshot()) == want)
        #expect(store.snapshot().count(inKeyspace: 1) == want.count)
        try store.close()
        options.beforeCompactionSwitch = nil
        let reopened = try Store.open(at: dir.store(), options: options)
        #expect(try contents(reopened.snapshot()) == want)
        try reopened.close()
    }

    @Test func compactionRunsWhileAWriterCommits() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        var options = quietOptions(.normal)
        options.segmentSize = 32 << 10
        options.allowsTinySegments = true
        let store = try Store.open(at: dir.store(), options: options)
        let writerDone = Atomic<Bool>(false)
        let group = DispatchGroup()
        onOwnThread(group: group) {
            for round in 0..<200 {
                var t = Transaction()
                for i in UInt64(0)..<20 { t.put(key(1, i), value: bytes("r\(round)")) }
                t.put(key(2, UInt64(round)), value: bytes("log \(round)"))
                try! store.commit(t)
            }
            writerDone.store(true, ordering: .releasing)
        }
        var compactions = 0
        while !writerDone.load(ordering: .acquiring) {
            _ = try store.compact()
            compactions += 1
        }
        group.wait()
        #expect(compactions > 0)
        let s = store.snapshot()
        #expect(try contents(s).values.allSatisfy { $0 == "r199" })
        #expect(s.count(inKeyspace: 2) == 200)
        try store.close()
        let reopened = try Store.open(at: dir.store(), options: options)
        #expect(try contents(reopened.snapshot()).values.allSatisfy { $0 == "r199" })
        #expect(reopened.snapshot().count(inKeyspace: 2) == 200)
    }

    @Test func groupCommitSharesSyncsAcrossThreads() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let store = try Store.open(at: dir.store(), options: quietOptions(.normal))
        DispatchQueue.concurrentPerform(iterations: 8) { thread in
            for i in 0..<50 {
                var t = Transaction()
                t.put(key(1, UInt64(thread * 1000 + i)), value: bytes("t\(thread) i\(i)"))
                let v = try! store.commit(t)
                // A returned commit is visible to new snapshots.
                #expect(store.snapshot().version >= v)
            }
        }
        #expect(store.snapshot().count(inKeyspace: 1) == 400)
        try store.close()
        #expect(try Store.open(at: dir.store(), options: quietOptions()).snapshot().count(inKeyspace: 1) == 400)
    }
}

@Suite struct MaintenancePolicyTests {
    @Test func automaticCheckpointsAndCompactionRunInTheBackground() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        var options = StoreOptions()
        options.segmentSize = 32 << 10
        options.allowsTinySegments = true
        options.checkpointInterval = 64 << 10
        options.checkpointOnClose = false
        options.compaction = .automatic(deadRatio: 0.5, minimumBytes: 128 << 10)
        let store = try Store.open(at: dir.store(), options: options)
        for round in 0..<40 {
            var t = Transaction()
            for i in UInt64(0)..<200 {
                t.put(key(1, i), value: bytes("round \(round) item \(i) " + String(repeating: "x", count: 20)))
            }
            try store.commit(t)
        }
        try store.close()  // waits for background work
        let stats = store.statistics()
        #expect(stats.checkpoint != nil, "a checkpoint was written without being asked for")
        #expect(
            Double(stats.deadBytes) <= 0.5 * Double(stats.totalBytes) + Double(64 << 10),
            "compaction kept dead bytes near the policy's ratio: \(stats.deadBytes) of \(stats.totalBytes)")
        let reopened = try Store.open(at: dir.store(), options: quietOptions())
        #expect(try contents(reopened.snapshot()).values.allSatisfy { $0.hasPrefix("round 39 ") })
        #expect(reopened.snapshot().count(inKeyspace: 1) == 200)
    }
}

@Suite struct DeferredIndexTests {
    /// 100 keys in index 1 by `i % 10`, checkpointed, then the store reopened.
    func reopenedStore(_ dir: TemporaryDirectory) throws -> Store {
        let first = try Store.open(at: dir.store(), options: quietOptions())
        var t = Transaction()
        for i in UInt64(0)..<100 {
            t.put(key(1, i), value: bytes("v\(i)"), indexKeys: [IndexKey(index: 1, orderedInt64: Int64(i % 10))])
        }
        try first.commit(t)
        try first.checkpoint()
        try first.close()
        return try Store.open(at: dir.store(), options: quietOptions())
    }

    func entries(_ s: Snapshot, _ value: Int64) throws -> Int {
        let b = IndexKey(index: 1, orderedInt64: value).bytes
        return try s.indexCount(index: 1, from: IndexBound(b, inclusive: true), to: IndexBound(b, inclusive: true))
    }

    @Test func anOpenBuildsTheSecondaryIndexesOnlyWhenAReadOrACommitNeedsThem() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let store = try reopenedStore(dir)
        let before = store.snapshot()
        #expect(!before.state.secondary.isBuilt)
        // Reads by key and a commit without index entries leave them in the checkpoint.
        #expect(string(try before.value(forKey: key(1, 7))) == "v7")
        var plain = Transaction()
        plain.put(key(1, 1000), value: bytes("no index"))
        try store.commit(plain)
        #expect(!store.snapshot().state.secondary.isBuilt)
        // A commit that moves an entry builds them, then applies the change.
        var move = Transaction()
        move.put(key(1, 5), value: bytes("moved"), indexKeys: [IndexKey(index: 1, orderedInt64: 100)])
        try store.commit(move)
        let after = store.snapshot()
        #expect(after.state.secondary.isBuilt)
        #expect(try after.indexCount(index: 1) == 100)
        #expect(try entries(after, 5) == 9 && entries(after, 100) == 1)
        // The snapshot taken before the commit still sees the indexes of its version.
        #expect(try entries(before, 5) == 10 && entries(before, 100) == 0)
        try store.close()
        // And so does the next open, from the journal and the checkpoint.
        let again = try Store.open(at: dir.store(), options: quietOptions())
        #expect(try entries(again.snapshot(), 5) == 9 && entries(again.snapshot(), 100) == 1)
        try again.close()
    }

    /// A walk of every entry in order (a fetch of everything sorted by the index) reads the
    /// checkpoint's encoded section in place however often it runs: the built tree would not
    /// make it faster and would hold about four times the memory. Seeks, ranges and reversed
    /// walks, which the tree does make cheaper, still start the build.
    @Test func wholeForwardWalksLeaveTheIndexesInTheCheckpoint() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let store = try reopenedStore(dir)
        let snapshot = store.snapshot()
        for _ in 0..<5 {
            var previous: [UInt8] = []
            var seen = 0
            try snapshot.forEachIndexEntry(index: IndexID(rawValue: 1)) { key, _ in
                #expect(previous.lexicographicallyPrecedes(key) || previous.elementsEqual(key))
                previous = Array(key)
                seen += 1
                return true
            }
            #expect(seen == 100)
            #expect(try snapshot.primaryKeys(index: IndexID(rawValue: 1)).count == 100)
        }
        #expect(!snapshot.state.secondary.readsStartedBuild)
        #expect(!snapshot.state.secondary.isBuilt)
        // A reversed walk decodes from the first entry to give the last ones: it counts.
        let last = try snapshot.primaryKeys(index: IndexID(rawValue: 1), reverse: true, limit: 3)
        #expect(last.count == 3)
        #expect(snapshot.state.secondary.readsStartedBuild)
        snapshot.state.secondary.waitUntilBuilt()
        #expect(snapshot.state.secondary.isBuilt)
        // The built tree gives what the walk in place gave.
        #expect(try snapshot.primaryKeys(index: IndexID(rawValue: 1), reverse: true, limit: 3) == last)
        try store.close()
    }

    /// Statistics count the indexes still in the checkpoint where they are: the same entries
    /// as once built, and the memory they take there (a build made to count them took 200 MB
    /// at 10,000,000 objects, kept for the rest of the process).
    @Test func statisticsCountTheIndexesWithoutBuildingThem() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let store = try reopenedStore(dir)
        let snapshot = store.snapshot()
        let unbuilt = store.statistics()
        #expect(unbuilt.indexEntries == [IndexID(rawValue: 1): 100])
        #expect(!snapshot.state.secondary.isBuilt)
        snapshot.state.secondary.waitUntilBuilt()
        let built = store.statistics()
        #expect(built.indexEntries == unbuilt.indexEntries)
        // A built tree takes more than its encoded section's seek points.
        #expect(built.indexMemoryBytes > unbuilt.indexMemoryBytes)
        try store.close()
    }

    @Test func snapshotsThatShareDeferredIndexesBuildThemOnceFromManyThreads() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let store = try reopenedStore(dir)
        let snapshots = (0..<8).map { _ in store.snapshot() }
        let counts = Mutex([Int](repeating: -1, count: snapshots.count))
        DispatchQueue.concurrentPerform(iterations: snapshots.count) { i in
            let n = (try? entries(snapshots[i], Int64(i % 10))) ?? -2
            counts.withLock { $0[i] = n }
        }
        #expect(counts.withLock { $0 } == Array(repeating: 10, count: snapshots.count))
        // The reads did not wait for the build they started; once it is done, every snapshot
        // sees the one copy it made.
        snapshots[0].state.secondary.waitUntilBuilt()
        #expect(snapshots.allSatisfy { $0.state.secondary.isBuilt })
        try store.close()
    }
}

extension DeferredIndexTests {
    /// Found by FuzzCheckpoint: a checkpoint may name an index with no entries, and the
    /// deferred build dropped it where the eager decode keeps it.
    @Test func aDeferredBuildGivesTheIndexesAnEagerDecodeGives() throws {
        var state = IndexState()
        state.indexes[3] = OrderedIndex()
        var two = OrderedIndex()
        for i in UInt64(0)..<70_000 {
            _ = IndexKey(index: 4, orderedInt64: Int64(i / 3)).bytes.withUnsafeBytes { two.insert($0, key(1, i)) }
        }
        state.indexes[4] = two
        let stream = Checkpoint.encode(state, segment: 1, offset: 32)
        let eager = try Checkpoint.decode(stream).state
        let deferred = try Checkpoint.decode(stream) { _ in stream }.state
        #expect(!deferred.secondary.isBuilt)
        #expect(deferred.indexes.keys.sorted() == [3, 4] && eager.indexes.keys.sorted() == [3, 4])
        #expect(deferred.indexes[3]?.count == 0)
        // Three restart points' worth of entries, built in parallel, in the same order.
        var a: [(UInt64, [UInt8])] = []
        var b: [(UInt64, [UInt8])] = []
        eager.indexes[4]!.forEach(from: nil, to: nil) { bytes, pk in
            a.append((pk, Array(bytes)))
            return true
        }
        deferred.indexes[4]!.forEach(from: nil, to: nil) { bytes, pk in
            b.append((pk, Array(bytes)))
            return true
        }
        #expect(a.count == 70_000 && b.count == 70_000)
        #expect(a.elementsEqual(b) { $0.0 == $1.0 && $0.1 == $1.1 })
    }
}

extension DeferredIndexTests {
    /// The deferred build keeps each key's first eight bytes in a register, updated from the
    /// shared length and the suffix: keys of every length from 0 to 23 bytes, sharing prefixes
    /// of every length, must come back byte for byte, in the order of the index they came from.
    @Test func aDeferredBuildRestoresKeysOfEveryLengthAndSharedPrefix() throws {
        var generator = SeededGenerator(seed: 0x5EED_1DE7)
        var source = OrderedIndex()
        let stems: [[UInt8]] = (0..<40).map { _ in
            (0..<Int(generator.next() % 12)).map { _ in UInt8(generator.next() % 4) }
        }
        for i in UInt64(0)..<80_000 {
            var bytes = stems[Int(generator.next() % UInt64(stems.count))]
            bytes += (0..<Int(generator.next() % 13)).map { _ in UInt8(generator.next() % 3) }
            bytes.withUnsafeBytes { _ = source.insert($0, key(1, i)) }
        }
        var state = IndexState()
        state.indexes[7] = source
        let stream = Checkpoint.encode(state, segment: 1, offset: 32)
        let deferred = try Checkpoint.decode(stream) { _ in stream }.state
        #expect(!deferred.secondary.isBuilt)
        func entries(_ index: OrderedIndex) -> [(UInt64, [UInt8])] {
            var out: [(UInt64, [UInt8])] = []
            index.forEach(from: nil, to: nil) { bytes, pk in
                out.append((pk, Array(bytes)))
                return true
            }
            return out
        }
        let expected = entries(source)
        let built = entries(deferred.indexes[7]!)
        #expect(Set(expected.map(\.1.count)) == Set(0...23))
        #expect(built.count == 80_000)
        #expect(built.elementsEqual(expected) { $0.0 == $1.0 && $0.1 == $1.1 })
        // Searches compare the rebuilt prefixes: a count of each stem's range agrees too.
        for stem in stems.prefix(10) {
            let low = IndexBound(stem, inclusive: true)
            let high = IndexBound(stem + [0xFF], inclusive: false)
            #expect(deferred.indexes[7]!.count(from: low, to: high) == source.count(from: low, to: high))
        }
    }
}

extension DeferredIndexTests {
    /// A checkpoint file of several 1 MiB chunks, its secondary indexes after the primary
    /// index's chunks: the deferred build decompresses only the chunks of their section, and
    /// builds the indexes the state had.
    @Test func aDeferredBuildFromAFileOfManyChunksReadsOnlyTheIndexSection() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        var state = IndexState()
        var random = SeededGenerator(seed: 11)
        for i in UInt64(0)..<400_000 {
            let location = Location(
                segment: 1 + random.next() % 200, frameOffset: Int(random.next() % (1 << 29)),
                blockOffset: Int(random.next() % 60_000))
            _ = state.primary.set(key(1, i), location.packed)
        }
        var index = OrderedIndex()
        for i in UInt64(0)..<90_000 {
            _ = IndexKey(index: 2, orderedInt64: Int64(random.next() % 5_000)).bytes.withUnsafeBytes {
                index.insert($0, key(1, i))
            }
        }
        state.indexes[2] = index
        let (size, loaded) = try Self.writtenAndRead(state, number: 9, in: dir)
        #expect(size > 3 * Checkpoint.chunkSize)
        #expect(!loaded.state.secondary.isBuilt)
        #expect(loaded.state.primary[key(1, 399_999)] == state.primary[key(1, 399_999)])
        let a = Self.entries { index.forEach(from: nil, to: nil, $0) }
        let b = Self.entries { loaded.state.indexes[2]!.forEach(from: nil, to: nil, $0) }
        #expect(b.count == 90_000)
        #expect(a.elementsEqual(b) { $0.0 == $1.0 && $0.1 == $1.1 })
    }

    /// `state` written as checkpoint `number` in `dir` and read as an open reads it: the
    /// stream's length, and what the read gave.
    static func writtenAndRead(_ state: IndexState, number: UInt64, in dir: TemporaryDirectory) throws
        -> (streamLength: Int, loaded: Checkpoint.Loaded)
    {
        let stream = Checkpoint.encode(state, segment: 1, offset: 32)
        try Checkpoint.write(stream, number: number, directory: dir.path, fileSystem: PosixFileSystem())
        let loaded = try Checkpoint.read(
            path: dir.path + "/" + Checkpoint.fileName(number), number: number, fileSystem: PosixFileSystem())
        return (stream.count, loaded)
    }

    /// The entries a walk visits, in order: each one's primary key and key bytes.
    static func entries(_ walk: ((UnsafeRawBufferPointer, UInt64) -> Bool) -> Void) -> [(UInt64, [UInt8])] {
        var out: [(UInt64, [UInt8])] = []
        walk { bytes, pk in
            out.append((pk, Array(bytes)))
            return true
        }
        return out
    }
}

extension DeferredIndexTests {
    /// A walk of a whole index read in place (a fetch of every object in the index's order)
    /// decompresses the checkpoint's chunks one after another and keeps none of them: the
    /// memory of the reads is not the section's (52 MB for ten million dates, held until the
    /// build, before). What it visits is the index, entry for entry. A count read in place
    /// afterwards is still right, and keeps the one chunk it read, for the reads after it.
    @Test func aWalkOfAWholeIndexKeepsNoneOfItsChunks() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        var state = IndexState()
        _ = state.primary.set(key(1, 0), Location(segment: 1, frameOffset: 32, blockOffset: 0).packed)
        var random = SeededGenerator(seed: 0xC4A1_2C5)
        var index = OrderedIndex()
        for i in UInt64(0)..<400_000 {
            _ = IndexKey(index: 2, orderedInt64: Int64(bitPattern: random.next())).bytes.withUnsafeBytes {
                index.insert($0, key(1, i))
            }
        }
        state.indexes[2] = index
        let (size, loaded) = try Self.writtenAndRead(state, number: 3, in: dir)
        #expect(size > 4 * Checkpoint.chunkSize)
        guard case .encoded(let encoded)? = try loaded.state.secondary.reader(2) else {
            Issue.record("the first read should decode in place")
            return
        }
        let expected = Self.entries { index.forEach(from: nil, to: nil, $0) }
        let walked = Self.entries { encoded.forEach(from: nil, to: nil, $0) }
        #expect(walked.count == 400_000)
        #expect(walked.elementsEqual(expected) { $0.0 == $1.0 && $0.1 == $1.1 })
        // The seek points (about 3,100 of them, 100 KB), no chunk.
        let held = try #require(loaded.state.secondary.unbuiltSummary()).bytes
        #expect(held < 1 << 20)
        let middle = IndexBound(expected[200_000].1, inclusive: true)
        #expect(encoded.count(from: middle, to: nil) == index.count(from: middle, to: nil))
        let afterCount = try #require(loaded.state.secondary.unbuiltSummary()).bytes
        #expect(afterCount > held && afterCount <= held + Checkpoint.chunkSize)
        #expect(!loaded.state.secondary.isBuilt)
    }
}

extension DeferredIndexTests {
    /// Before the deferred build finishes, reads decode the checkpoint's entries in place
    /// (`EncodedIndex`): counts, visits and primary keys between random bounds, forwards and
    /// reversed, with and without a limit, must be exactly the built index's — whether the
    /// stream is read as one chunk or as many (`EncodedChunks`): chunks smaller than an entry
    /// can be (entries then straddle several), and larger ones.
    @Test(arguments: [Int.max, 97, 1_500, 64 << 10])
    func readsBeforeTheBuildAnswerWhatTheBuiltIndexAnswers(chunkSize: Int) throws {
        var generator = SeededGenerator(seed: 0xE1C0_DED)
        var source = OrderedIndex()
        func randomKey() -> [UInt8] {
            (0..<Int(generator.next() % 11)).map { _ in UInt8(generator.next() % 5) }
        }
        // Four restart intervals and a part, many equal keys (primary keys order them).
        let n = 4 * Checkpoint.restartInterval + 1_234
        for i in UInt64(0)..<UInt64(n) {
            randomKey().withUnsafeBytes { _ = source.insert($0, key(1, i)) }
        }
        var state = IndexState()
        state.indexes[7] = source
        state.indexes[8] = OrderedIndex()
        let stream = Checkpoint.encode(state, segment: 1, offset: 32)
        let deferred = try Checkpoint.decode(stream, chunks: EncodedChunks(stream, chunkSize: chunkSize)) { _ in
            stream
        }.state
        guard case .encoded(let encoded)? = try deferred.secondary.reader(7) else {
            Issue.record("the first read should decode in place")
            return
        }
        guard case .encoded(let empty)? = try deferred.secondary.reader(8) else {
            Issue.record("an empty index is read in place too")
            return
        }
        #expect(try deferred.secondary.reader(9).map { _ in true } == nil)
        #expect(empty.count(from: nil, to: nil) == 0 && empty.primaryKeys(from: nil, to: nil).isEmpty)
        #expect(encoded.count(from: nil, to: nil) == n)
        func bound() -> IndexBound? {
            generator.next() % 6 == 0 ? nil : IndexBound(randomKey(), inclusive: generator.next() % 2 == 0)
        }
        func visit(_ body: ((UnsafeRawBufferPointer, UInt64) -> Bool) -> Void) -> [(UInt64, [UInt8])] {
            var out: [(UInt64, [UInt8])] = []
            body { bytes, pk in
                out.append((pk, Array(bytes)))
                return out.count < 3_000
            }
            return out
        }
        for _ in 0..<200 {
            let (lower, upper) = (bound(), bound())
            let reverse = generator.next() % 2 == 0
            let limit: Int? = generator.next() % 3 == 0 ? Int(generator.next() % 50) : nil
            #expect(encoded.count(from: lower, to: upper) == source.count(from: lower, to: upper))
            #expect(
                encoded.primaryKeys(from: lower, to: upper, reverse: reverse, limit: limit)
                    == source.primaryKeys(from: lower, to: upper, reverse: reverse, limit: limit))
            let a = visit { encoded.forEach(from: lower, to: upper, reverse: reverse, $0) }
            let b = visit { source.forEach(from: lower, to: upper, reverse: reverse, $0) }
            #expect(a.elementsEqual(b) { $0.0 == $1.0 && $0.1 == $1.1 })
        }
        // The reads started the build on another thread (or this waits and makes it): it gives
        // the same index.
        deferred.secondary.waitUntilBuilt()
        #expect(deferred.secondary.isBuilt)
        #expect(deferred.indexes[7]!.primaryKeys(from: nil, to: nil) == source.primaryKeys(from: nil, to: nil))
    }
}

/// `Snapshot.keys(inKeyspace:from:limit:)`, which collects a few thousand keys a walk: every
/// key of the keyspace in order, from where it is asked to start, up to its limit, none of
/// the keyspaces beside it.
@Suite struct SnapshotKeysTests {
    @Test func keysOfAKeyspaceAcrossManyWalks() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let store = try Store.open(at: dir.store(), options: quietOptions(.none))
        // Sparse ids (gaps inside and between leaves) in keyspace 2, neighbours in 1 and 3,
        // and the last id a keyspace can hold.
        let ids = (UInt64(0)..<12_000).filter { $0 % 7 != 3 }.map { $0 * 3 } + [EngineKey.maxID]
        var t = Transaction()
        for id in ids { t.put(key(2, id), value: [1]) }
        for id in UInt64(0)..<100 {
            t.put(key(1, id), value: [1])
            t.put(key(3, id), value: [1])
        }
        try store.commit(t)
        let s = store.snapshot()
        let all = ids.map { key(2, $0) }
        #expect(s.keys(inKeyspace: 2) == all)
        #expect(s.keys(inKeyspace: 2, limit: 5_000) == Array(all.prefix(5_000)))
        #expect(s.keys(inKeyspace: 2, limit: 0).isEmpty)
        let from = key(2, 9_001)
        #expect(s.keys(inKeyspace: 2, from: from) == all.filter { $0 >= from })
        #expect(s.keys(inKeyspace: 2, from: from, limit: 4_097) == Array(all.filter { $0 >= from }.prefix(4_097)))
        #expect(s.keys(inKeyspace: 2, from: key(2, EngineKey.maxID)) == [key(2, EngineKey.maxID)])
        #expect(s.keys(inKeyspace: 4).isEmpty)
        #expect(s.keys(inKeyspace: 1).count == 100)
        try store.close()
    }
}
