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
        return results
    }
}
