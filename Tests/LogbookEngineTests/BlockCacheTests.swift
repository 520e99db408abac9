import LogbookTestSupport
import Testing

@testable import LogbookEngine

/// The shared block cache keeps the blocks of small reads; a read of many keys reads each
/// block once and leaves the cache as it was, so that one large fetch does not push out the
/// blocks every other read uses.
@Suite struct BlockCacheTests {
    static let count = 20_000

    /// The value of key `id`: about a hundred bytes, different for each key.
    func value(_ id: UInt64) -> [UInt8] { bytes("value \(id) " + String(repeating: "abcdefghij", count: 9)) }

    /// A store of `count` keys in 20 commits, opened again (its cache empty) with a cache of
    /// `cacheSize` bytes: much less than the records.
    func reopenedStore(_ dir: TemporaryDirectory, cacheSize: Int) throws -> Store {
        let first = try Store.open(at: dir.store(), options: quietOptions(.none))
        for commit in 0..<20 {
            var t = Transaction()
            for j in 0..<(Self.count / 20) {
                let id = UInt64(commit * Self.count / 20 + j + 1)
                t.put(key(1, id), value: value(id))
            }
            try first.commit(t)
        }
        try first.close()
        var options = quietOptions(.none)
        options.cacheSize = cacheSize
        return try Store.open(at: dir.store(), options: options)
    }

    /// Reads `ids` with `forEachValue` and checks every value.
    func read(_ snapshot: Snapshot, _ ids: [UInt64], caching: Bool? = nil) throws {
        var seen = 0
        try snapshot.forEachValue(forKeys: ids.map { key(1, $0) }, caching: caching) { i, k, raw in
            #expect(k == key(1, ids[i]) && raw.elementsEqual(value(ids[i])))
            seen += 1
        }
        #expect(seen == ids.count)
    }

    @Test func aReadOfManyKeysLeavesTheCacheAsItWas() throws {
        let dir = TemporaryDirectory()
        defer { dir.cleanUp() }
        let store = try reopenedStore(dir, cacheSize: 256 << 10)
        let snapshot = store.snapshot()
        #expect(store.statistics().blockCacheBytes == 0)
        // A few keys far apart: their blocks are kept.
        try read(snapshot, [1, 5_000, 10_000, 19_999])
        let small = store.statistics().blockCacheBytes
        #expect(small > 0)
        // Every key at once (more than `cachedReadLimit`): read right, nothing kept or pushed out.
        let all = (1...UInt64(Self.count)).map { $0 }
        #expect(all.count > Snapshot.cachedReadLimit)
        try read(snapshot, all)
        #expect(store.statistics().blockCacheBytes == small)
        // Asked to cache, the same read fills the cache up to its size (evicting the first
        // blocks), and reads the same.
        try read(snapshot, all, caching: true)
        let filled = store.statistics().blockCacheBytes
        #expect(filled > small && filled <= 256 << 10)
        // A read told not to cache keeps nothing, however small.
        try store.close()
        let again = try Store.open(at: dir.store(), options: quietOptions(.none))
        try read(again.snapshot(), [7], caching: false)
        #expect(again.statistics().blockCacheBytes == 0)
        try again.close()
    }
}
