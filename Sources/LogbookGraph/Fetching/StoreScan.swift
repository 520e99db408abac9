import Dispatch
import Foundation
import LogbookEngine
import Synchronization

/// What a scan keeps of each record that passes its filter.
enum ScanOutput {
    /// Only how many passed (a count).
    case count
    /// Their keys (object IDs, or the keys of objects made later).
    case keys
    /// Their keys and a copy of their record bytes (objects made from them without reading
    /// the store again).
    case records
}

/// The records a scan kept, in key order (or the order of the candidate keys it was given).
struct ScanMatches {
    /// Records read.
    var examined = 0
    /// Records that passed.
    var count = 0
    var keys: [UInt64] = []
    var bytes: [UInt8] = []
    var spans: [(offset: UInt32, count: UInt32)] = []

    /// Appends another part's matches after these.
    mutating func append(_ other: ScanMatches) {
        examined += other.examined
        count += other.count
        keys.append(contentsOf: other.keys)
        if !other.spans.isEmpty {
            let base = UInt32(bytes.count)
            bytes.append(contentsOf: other.bytes)
            spans.append(contentsOf: other.spans.map { ($0.offset + base, $0.count) })
        }
    }

    /// Keeps the matches of `window` (offset and limit).
    mutating func apply(_ window: ResultWindow) {
        if window.offset > 0 {
            let n = min(window.offset, keys.count)
            keys.removeFirst(n)
            spans.removeFirst(n)
        }
        if window.limit > 0 { truncate(to: window.limit) }
    }

    /// Keeps the first `n` matches.
    mutating func truncate(to n: Int) {
        guard count > n else { return }
        count = n
        if keys.count > n { keys.removeLast(keys.count - n) }
        if spans.count > n { spans.removeLast(spans.count - n) }
    }
}

/// Scans of the store for a fetch: every record of an entity (split by key range across
/// cores), or a list of candidate keys from an index, each record tested by a compiled
/// `RecordFilter` on its bytes. Memory stays bounded: a scan reads one block at a time per
/// worker (into buffers the store lends it, with a read-ahead of at most 256 KiB) and does not
/// fill the shared block cache; only the matches are kept.
enum StoreScan {
    /// Scans smaller than this run on the calling thread alone.
    static let parallelThreshold = 32_768
    /// Records per part of a parallel scan (a part is a key range).
    static let partSize = 65_536
    /// Keys looked up at a time in the primary index (the most entries one block call holds).
    static let batchSize = 4096

    /// How many workers a scan uses: the active processors (at least one), or
    /// `LOGBOOK_SCAN_WORKERS`; read once per process.
    static let workers: Int = {
        let environment = ProcessInfo.processInfo.environment["LOGBOOK_SCAN_WORKERS"].flatMap { Int($0) }
        return max(1, environment ?? ProcessInfo.processInfo.activeProcessorCount)
    }()

    /// The records of `keyspace` that pass `filter` (all of them when nil), in key order, at
    /// most `limit` of them (the scan stops once the first `limit` in key order are known).
    static func scan(
        _ snapshot: Snapshot, keyspace: UInt16, filter: RecordFilter?, output: ScanOutput, limit: Int?
    ) throws -> ScanMatches {
        guard let bounds = snapshot.keyBounds(inKeyspace: keyspace) else { return ScanMatches() }
        let total = snapshot.count(inKeyspace: keyspace)
        if limit == 0 { return ScanMatches() }
        let parts = total < parallelThreshold || workers == 1 ? 1 : max(workers, (total + partSize - 1) / partSize)
        if parts == 1 {
            var m = try scanPart(
                snapshot, keyspace: keyspace, range: bounds, filter: filter, output: output, limit: limit)
            if let limit { m.truncate(to: limit) }
            return m
        }
        // Equal key ranges (keys are dense serials, so about equal record counts).
        let lo = EngineKey(rawValue: bounds.lowerBound).id
        let hi = EngineKey(rawValue: bounds.upperBound).id
        let span = (hi - lo + 1 + UInt64(parts) - 1) / UInt64(parts)
        let ranges: [ClosedRange<UInt64>] = (0..<parts).compactMap { p in
            let start = lo + UInt64(p) * span
            guard start <= hi else { return nil }
            let end = min(hi, start + span - 1)
            return EngineKey(keyspace: keyspace, id: start).rawValue...EngineKey(keyspace: keyspace, id: end).rawValue
        }
        let state = Mutex(PartState(parts: ranges.count))
        // Parts after `cutoff` are not needed: the parts before it already hold `limit` matches.
        let cutoff = Atomic<Int>(Int.max)
        DispatchQueue.concurrentPerform(iterations: ranges.count) { p in
            guard p <= cutoff.load(ordering: .relaxed) else { return }
            let result = Result {
                try scanPart(
                    snapshot, keyspace: keyspace, range: ranges[p], filter: filter, output: output, limit: limit,
                    stop: { p > cutoff.load(ordering: .relaxed) })
            }
            state.withLock { s in
                switch result {
                case .success(let m):
                    s.results[p] = m
                    guard let limit else { return }
                    // The first part whose predecessors and itself hold `limit` matches.
                    var found = 0
                    for q in 0..<s.results.count {
                        guard let r = s.results[q] else { break }
                        found += r.count
                        if found >= limit {
                            if q < cutoff.load(ordering: .relaxed) { cutoff.store(q, ordering: .relaxed) }
                            break
                        }
                    }
                case .failure(let e):
                    if s.error == nil { s.error = e }
                    cutoff.store(-1, ordering: .relaxed)
                }
            }
        }
        return try state.withLock { s in
            if let e = s.error { throw e }
            var all = ScanMatches()
            let last = min(cutoff.load(ordering: .relaxed), s.results.count - 1)
            for q in 0...last {
                guard let r = s.results[q] else { break }
                all.append(r)
            }
            if let limit { all.truncate(to: limit) }
            return all
        }
    }

    private struct PartState: ~Copyable {
        var results: [ScanMatches?]
        var error: (any Error)?
        init(parts: Int) { results = Array(repeating: nil, count: parts) }
    }

    /// One key range, on the calling thread; its matches sorted by key.
    private static func scanPart(
        _ snapshot: Snapshot, keyspace: UInt16, range: ClosedRange<UInt64>, filter: RecordFilter?,
        output: ScanOutput, limit: Int?, stop: () -> Bool = { false }
    ) throws -> ScanMatches {
        let a = PartAccumulator()
        let limit = limit ?? .max
        let scratch = UnsafeMutableBufferPointer<Int>.allocate(capacity: max(1, filter?.kinds.count ?? 1))
        scratch.initialize(repeating: -1)
        let selected = UnsafeMutableBufferPointer<Int32>.allocate(capacity: batchSize)
        defer {
            scratch.deallocate()
            selected.deallocate()
        }
        // A small entity's blocks stay in the shared cache (its scans are cheap and frequent);
        // a large one's pass over the store leaves the cache to other reads.
        let caching = snapshot.count(inKeyspace: keyspace) < parallelThreshold
        try snapshot.scanBlocks(inKeyspace: keyspace, in: range, batchSize: batchSize, caching: caching) {
            block, entries in
            a.m.examined += entries.count
            if stop() { return false }
            // The filter unwrapped once per block (an optional bound per record costs a retain
            // and a release), and the block's records tested in one call.
            if let filter {
                let n = try filter.select(block, entries, scratch: scratch, into: selected)
                if output == .count {
                    a.m.count += n
                    return a.m.count < limit
                }
                for j in selected[0..<n] {
                    let e = entries[Int(j)]
                    if !keep(e.key, UnsafeRawBufferPointer(rebasing: block[e.value]), a, output, limit) { return false }
                }
            } else {
                for e in entries {
                    if !keep(e.key, UnsafeRawBufferPointer(rebasing: block[e.value]), a, output, limit) { return false }
                }
            }
            return true
        }
        if !a.ordered { sortByKey(&a.m) }
        return a.m
    }

    /// Keeps one match; false once the first `limit` matches in key order are known.
    @inline(__always)
    private static func keep(
        _ key: UInt64, _ raw: UnsafeRawBufferPointer, _ a: PartAccumulator, _ output: ScanOutput, _ limit: Int
    ) -> Bool {
        a.m.count += 1
        if output != .count {
            if key < a.previous { a.ordered = false }
            a.previous = key
            a.m.keys.append(key)
            if output == .records {
                a.m.spans.append((UInt32(a.m.bytes.count), UInt32(raw.count)))
                a.m.bytes.append(contentsOf: raw)
            }
        }
        // In key order, the first `limit` matches are final; out of order, read on.
        return !a.ordered || a.m.count < limit
    }

    /// The state of one part's scan, updated per record: a class whose fields skip the
    /// runtime's exclusivity checks (only the part's own thread touches it), which would
    /// otherwise cost a tenth of a scan.
    private final class PartAccumulator {
        @exclusivity(unchecked) var m = ScanMatches()
        @exclusivity(unchecked) var ordered = true
        @exclusivity(unchecked) var previous: UInt64 = 0
    }

    /// Puts matches found in storage order into key order.
    static func sortByKey(_ m: inout ScanMatches) {
        let order = m.keys.indices.sorted { m.keys[$0] < m.keys[$1] }
        m.keys = order.map { m.keys[$0] }
        if !m.spans.isEmpty { m.spans = order.map { m.spans[$0] } }
    }

    /// The records of `keys` (candidates from an index, in its order) that pass `filter`,
    /// in the order of `keys`, at most `limit` of them.
    static func filter(
        _ keys: [UInt64], snapshot: Snapshot, filter: RecordFilter?, output: ScanOutput, limit: Int?
    ) throws -> ScanMatches {
        var m = ScanMatches()
        guard filter != nil || output == .records else {
            // Nothing to read: every candidate passes.
            let kept = limit.map { Array(keys.prefix($0)) } ?? keys
            m.count = kept.count
            if output == .keys { m.keys = kept }
            return m
        }
        let scratch = UnsafeMutableBufferPointer<Int>.allocate(capacity: max(1, filter?.kinds.count ?? 1))
        scratch.initialize(repeating: -1)
        defer { scratch.deallocate() }
        var positions: [Int] = []
        var inOrder = true
        try snapshot.forEachValue(forKeys: keys) { i, key, raw in
            m.examined += 1
            if let filter, try !filter.matches(raw, scratch: scratch) { return }
            if let last = positions.last, i < last { inOrder = false }
            positions.append(i)
            m.count += 1
            if output != .count { m.keys.append(key) }
            if output == .records {
                m.spans.append((UInt32(m.bytes.count), UInt32(raw.count)))
                m.bytes.append(contentsOf: raw)
            }
        }
        if !inOrder {
            let order = positions.indices.sorted { positions[$0] < positions[$1] }
            if !m.keys.isEmpty { m.keys = order.map { m.keys[$0] } }
            if !m.spans.isEmpty { m.spans = order.map { m.spans[$0] } }
        }
        if let limit { m.truncate(to: limit) }
        return m
    }
}
