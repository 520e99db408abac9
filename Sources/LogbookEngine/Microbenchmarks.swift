#if canImport(Glibc)
import Glibc
#endif
/// Timings of the engine's inner structures, for `logbook bench micro` (not API).
@_spi(Benchmarks)
public enum EngineMicrobenchmarks {
    public static func run(count: Int) -> [(String, Double)] {
        var results: [(String, Double)] = []
        func time(_ name: String, _ body: () -> Void) {
            let start = ContinuousClock.now
            body()
            let d = ContinuousClock.now - start
            results.append((name, Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18))
        }
        var map = RadixMap<UInt64>()
        time("radix_set") { for i in 0..<count { map.set(UInt64(1) << 48 | UInt64(i), UInt64(i + 1)) } }
        var map2 = RadixMap<UInt64>()
        time("radix_setMany") { map2.setMany(count, key: { UInt64(1) << 48 | UInt64($0) }, value: { UInt64($0 + 1) }, previous: { _, _, _ in }) }
        var index = OrderedIndex()
        time("index_insert_ascending") {
            for i in 0..<count { IndexKey(index: 0, orderedUInt64: UInt64(i)).withBytes { _ = index.insert($0, UInt64(i)) } }
        }
        var builder = OrderedIndex.Builder()
        time("index_build") {
            for i in 0..<count { IndexKey(index: 0, orderedUInt64: UInt64(i)).withBytes { builder.append($0, UInt64(i)) } }
        }
        _ = builder.build()
        var t = Transaction()
        time("transaction_put") {
            var value = [UInt8](repeating: 65, count: 20)
            for i in 0..<count {
                value[0] = UInt8(truncatingIfNeeded: i)
                t.put(UInt64(1) << 48 | UInt64(i), value: value, indexKey: IndexKey(index: 1, orderedUInt64: UInt64(i)))
            }
        }
        let blocks = t.finishedBlocks()
        time("decode_ops") {
            var n = 0
            for block in blocks {
                block.withUnsafeBytes { raw in
                    var o = 0
                    while o < raw.count { o = (try? Operation.decode(raw, at: o).1) ?? raw.count; n += 1 }
                }
            }
            precondition(n == count)
        }
        var compressed: [UInt8] = []
        time("lz4_blocks") {
            for block in blocks { compressed.removeAll(keepingCapacity: true); block.withUnsafeBytes { _ = LZ4.compress($0, appendingTo: &compressed) } }
        }
        let txBlocks = blocks.enumerated().map { (frameOffset: 32 + $0.offset * 70_000, block: $0.element) }
        let manifest = t.manifest
        var pp = PrimaryPass(primary: RadixMap(), sets: RadixMap())
        time("pass_primary") { pp.run(txBlocks, manifest, segment: 1, path: nil) }
        var ip = IndexPass(indexes: [:])
        time("pass_index") { ip.run(txBlocks, manifest, path: nil) }
        time("manifest_decode") { _ = try? OperationManifest.decode(txBlocks) }
        var state = IndexState()
        let reader = BlockReader(segments: SegmentSet([:]), cache: FrameCache(capacityBytes: 1 << 20))
        time("apply") {
            try! state.apply(transaction: txBlocks, manifest: manifest, segment: 1, reader: reader)
        }
        time("radix_get") {
            var sum: UInt64 = 0
            for i in 0..<count { sum &+= map[UInt64(1) << 48 | UInt64(i)] ?? 0 }
            precondition(sum > 0)
        }
        time("index_walk") {
            var n = 0
            state.indexes[1]?.forEach(from: nil, to: nil, reverse: false) { _, _ in n += 1; return true }
            precondition(n == count)
        }
        // Reading values back through a store: the fetch path below the object graph.
        let directory = "/tmp/logbook-micro-\(UInt64.random(in: 0..<UInt64.max))"
        var options = StoreOptions()
        options.durability = .none
        options.checkpointOnClose = false
        if let store = try? Store.open(at: directory, options: options) {
            _ = try? store.commit(t)
            let snapshot = store.snapshot()
            let keys = (0..<count).map { UInt64(1) << 48 | UInt64($0) }
            time("snapshot_values") {
                var bytes = 0
                try? snapshot.forEachValue(forKeys: keys) { _, _, raw in bytes &+= raw.count }
                precondition(bytes > 0)
            }
            try? store.close()
            for name in (try? PosixFileSystem().listDirectory(directory)) ?? [] { try? PosixFileSystem().removeFile(directory + "/" + name) }
            _ = rmdir(directory)
        }
        return results
    }
}
