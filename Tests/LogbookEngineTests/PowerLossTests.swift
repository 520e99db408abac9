import LogbookTestSupport
import Testing

@testable import LogbookEngine

/// Power loss as real disks have it: the pages written since the last sync reach the disk in
/// any subset (ext4's delayed allocation, XFS, a drive's volatile cache), not file by file.
/// Every acknowledged commit survives, nothing partial is visible, and every store opens.
@Suite struct PowerLossTests {
    static let directory = "/store"
    static let segment = "/store/" + JournalFormat.segmentPrefix + "000000000001" + JournalFormat.segmentSuffix

    /// `count` incompressible bytes (LZ4 cannot shrink them, so a transaction of them spans
    /// many pages of the segment).
    func noise(_ seed: UInt64, _ count: Int) -> [UInt8] {
        var random = SeededGenerator(seed: seed)
        return (0..<count).map { _ in UInt8.random(in: 0...255, using: &random) }
    }

    /// A transaction that spans several frames and pages; its commit record lands on a page
    /// that can reach the disk while an earlier page of the same transaction does not. Before
    /// format version 2 the open took the damage for corruption before the last commit and
    /// refused to open.
    @Test func aTornMultiFrameTransactionIsCutNotTakenForCorruption() throws {
        let fs = FaultFileSystem()
        var options = quietOptions(.full)
        options.segmentSize = 64 << 20
        let store = try Store.open(at: Self.directory, options: options, fileSystem: fs)
        for i in 0..<3 {
            var t = Transaction()
            t.put(key(1, UInt64(i)), value: bytes("acknowledged \(i)"))
            try store.commit(t)
        }
        let start = fs.contents(Self.segment)!.count
        var torn = Transaction()
        for i in 0..<40 { torn.put(key(2, UInt64(i)), value: noise(UInt64(i), 8 << 10)) }
        // The write goes through; the sync that follows is where the power fails.
        fs.inject(.crash, atStep: fs.steps + 2)
        #expect(throws: EngineError.self) { try store.commit(torn) }
        let end = fs.contents(Self.segment)!.count
        #expect(end - start > 300 << 10, "the transaction spans many pages")
        // Every page of the transaction reached the disk but its first one.
        fs.powerLoss(
            pageSize: 4096, keepsNewLength: { _ in true },
            keepsNewPage: { path, page in !(path == Self.segment && page == start / 4096) })
        let reopened = try Store.open(at: Self.directory, options: options, fileSystem: fs)
        let snapshot = reopened.snapshot()
        #expect(try contents(snapshot) == [0: "acknowledged 0", 1: "acknowledged 1", 2: "acknowledged 2"])
        #expect(snapshot.count(inKeyspace: 2) == 0, "nothing of the torn transaction is visible")
        #expect(reopened.recoveryReport.truncatedBytes == end - start, "\(reopened.recoveryReport)")
        // And the store takes writes where the torn transaction was.
        var after = Transaction()
        after.put(key(1, 9), value: bytes("after"))
        try reopened.commit(after)
        try reopened.close()
        let again = try Store.open(at: Self.directory, options: options, fileSystem: fs)
        #expect(try contents(again.snapshot())[9] == "after")
        try again.close()
    }

    /// Damage to bytes that a later commit's record proves were synced is corruption, not a
    /// torn tail: the open refuses, naming the file and offset, and `salvage` reads up to it.
    @Test func damageBeforeASyncedPointIsStillCorruption() throws {
        let fs = FaultFileSystem()
        let options = quietOptions(.full)
        let store = try Store.open(at: Self.directory, options: options, fileSystem: fs)
        var offsets: [Int] = []
        for i in 0..<4 {
            offsets.append(fs.contents(Self.segment)!.count)
            var t = Transaction()
            t.put(key(1, UInt64(i)), value: bytes("acknowledged \(i) " + String(repeating: "x", count: 100)))
            try store.commit(t)
        }
        try store.close()
        var damaged = fs.contents(Self.segment)!
        damaged[offsets[1] + 20] ^= 0xFF
        fs.setContents(Self.segment, damaged)
        #expect {
            try Store.open(at: Self.directory, options: options, fileSystem: fs)
        } throws: { error in
            (error as? EngineError)?.code == .corruption && (error as? EngineError)?.offset == offsets[1]
        }
        var salvage = options
        salvage.salvage = true
        let salvaged = try Store.open(at: Self.directory, options: salvage, fileSystem: fs)
        #expect(try contents(salvaged.snapshot()) == [0: "acknowledged 0 " + String(repeating: "x", count: 100)])
    }

    /// What the workload's acknowledged commits wrote, and what the commit in flight when it
    /// stopped would have written on top (it may or may not survive; nothing of it in part).
    struct Outcome {
        var acknowledged: [UInt64: String] = [:]
        var inFlight: [UInt64: String]?
        var error: (any Error)?
    }

    /// Commits of several pages each (some rolling a segment over), a checkpoint, updates and
    /// deletes, a compaction, more commits and a checkpoint.
    func workload(_ fs: FaultFileSystem, durability: Durability) -> Outcome {
        var outcome = Outcome()
        var options = quietOptions(durability)
        options.segmentSize = 48 << 10
        options.allowsTinySegments = true
        do {
            let store = try Store.open(at: Self.directory, options: options, fileSystem: fs)
            func commit(_ body: (inout Transaction, inout [UInt64: String]) -> Void) throws {
                var t = Transaction()
                var next = outcome.acknowledged
                body(&t, &next)
                outcome.inFlight = next
                try store.commit(t)
                outcome.acknowledged = next
                outcome.inFlight = nil
            }
            // Letters that LZ4 cannot shrink much, so that transactions span pages.
            func value(_ k: UInt64, _ round: Int) -> String {
                var random = SeededGenerator(seed: k &* 1000 &+ UInt64(round))
                let letters = (0..<(120 + Int(k % 7) * 40)).map { _ in
                    Character(UnicodeScalar(UInt8.random(in: 97...122, using: &random)))
                }
                return "\(round):\(k):" + String(letters)
            }
            for round in 0..<10 {
                try commit { t, m in
                    for j in 0..<24 {
                        let k = UInt64(round * 24 + j)
                        t.put(
                            key(1, k), value: bytes(value(k, round)),
                            indexKeys: [IndexKey(index: 1, orderedUInt64: k % 9)])
                        m[k] = value(k, round)
                    }
                }
                if round == 4 { try store.checkpoint() }
            }
            for round in 10..<14 {
                try commit { t, m in
                    for k in UInt64(0)..<60 where k % 4 == UInt64(round % 4) {
                        t.put(key(1, k), value: bytes(value(k, round)))
                        m[k] = value(k, round)
                    }
                    t.delete(key(1, UInt64(100 + round)))
                    m[UInt64(100 + round)] = nil
                }
            }
            try store.compact()
            for round in 14..<17 {
                try commit { t, m in
                    t.put(key(1, UInt64(1000 + round)), value: bytes(value(UInt64(round), round)))
                    m[UInt64(1000 + round)] = value(UInt64(round), round)
                }
            }
            try store.checkpoint()
            try store.close()
        } catch {
            outcome.error = error
        }
        return outcome
    }

    /// Power loss at every I/O step of the workload, each with several random subsets of the
    /// unsynced pages surviving (512-byte sectors and 4 KiB pages).
    /// With space allocated ahead of commits (the third case), the commits go into zeros
    /// that may or may not have reached the disk, and a power loss leaves zeros after the last
    /// commit, or a length that falls back to before them.
    @Test(arguments: [(512, UInt64(1), false), (4096, UInt64(2), false), (4096, UInt64(3), true)])
    func powerLossAtEveryStepWithAnySubsetOfPagesKeepsEveryAcknowledgedCommit(
        pageSize: Int, seed: UInt64, preallocates: Bool
    ) throws {
        let clean = FaultFileSystem(preallocates: preallocates)
        let full = workload(clean, durability: .full)
        #expect(full.error == nil)
        let steps = clean.steps
        #expect(steps > 100, "the workload has \(steps) I/O steps")
        var random = SeededGenerator(seed: seed)
        for step in 1...steps {
            for subset in 0..<3 {
                let fs = FaultFileSystem(preallocates: preallocates)
                fs.inject(.crash, atStep: step)
                let outcome = workload(fs, durability: .full)
                fs.powerLoss(pageSize: pageSize, random: &random)
                let place =
                    "power loss at step \(step) (\(fs.stepNames.last ?? "")), subset \(subset), pages of \(pageSize)"
                let store: Store
                do {
                    store = try Store.open(at: Self.directory, options: quietOptions(.full), fileSystem: fs)
                } catch {
                    Issue.record("the store does not open after a \(place): \(error)")
                    continue
                }
                let found = try contents(store.snapshot())
                #expect(
                    found == outcome.acknowledged || (outcome.inFlight != nil && found == outcome.inFlight!),
                    "after a \(place): every acknowledged commit, and the one in flight whole or not at all")
                var t = Transaction()
                t.put(key(3, 1), value: bytes("after recovery"))
                try store.commit(t)
                try store.close()
            }
        }
    }
}
