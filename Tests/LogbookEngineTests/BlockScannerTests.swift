import LogbookTestSupport
import Testing

@testable import LogbookEngine

/// Scans and batch reads take their blocks through a `BlockScanner`: frames read ahead into a
/// window, blocks decoded into buffers kept between scans. What they read must be what a read
/// of one key reads, whatever the frames' sizes, order and damage.
@Suite struct BlockScannerTests {
    static let directory = "/store"
    static let segment = "/store/" + JournalFormat.segmentPrefix + "000000000001" + JournalFormat.segmentSuffix

    /// Bytes that LZ4 cannot shrink, so that a value makes a frame of about its own size.
    func noise(_ count: Int, seed: UInt64) -> [UInt8] {
        var generator = SeededGenerator(seed: seed)
        var words = (0..<(count + 7) / 8).map { _ in generator.next() }
        return words.withUnsafeMutableBytes { Array($0.prefix(count)) }
    }

    /// A store whose frames range from a few bytes to more than the scan's largest read-ahead,
    /// whose later commits rewrite earlier keys (storage order is then not key order), and the
    /// value each key holds.
    func variedStore(_ fs: FaultFileSystem) throws -> (Store, [UInt64: [UInt8]]) {
        let store = try Store.open(at: Self.directory, options: quietOptions(.none), fileSystem: fs)
        var expected: [UInt64: [UInt8]] = [:]
        var generator = SeededGenerator(seed: 42)
        for commit in 0..<24 {
            var t = Transaction()
            let size: Int
            switch commit % 6 {
            case 0: size = ScanBuffers.maxReadAhead + 40_000  // one frame larger than any read-ahead
            case 1: size = 70_000  // more than one block's target: a frame of its own
            default: size = Int.random(in: 1...3_000, using: &generator)
            }
            for j in 0..<UInt64(commit % 6 < 2 ? 1 : 40) {
                // Early keys are rewritten by later commits.
                let id = commit % 3 == 2 ? UInt64.random(in: 1...200, using: &generator) : UInt64(commit) * 100 + j + 1
                let value = noise(size, seed: UInt64(commit) << 16 | j)
                t.put(key(1, id), value: value)
                expected[id] = value
            }
            try store.commit(t)
        }
        return (store, expected)
    }

    @Test func aScanReadsWhatAReadOfEachKeyReadsWhateverTheFramesSizesAndOrder() throws {
        let fs = FaultFileSystem()
        let (store, expected) = try variedStore(fs)
        for reopen in [false, true] {
            let current = reopen ? try Store.open(at: Self.directory, options: quietOptions(), fileSystem: fs) : store
            let snapshot = current.snapshot()
            var scanned: [UInt64: [UInt8]] = [:]
            var previous: UInt64 = 0
            var ordered = true
            try snapshot.scanValues(inKeyspace: 1, in: snapshot.keyBounds(inKeyspace: 1)!, batchSize: 64) {
                key, value in
                if key < previous { ordered = false }
                previous = key
                scanned[EngineKey(rawValue: key).id] = Array(value)
                return true
            }
            #expect(scanned.count == expected.count)
            #expect(scanned == expected, "reopened: \(reopen)")
            #expect(!ordered, "rewritten keys come in storage order, out of key order (the test covers both)")
            // Keys in an order of their own, with a missing one: each value at its position.
            var generator = SeededGenerator(seed: 7)
            let keys = expected.keys.shuffled(using: &generator).map { key(1, $0) } + [key(1, 999_999)]
            var read = [[UInt8]?](repeating: nil, count: keys.count)
            try snapshot.forEachValue(forKeys: keys) { i, _, value in read[i] = Array(value) }
            for (i, k) in keys.enumerated() {
                #expect(read[i] == expected[EngineKey(rawValue: k).id])
            }
            // A read of one key (its own path) agrees.
            for (id, value) in expected.prefix(20) { #expect(try snapshot.value(forKey: key(1, id)) == value) }
            if reopen { try current.close() }
            if !reopen { try store.close() }
        }
    }

    /// A batch read hands a block's keys over in one visit of the block: keys in storage
    /// order with missing keys and a repeated key among them (in the middle of a block's run)
    /// each get their own value at their own position, in both the ordered and the sorted path.
    @Test func keysOfOneBlockWithMissingAndRepeatedKeysAmongThemEachGetTheirValue() throws {
        let fs = FaultFileSystem()
        let store = try Store.open(at: Self.directory, options: quietOptions(.none), fileSystem: fs)
        defer { try? store.close() }
        var expected: [UInt64: [UInt8]] = [:]
        for commit in 0..<3 {
            var t = Transaction()
            for j in 1...500 {
                let id = UInt64(commit * 1_000 + j)
                let value = Array("value \(id)".utf8)
                t.put(key(1, id), value: value)
                expected[id] = value
            }
            try store.commit(t)
        }
        let snapshot = store.snapshot()
        var ids: [UInt64] = []
        for (n, id) in expected.keys.sorted().enumerated() {
            ids.append(id)
            if n % 7 == 3 { ids.append(900_000 + id) }  // missing, between keys of one block
            if n == 250 { ids.append(id) }  // the same key twice in a row
        }
        var generator = SeededGenerator(seed: 11)
        for keys in [ids, ids.shuffled(using: &generator)].map({ $0.map { key(1, $0) } }) {
            var read = [[UInt8]?](repeating: nil, count: keys.count)
            var visits = 0
            try snapshot.forEachValue(forKeys: keys) { i, k, value in
                #expect(k == keys[i])
                read[i] = Array(value)
                visits += 1
            }
            #expect(visits == keys.filter { expected[EngineKey(rawValue: $0).id] != nil }.count)
            for (i, k) in keys.enumerated() { #expect(read[i] == expected[EngineKey(rawValue: k).id]) }
        }
    }

    /// A block already in the shared cache is read from it, and a caching read puts what it
    /// reads there; a scan that does not cache leaves the cache as it was.
    @Test func aCachingReadFillsTheCacheAndAScanLeavesItAlone() throws {
        let fs = FaultFileSystem()
        let (store, expected) = try variedStore(fs)
        defer { try? store.close() }
        store.cache.removeAll()
        let snapshot = store.snapshot()
        let keys = expected.keys.sorted().map { key(1, $0) }
        try snapshot.scanValues(inKeyspace: 1, in: snapshot.keyBounds(inKeyspace: 1)!) { _, _ in true }
        let location = Location(packed: snapshot.state.primary[keys[0]]!)
        #expect(store.cache.get(location.frameKey) == nil)
        var read: [[UInt8]] = []
        try snapshot.forEachValue(forKeys: keys) { _, _, value in read.append(Array(value)) }
        #expect(store.cache.get(location.frameKey) != nil)
        // Read again, now from the cache: the same values.
        var again: [[UInt8]] = []
        try snapshot.forEachValue(forKeys: keys) { _, _, value in again.append(Array(value)) }
        #expect(again == read)
        #expect(Set(read) == Set(expected.values))
    }

    /// Buffers are given back for the next scan, unless they grew for an outsized frame.
    @Test func scanBuffersAreKeptForTheNextScanUnlessOutsized() {
        let cache = FrameCache(capacityBytes: 1 << 20)
        let first = cache.borrowScanBuffers()
        cache.giveBack(first)
        let second = cache.borrowScanBuffers()
        #expect(second === first)
        second.reserveWindow(ScanBuffers.maxReadAhead + 1)
        cache.giveBack(second)
        #expect(cache.borrowScanBuffers() !== second)
        // At most `maxSpare` are kept.
        let many = (0..<(ScanBuffers.maxSpare + 3)).map { _ in cache.borrowScanBuffers() }
        for b in many { cache.giveBack(b) }
        let kept = (0..<(ScanBuffers.maxSpare + 3)).map { _ in cache.borrowScanBuffers() }
        #expect(kept.filter { b in many.contains { $0 === b } }.count == ScanBuffers.maxSpare)
    }

    /// A damaged byte in a frame, or a frame cut short by the file's end, is a corruption error
    /// from a scan and from a batch read, never wrong values or a crash.
    @Test func aDamagedOrCutFrameIsCorruptionInAScanAndABatchRead() throws {
        for damage in ["flip", "cut"] {
            let fs = FaultFileSystem()
            let (store, expected) = try variedStore(fs)
            defer { try? store.close() }
            let original = fs.contents(Self.segment)!
            // The frame of the last outsized value (commit 18's only key).
            let frame = Location(packed: store.snapshot().state.primary[key(1, 1801)]!).frameOffset
            var damaged = original
            switch damage {
            case "flip": damaged[frame + 5_000] ^= 0x40
            default: damaged.removeSubrange((frame + 1_000)...)
            }
            fs.setContents(Self.segment, damaged)
            store.cache.removeAll()
            let snapshot = store.snapshot()
            let isCorruption: (any Error) -> Bool = { ($0 as? EngineError)?.code == .corruption }
            #expect {
                try snapshot.scanValues(inKeyspace: 1, in: snapshot.keyBounds(inKeyspace: 1)!) { _, _ in true }
            } throws: { isCorruption($0) }
            #expect {
                try snapshot.forEachValue(forKeys: expected.keys.sorted().map { key(1, $0) }) { _, _, _ in }
            } throws: { isCorruption($0) }
            fs.setContents(Self.segment, original)
        }
    }
}
