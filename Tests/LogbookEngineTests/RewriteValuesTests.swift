import LogbookTestSupport
import Testing

@testable import LogbookEngine

/// `Snapshot.rewriteValues` writes new values that keep their stored index entries, and the
/// commit leaves the indexes alone for them. The oracle is the store itself reopened: a replay
/// applies every put the general way (its replaced version read, its entries removed and
/// inserted), so the indexes, values and byte counts after the commit must be what a reopen
/// builds from the journal.
@Suite struct RewriteValuesTests {
    /// Everything a rewrite could get wrong: every value, every entry of the indexes, the byte
    /// counts the compaction policy reads.
    struct State: Equatable, CustomStringConvertible {
        var values: [UInt64: String]
        var entries: [IndexID: [String]]
        var liveBytes: Int
        var totalBytes: Int
        var description: String { "\(values.count) values, entries \(entries.mapValues(\.count)), live \(liveBytes)" }
    }

    static let indexes: [IndexID] = [1, 2]

    func state(_ store: Store) throws -> State {
        let snapshot = store.snapshot()
        var entries: [IndexID: [String]] = [:]
        for index in Self.indexes {
            var list: [String] = []
            try snapshot.forEachIndexEntry(index: index) { bytes, key in
                list.append("\(String(decoding: bytes, as: UTF8.self))→\(EngineKey(rawValue: key).id)")
                return true
            }
            entries[index] = list
        }
        let statistics = store.statistics()
        return State(
            values: try contents(snapshot), entries: entries, liveBytes: statistics.liveBytes,
            totalBytes: statistics.totalBytes)
    }

    /// Key `i` of keyspace 1: a value, an entry in index 1 (its group) and one in index 2 for
    /// even keys.
    func put(_ i: UInt64, value: String, group: String, into t: inout Transaction) {
        var entries = [IndexKey(index: 1, bytes: bytes(group))]
        if i % 2 == 0 { entries.append(IndexKey(index: 2, bytes: bytes("even \(i % 10)"))) }
        t.put(key(1, i), value: bytes(value), indexKeys: entries)
    }

    func populate(_ store: Store, count: UInt64, padding: Int = 0) throws {
        var t = Transaction()
        let pad = String(repeating: "p", count: padding)
        for i in 1...count { put(i, value: "v\(i)\(pad)", group: "g\(i % 7)", into: &t) }
        try store.commit(t)
    }

    /// A store of `count` keys (`populate`) in a directory of its own, removed after `body`.
    func withPopulatedStore(
        count: UInt64, padding: Int = 0, _ body: (inout Store, TemporaryDirectory) throws -> Void
    ) throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        var store = try Store.open(at: dir.store(), options: quietOptions(.none))
        try populate(store, count: count, padding: padding)
        try body(&store, dir)
    }

    /// Appends "!" to every value it is given.
    static let exclaim: @Sendable (Int, UInt64, UnsafeRawBufferPointer, UnsafeMutableRawBufferPointer) throws -> Int = {
        _, _, value, out in
        out.copyMemory(from: value)
        out[value.count] = UInt8(ascii: "!")
        return value.count + 1
    }

    func allKeys(_ count: UInt64) -> [UInt64] { (1...count).map { key(1, $0) } }

    /// Checks the store against the oracle (a reopen) and returns its state.
    @discardableResult
    func checkAgainstReplay(_ store: inout Store, _ dir: TemporaryDirectory) throws -> State {
        let live = try state(store)
        try store.close()
        store = try Store.open(at: dir.store(), options: quietOptions(.none))
        let replayed = try state(store)
        #expect(live == replayed)
        return live
    }

    @Test(arguments: [UInt64(1_000), 150_000])
    func rewrittenValuesKeepTheirEntriesAndMatchAReplay(count: UInt64) throws {
        // 150,000 keys: two workers, and a transaction of more blocks than one part of the apply.
        try withPopulatedStore(count: count, padding: count > 1_000 ? 40 : 0) { store, dir in
            let before = try state(store)
            var t = Transaction()
            let written = try store.snapshot().rewriteValues(forKeys: allKeys(count), growth: 1, into: &t, Self.exclaim)
            #expect(written == Int(count))
            if count > 1_000 { #expect(t.commitBlocks().count > Store.applyPartBlocks) }
            try store.commit(t)
            let after = try checkAgainstReplay(&store, dir)
            #expect(after.entries == before.entries)
            #expect(after.values.count == Int(count))
            for (id, value) in after.values { #expect(value == before.values[id]! + "!") }
            // One byte more a value, plus the varint of a length that grew past 127 for none.
            #expect(after.liveBytes == before.liveBytes + Int(count))
            try store.close()
        }
    }

    /// Two workers on few keys (the thread sanitizer runs this one), one of them failing in
    /// the second case: the values are rewritten as on one thread, or the error is thrown and
    /// nothing is written.
    @Test func twoWorkersOnFewKeys() throws {
        try withPopulatedStore(count: 2_000) { store, dir in
            let before = try state(store)
            var t = Transaction()
            let written = try store.snapshot().rewriteValues(
                forKeys: allKeys(2_000), growth: 1, into: &t, parallelFrom: 100, Self.exclaim)
            #expect(written == 2_000 && t.operationCount == 2_000)
            try store.commit(t)
            let after = try checkAgainstReplay(&store, dir)
            #expect(after.entries == before.entries)
            for (id, value) in after.values { #expect(value == before.values[id]! + "!") }

            struct Refused: Error {}
            var failing = Transaction()
            let lastKey = key(1, 2_000)
            #expect(throws: Refused.self) {
                try store.snapshot().rewriteValues(
                    forKeys: allKeys(2_000), growth: 1, into: &failing, parallelFrom: 100
                ) { i, key, value, out in
                    if key == lastKey { throw Refused() }
                    return try Self.exclaim(i, key, value, out)
                }
            }
            #expect(try state(store) == after)
            try store.close()
        }
    }

    /// A rewrite on two workers whose transaction is more than one part of the commit's apply
    /// (which then prepares each next part on another thread while it applies one; the
    /// thread sanitizer runs this one): the values are rewritten, the entries kept, the store
    /// what a replay gives.
    @Test func aRewriteOfMoreThanOnePartOfTheApply() throws {
        try withPopulatedStore(count: 25_000, padding: 40) { store, dir in
            let before = try state(store)
            var t = Transaction()
            let written = try store.snapshot().rewriteValues(
                forKeys: allKeys(25_000), growth: 1, into: &t, parallelFrom: 100, Self.exclaim)
            #expect(written == 25_000)
            #expect(t.commitBlocks().count > Store.applyPartBlocks)
            try store.commit(t)
            let after = try checkAgainstReplay(&store, dir)
            #expect(after.entries == before.entries)
            for (id, value) in after.values { #expect(value == before.values[id]! + "!") }
            #expect(after.liveBytes == before.liveBytes + 25_000)
            try store.close()
        }
    }

    /// The workers' parts joined after operations the transaction already holds (the first
    /// part is then appended, not taken whole): every put lands, the rewritten keys keep
    /// their entries, the earlier put of a rewritten key is replaced by the rewrite, and the
    /// store is what a replay gives.
    @Test func twoWorkersAfterOperationsAlreadyInTheTransaction() throws {
        try withPopulatedStore(count: 2_000) { store, dir in
            let before = try state(store)
            let snapshot = store.snapshot()
            var t = Transaction()
            put(5_000, value: "new", group: "g9", into: &t)
            put(3, value: "overwritten", group: "g3", into: &t)
            let written = try snapshot.rewriteValues(
                forKeys: allKeys(2_000), growth: 1, into: &t, parallelFrom: 100, Self.exclaim)
            #expect(written == 2_000 && t.operationCount == 2_002)
            try store.commit(t)
            let after = try checkAgainstReplay(&store, dir)
            #expect(after.values.count == 2_001)
            #expect(after.values[5_000] == "new")
            for id in UInt64(1)...2_000 { #expect(after.values[id] == before.values[id]! + "!") }
            #expect(after.entries[1]!.contains("g9→5000"))
            #expect(after.entries[1]!.count == before.entries[1]!.count + 1)
            // Key 5,000 is even: index 2 gains its entry, and only that.
            #expect(after.entries[2]!.filter { $0 != "even 0→5000" } == before.entries[2]!)
            #expect(after.entries[2]!.count == before.entries[2]!.count + 1)
        }
    }

    /// Another commit between the snapshot and the rewrite's commit: a key given another
    /// entry, a key deleted, a key added. The rewrite's puts are applied as puts with the
    /// entries they copied.
    @Test func keysWrittenInBetweenAreAppliedAsPuts() throws {
        try withPopulatedStore(count: 20) { store, dir in
            let snapshot = store.snapshot()
            var between = Transaction()
            put(4, value: "moved", group: "elsewhere", into: &between)
            between.delete(key(1, 7))
            put(30, value: "new", group: "g2", into: &between)
            try store.commit(between)

            var t = Transaction()
            #expect(try snapshot.rewriteValues(forKeys: allKeys(20), growth: 1, into: &t, Self.exclaim) == 20)
            try store.commit(t)
            let after = try checkAgainstReplay(&store, dir)
            #expect(after.values[4] == "v4!" && after.values[7] == "v7!" && after.values[30] == "new")
            let groups = after.entries[1]!
            #expect(groups.contains("g4→4") && !groups.contains("elsewhere→4"))
            #expect(groups.contains("g0→7"))
            #expect(after.entries[2]!.contains("even 4→4"))
            try store.close()
        }
    }

    /// In one transaction with other puts of the same keys: a put before a rewrite of its key,
    /// and a put after one.
    @Test func putsOfTheSameKeysInTheSameTransaction() throws {
        try withPopulatedStore(count: 10) { store, dir in
            var t = Transaction()
            put(3, value: "first", group: "before", into: &t)
            try store.snapshot().rewriteValues(forKeys: allKeys(10), growth: 1, into: &t, Self.exclaim)
            put(5, value: "last", group: "after", into: &t)
            try store.commit(t)
            let after = try checkAgainstReplay(&store, dir)
            #expect(after.values[3] == "v3!" && after.values[5] == "last")
            let groups = after.entries[1]!
            #expect(groups.contains("g3→3") && !groups.contains("before→3"))
            #expect(groups.contains("after→5") && !groups.contains("g5→5"))
            try store.close()
        }
    }

    /// A transform that returns nil leaves its key as it is: nothing is written for it (its
    /// stored version stays live, no byte of it becomes dead), the keys around it are
    /// rewritten, and the count returned is of every key that has a value. On one thread and
    /// on two (150,000 keys); a rewrite that leaves every key writes nothing at all.
    @Test(arguments: [UInt64(1_000), 150_000])
    func keysTheTransformLeavesAreNotWritten(count: UInt64) throws {
        try withPopulatedStore(count: count) { store, dir in
            let before = try state(store)
            let version = store.version
            var t = Transaction()
            let found = try store.snapshot().rewriteValues(forKeys: allKeys(count), growth: 1, into: &t) {
                i, key, value, out in
                EngineKey(rawValue: key).id % 3 == 0 ? nil : try Self.exclaim(i, key, value, out)
            }
            let left = Int(count / 3)
            #expect(found == Int(count))
            #expect(t.operationCount == Int(count) - left)
            try store.commit(t)
            #expect(store.version == version + 1)
            let after = try checkAgainstReplay(&store, dir)
            #expect(after.entries == before.entries)
            for (id, value) in after.values {
                #expect(value == before.values[id]! + (id % 3 == 0 ? "" : "!"), "key \(id)")
            }
            #expect(after.liveBytes == before.liveBytes + Int(count) - left)

            // Nothing to write: no version, not a byte.
            var none = Transaction()
            let all = try store.snapshot().rewriteValues(forKeys: allKeys(count), growth: 0, into: &none) {
                _, _, _, _ in
                nil
            }
            #expect(all == Int(count) && none.operationCount == 0)
            let bytes = store.statistics().totalBytes
            try store.commit(none)
            #expect(store.version == version + 1)
            #expect(store.statistics().totalBytes == bytes)
            #expect(try checkAgainstReplay(&store, dir) == after)
            try store.close()
        }
    }

    /// Keys without a value are skipped; a transform that throws stops the rewrite with its error.
    @Test func missingKeysAndErrors() throws {
        try withPopulatedStore(count: 5) { store, _ in
            var t = Transaction()
            let keys = [key(1, 2), key(1, 99), key(1, 4)]
            #expect(try store.snapshot().rewriteValues(forKeys: keys, growth: 1, into: &t, Self.exclaim) == 2)
            #expect(t.operationCount == 2)
            struct Refused: Error {}
            var failing = Transaction()
            #expect(throws: Refused.self) {
                try store.snapshot().rewriteValues(forKeys: allKeys(5), growth: 0, into: &failing) { _, _, _, _ in
                    throw Refused()
                }
            }
            try store.close()
        }
    }

    /// Joining transactions (the rewrite's workers) gives the operations of both, in order,
    /// whatever each one's size: the same store as one transaction built in that order.
    @Test(arguments: [(UInt64(3), UInt64(3)), (3, 40_000), (40_000, 3), (40_000, 60_000)])
    func joinedTransactionsCommitAsOne(first: UInt64, second: UInt64) throws {
        func build(_ range: ClosedRange<UInt64>, into t: inout Transaction) {
            for i in range {
                put(
                    i % 50_000 + 1, value: "value \(i) " + String(repeating: "x", count: 30), group: "g\(i % 5)",
                    into: &t)
            }
        }
        let joinedDir = TemporaryDirectory()
        let singleDir = TemporaryDirectory()
        defer {
            joinedDir.cleanUp()
            singleDir.cleanUp()
        }
        var a = Transaction()
        var b = Transaction()
        build(1...first, into: &a)
        build((first + 1)...(first + second), into: &b)
        a.append(b)
        var one = Transaction()
        build(1...(first + second), into: &one)
        #expect(a.operationCount == one.operationCount)
        let joined = try Store.open(at: joinedDir.store(), options: quietOptions(.none))
        let single = try Store.open(at: singleDir.store(), options: quietOptions(.none))
        try joined.commit(a)
        try single.commit(one)
        var joinedState = try state(joined)
        let singleState = try state(single)
        #expect(joinedState.values == singleState.values)
        #expect(joinedState.entries == singleState.entries)
        #expect(joinedState.liveBytes == singleState.liveBytes)
        try joined.close()
        try single.close()
        // And the joined one reads back the same from its journal.
        let reopened = try Store.open(at: joinedDir.store(), options: quietOptions(.none))
        joinedState = try state(reopened)
        #expect(joinedState == singleState)
        try reopened.close()
    }
}
