import LogbookTestSupport
import Testing

@testable import LogbookEngine

/// A commit applies its set operations in key order (a stable radix sort), additions to
/// neighbouring sets through one descent a leaf (`RadixMap.modifyAdding`). Whatever order a
/// transaction lists them in, a set's operations keep theirs, and the sets read as the
/// operations say: after the commit, after a replay of the journal and after a checkpoint.
@Suite struct SetOrderTests {
    @Test func aStableSortByKeyMatchesTheStandardLibrarys() {
        var random = SeededGenerator(seed: 5)
        for n in [0, 1, 2, 63, 64, 65, 1_000, 20_000] {
            // Keys that differ in a few bytes (several keyspaces, ids in ranges), repeats among them.
            let keys: [UInt64] = (0..<n).map { _ in
                let keyspace = random.next() % 3
                let id = random.next() % UInt64(max(1, n / 2)) << (random.next() % 2 == 0 ? 0 : 20)
                return keyspace << 48 | id
            }
            let items = Array(0..<n)
            let expected = items.sorted { keys[$0] != keys[$1] ? keys[$0] < keys[$1] : $0 < $1 }
            #expect(KeySort.stable(items, key: { keys[$0] }) == expected, "n = \(n)")
            // Already in order: handed back as they are.
            #expect(KeySort.stable(expected, key: { keys[$0] }) == expected)
        }
    }

    @Test(arguments: [UInt64(1), 2, 3])
    func setOperationsInAnyOrderReadAsTheySay(seed: UInt64) throws {
        let fs = FaultFileSystem()
        var random = SeededGenerator(seed: seed)
        var expected: [UInt64: Set<UInt64>] = [:]
        let store = try Store.open(at: "/store", options: quietOptions(.none), fileSystem: fs)
        for _ in 0..<12 {
            var t = Transaction()
            // Sets of two keyspaces, owners spread over several leaves (64 keys a leaf), each
            // touched several times in one transaction, in no order.
            for _ in 0..<600 {
                let set = key(UInt16(20 + random.next() % 2), 1 + random.next() % 400)
                let members = Set((0..<(1 + random.next() % 4)).map { _ in key(1, 1 + random.next() % 50) })
                switch random.next() % 10 {
                case 0...5:
                    t.addMembers(members, toSet: set)
                    expected[set, default: []].formUnion(members)
                case 6, 7:
                    t.removeMembers(members, fromSet: set)
                    expected[set]?.subtract(members)
                case 8:
                    t.replaceMembers(members, ofSet: set)
                    expected[set] = members
                default:
                    t.replaceMembers(EmptyCollection(), ofSet: set)
                    expected[set] = nil
                }
                if expected[set]?.isEmpty == true { expected[set] = nil }
            }
            try store.commit(t)
            try check(store.snapshot(), expected)
        }
        try store.close()
        // A checkpoint (written at the close) and a replay of the journal without it.
        let reopened = try Store.open(at: "/store", options: quietOptions(.none), fileSystem: fs)
        try check(reopened.snapshot(), expected)
        try reopened.close()
        for name in try fs.listDirectory("/store") where name.hasPrefix(JournalFormat.checkpointPrefix) {
            try fs.removeFile("/store/" + name)
        }
        let replayed = try Store.open(at: "/store", options: quietOptions(.none), fileSystem: fs)
        try check(replayed.snapshot(), expected)
        try replayed.close()
    }

    func check(_ snapshot: Snapshot, _ expected: [UInt64: Set<UInt64>]) throws {
        for keyspace: UInt16 in [20, 21] {
            for id in UInt64(1)...400 {
                let set = key(keyspace, id)
                #expect(Set(snapshot.members(ofSet: set)) == expected[set] ?? [], "set \(keyspace):\(id)")
                #expect(snapshot.memberCount(ofSet: set) == expected[set]?.count ?? 0)
            }
        }
    }
}
