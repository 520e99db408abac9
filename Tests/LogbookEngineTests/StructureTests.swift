import LogbookTestSupport
import Testing

@testable import LogbookEngine

/// The persistent structures against plain Swift collections, with random operations.
@Suite struct StructureTests {
    @Test func radixMapMatchesADictionaryAndSnapshotsNeverChange() {
        var rng = SeededGenerator(seed: 1)
        var map = RadixMap<UInt64>()
        var model: [UInt64: UInt64] = [:]
        var snapshots: [(RadixMap<UInt64>, [UInt64: UInt64])] = []
        for step in 0..<20_000 {
            let ks = UInt16.random(in: 0...3, using: &rng)
            let id =
                Bool.random(using: &rng)
                ? UInt64.random(in: 0..<5000, using: &rng) : UInt64.random(in: 0..<(1 << 48), using: &rng)
            let k = UInt64(ks) << 48 | id
            if Int.random(in: 0..<4, using: &rng) == 0 {
                #expect(map.remove(k) == model.removeValue(forKey: k))
            } else {
                let v = UInt64.random(in: 1...UInt64.max, using: &rng)
                #expect(map.set(k, v) == model.updateValue(v, forKey: k))
            }
            if step % 2000 == 0 { snapshots.append((map, model)) }
        }
        #expect(map.count == model.count)
        for (k, v) in model { #expect(map[k] == v) }
        for ks in UInt16(0)...3 {
            var seen: [UInt64] = []
            map.forEach(inKeyspace: ks) { k, v in
                #expect(model[k] == v)
                seen.append(k)
                return true
            }
            let expected = model.keys.filter { $0 >> 48 == UInt64(ks) }.sorted()
            #expect(seen == expected)
            #expect(map.count(inKeyspace: ks) == expected.count)
            // Starting in the middle.
            if expected.count > 10 {
                var tail: [UInt64] = []
                map.forEach(inKeyspace: ks, from: expected[10]) { k, _ in
                    tail.append(k)
                    return true
                }
                #expect(tail == Array(expected[10...]))
            }
        }
        for (snap, snapModel) in snapshots {
            #expect(snap.count == snapModel.count)
            for (k, v) in snapModel.prefix(500) { #expect(snap[k] == v) }
        }
    }

    /// Random inserts and removes against a sorted array, for keys of up to eight bytes (no
    /// tails), of nine (a tail of one byte each: a common width), of nine to twelve, and of
    /// any length up to twenty (tails of different lengths in one leaf); then the index
    /// written to a checkpoint and loaded again (the bulk load) reads the same.
    @Test(arguments: [0...6, 9...9, 9...12, 0...20])
    func orderedIndexMatchesASortedArray(keyLengths: ClosedRange<Int>) throws {
        var rng = SeededGenerator(seed: 7)
        var index = OrderedIndex()
        var model: [([UInt8], UInt64)] = []
        func less(_ a: ([UInt8], UInt64), _ b: ([UInt8], UInt64)) -> Bool {
            let c = a.0.withUnsafeBytes { x in b.0.withUnsafeBytes { y in compareBytes(x, y) } }
            return c < 0 || (c == 0 && a.1 < b.1)
        }
        var snapshot: (OrderedIndex, [([UInt8], UInt64)])?
        for step in 0..<6000 {
            let keyLength = Int.random(in: keyLengths, using: &rng)
            let key = (0..<keyLength).map { _ in UInt8.random(in: 0...3, using: &rng) }
            let pk = UInt64.random(in: 0..<50, using: &rng)
            if Int.random(in: 0..<3, using: &rng) == 0, !model.isEmpty {
                let victim = model[Int.random(in: 0..<model.count, using: &rng)]
                #expect(victim.0.withUnsafeBytes { index.remove($0, victim.1) })
                model.removeAll { $0.0 == victim.0 && $0.1 == victim.1 }
            } else {
                let inserted = key.withUnsafeBytes { index.insert($0, pk) }
                let present = model.contains { $0.0 == key && $0.1 == pk }
                #expect(inserted == !present)
                if !present { model.append((key, pk)) }
            }
            if step == 3000 { snapshot = (index, model.sorted(by: less)) }
        }
        model.sort(by: less)
        index.checkInvariants()
        #expect(index.count == model.count)
        var all: [([UInt8], UInt64)] = []
        index.forEach(from: nil, to: nil) { k, pk in
            all.append((Array(k), pk))
            return true
        }
        #expect(all.map(\.0) == model.map(\.0) && all.map(\.1) == model.map(\.1))
        // Through a checkpoint: the loaded index is built leaf by leaf (`LeafFiller`).
        var state = IndexState()
        state.indexes[4] = index
        let loaded = try #require(
            try Checkpoint.decode(Checkpoint.encode(state, segment: 1, offset: 32)).state.indexes[4])
        loaded.checkInvariants()
        var reloaded: [([UInt8], UInt64)] = []
        loaded.forEach(from: nil, to: nil) { k, pk in
            reloaded.append((Array(k), pk))
            return true
        }
        #expect(reloaded.map(\.0) == model.map(\.0) && reloaded.map(\.1) == model.map(\.1))
        var reversed: [UInt64] = []
        index.forEach(from: nil, to: nil, reverse: true) { _, pk in
            reversed.append(pk)
            return true
        }
        #expect(reversed == model.map(\.1).reversed())
        // Ranges and counts, every combination of bounds.
        for _ in 0..<300 {
            let lo = (0..<Int.random(in: 0...3, using: &rng)).map { _ in UInt8.random(in: 0...3, using: &rng) }
            let hi = (0..<Int.random(in: 0...3, using: &rng)).map { _ in UInt8.random(in: 0...3, using: &rng) }
            let loInc = Bool.random(using: &rng)
            let hiInc = Bool.random(using: &rng)
            func inRange(_ k: [UInt8]) -> Bool {
                let a = k.withUnsafeBytes { x in lo.withUnsafeBytes { compareBytes(x, $0) } }
                let b = k.withUnsafeBytes { x in hi.withUnsafeBytes { compareBytes(x, $0) } }
                return (loInc ? a >= 0 : a > 0) && (hiInc ? b <= 0 : b < 0)
            }
            let expected = model.filter { inRange($0.0) }
            let lower = IndexBound(lo, inclusive: loInc)
            let upper = IndexBound(hi, inclusive: hiInc)
            #expect(index.count(from: lower, to: upper) == expected.count)
            var got: [UInt64] = []
            index.forEach(from: lower, to: upper) { _, pk in
                got.append(pk)
                return true
            }
            #expect(got == expected.map(\.1))
            var back: [UInt64] = []
            index.forEach(from: lower, to: upper, reverse: true) { _, pk in
                back.append(pk)
                return true
            }
            #expect(back == expected.map(\.1).reversed())
        }
        if let (snap, snapModel) = snapshot {
            snap.checkInvariants()
            var got: [UInt64] = []
            snap.forEach(from: nil, to: nil) { _, pk in
                got.append(pk)
                return true
            }
            #expect(got == snapModel.map(\.1))
        }
    }

    @Test func ascendingInsertsFillLeaves() {
        var index = OrderedIndex()
        for i in 0..<100_000 {
            let k = IndexKey(index: 0, orderedUInt64: UInt64(i))
            k.withBytes { _ = index.insert($0, UInt64(i)) }
        }
        index.checkInvariants()
        #expect(index.count == 100_000)
        // About 20 bytes an entry of 8-byte keys: the memory budget's share for an index.
        #expect(index.estimatedBytes() < 100_000 * 24)
        let lo = IndexKey(index: 0, orderedUInt64: 40_000).bytes
        let hi = IndexKey(index: 0, orderedUInt64: 50_000).bytes
        #expect(index.count(from: IndexBound(lo, inclusive: true), to: IndexBound(hi, inclusive: false)) == 10_000)
    }

    @Test func memberSetsMergeAndShareStorage() {
        var a = MemberSet.absent
        #expect(a.isAbsent)
        #expect(a.add(sorted: [1, 5, 9]) == 3)
        let copy = a
        #expect(a.add(sorted: [2, 5, 10]) == 2)
        #expect(a.members == [1, 2, 5, 9, 10])
        #expect(copy.members == [1, 5, 9])
        #expect(a.remove(sorted: [1, 7, 10]) == 2)
        #expect(a.members == [2, 5, 9])
        #expect(a.contains(5) && !a.contains(1))
        #expect(a.remove(sorted: [2, 5, 9]) == 3)
        #expect(a.isAbsent)
    }
}

@Suite struct BulkLoadTests {
    @Test(arguments: [0, 1, 127, 128, 129, 8192, 8193, 70_000])
    func builderMatchesInsertion(count: Int) {
        var builder = OrderedIndex.Builder()
        for i in 0..<count {
            IndexKey(index: 0, orderedUInt64: UInt64(i / 3)).withBytes { builder.append($0, UInt64(i)) }
        }
        var index = builder.build()
        index.checkInvariants()
        #expect(index.count == count)
        let lo = IndexKey(index: 0, orderedUInt64: 100).bytes
        #expect(index.count(from: IndexBound(lo, inclusive: true), to: nil) == max(0, count - 300))
        // The built tree takes further inserts and removals.
        for i in 0..<500 {
            IndexKey(index: 0, orderedUInt64: UInt64(i * 7)).withBytes { _ = index.insert($0, UInt64(1_000_000 + i)) }
        }
        for i in stride(from: 0, to: count, by: 5) {
            IndexKey(index: 0, orderedUInt64: UInt64(i / 3)).withBytes {
                let removed = index.remove($0, UInt64(i))
                #expect(removed)
            }
        }
        index.checkInvariants()
        #expect(index.count == count + 500 - (count + 4) / 5)
    }
}
