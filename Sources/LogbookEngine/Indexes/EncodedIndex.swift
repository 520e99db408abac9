/// One secondary index read in place from the checkpoint's encoded section, for the reads
/// that come before the deferred build (`DeferredIndexes`) has finished.
///
/// The section holds each index's entries in key order, each key prefix-coded against the
/// one before (shared length, suffix, primary-key delta); the open's check recorded a
/// point every `Checkpoint.seekInterval` entries: where the bytes are, and the key and
/// primary key the coding has reached there. A position in the index is therefore a binary
/// search over those points plus at most one interval (128 entries) of sequential decoding,
/// and a range is decoded once from its first entry: a query of 100,000 entries decodes
/// 100,000 entries, not the million that a build would.
///
/// It answers what `OrderedIndex` answers (counts, visits and primary keys between bounds,
/// forwards or reversed) with the same results, so the first indexed query of a process
/// need not wait for the whole index to be built.
struct EncodedIndex {
    /// The checkpoint stream, a chunk at a time (only the secondary-index section is read).
    let chunks: EncodedChunks
    let section: Checkpoint.IndexSection
    /// Told how many entries each walk decoded (it starts the build when they are many).
    let owner: DeferredIndexes?

    var count: Int { section.count }

    /// The most bytes an entry takes: its two lengths, the longest suffix, its primary key's delta.
    static let maxEntryBytes = 10 + 10 + JournalFormat.maxIndexKeyLength + 10

    /// Decodes entries in order from restart point `r`; `body` gets the entry's number, key
    /// and primary key, and returns false to stop. The bytes were checked when the store
    /// opened (`Checkpoint.skipIndexes`), so reads that fail here end the walk.
    ///
    /// The entries decoded count toward the build (`DeferredIndexes.noteDecoded`), except a
    /// forward walk of every entry when `wholeCounts` is false: a built tree would not make
    /// that walk cheaper (it is one sequential decode either way), and it would hold about
    /// four times the encoded section's memory (200 MB against 52 MB for ten million dates)
    /// for as long as the store is open. Walks that a tree does make cheaper (seeks, ranges,
    /// a reversed walk or the last entries of one, which decode from the start) count.
    ///
    /// The walk reads the stream a chunk at a time: the entries that begin at least
    /// `maxEntryBytes` before a chunk's end are decoded where they lie, and those nearer it
    /// (which may run into the next chunk) from a copy of the chunk's tail joined to the
    /// beginning of what follows. It keeps (`EncodedChunks`) the chunk it begins in when
    /// `keep` (not for a walk of the whole index), for the reads after it; the chunks after
    /// that one it reads once (a seek point every 128 entries, a chunk every 1 MiB: short
    /// walks seldom reach a second chunk).
    private func walk(
        from r: Int, wholeCounts: Bool = true, keep: Bool = true,
        _ body: (Int, UnsafeRawBufferPointer, UInt64) throws -> Bool
    ) rethrows {
        guard r < section.seeks.count else { return }
        let restart = section.seeks[r]
        let key = UnsafeMutableRawBufferPointer.allocate(
            byteCount: max(1, 2 * JournalFormat.maxIndexKeyLength), alignment: 8)
        defer { key.deallocate() }
        var length = section.seeks.withKey(r) { start in
            if !start.isEmpty { key.copyMemory(from: start) }
            return start.count
        }
        var primaryKey = restart.primaryKey
        var entry = restart.entry
        var decoded = 0
        var whole = false
        defer { if !whole || wholeCounts { owner?.noteDecoded(decoded) } }

        /// Decodes the entries of `raw` that begin before `limit`, from `start`: where the
        /// next one begins, or nil when the walk ends (every entry read, `body` said stop, or
        /// bytes that do not decode).
        func decode(
            _ raw: UnsafeRawBufferPointer, from start: Int, below limit: Int,
            _ body: (Int, UnsafeRawBufferPointer, UInt64) throws -> Bool
        ) rethrows -> Int? {
            var reader = ByteReader(raw, offset: start)
            while reader.offset < limit {
                guard entry < section.count else {
                    whole = restart.entry == 0
                    return nil
                }
                decoded += 1
                guard let shared = try? reader.readLength(limit: length),
                    let suffix = try? reader.readLength(limit: JournalFormat.maxIndexKeyLength - shared),
                    let suffixBytes = try? reader.readBytes(suffix),
                    let delta = try? reader.readVarint()
                else { return nil }
                if suffix > 0 {
                    key.baseAddress!.advanced(by: shared).copyMemory(
                        from: suffixBytes.baseAddress!, byteCount: suffix)
                }
                length = shared + suffix
                primaryKey = primaryKey &+ UInt64(bitPattern: unzigzag(delta))
                if try !body(entry, UnsafeRawBufferPointer(rebasing: key[0..<length]), primaryKey) { return nil }
                entry += 1
            }
            if entry == section.count {
                whole = restart.entry == 0
                return nil
            }
            return reader.offset
        }

        var k = chunks.chunk(containing: restart.offset)
        var chunk = chunks.bytes(k, keep: keep)
        var offset = restart.offset - chunks.starts[k]
        while true {
            let last = k + 1 == chunks.count
            // In the last chunk every entry is decoded in place (one cut short ends the walk).
            let limit = last ? chunk.count : chunk.count - Self.maxEntryBytes
            guard let next = try chunk.withUnsafeBytes({ try decode($0, from: offset, below: limit, body) })
            else { return }
            if last { return }
            // The entries that begin in the chunk's last `maxEntryBytes`: from its tail and
            // the bytes after it, from as many chunks as that takes.
            var joined = Array(chunk[next...])
            let tail = joined.count
            var j = k + 1
            var following: [UInt8] = []
            while joined.count < tail + Self.maxEntryBytes && j < chunks.count {
                following = chunks.bytes(j, keep: false)
                joined += following.prefix(tail + Self.maxEntryBytes - joined.count)
                j += 1
            }
            guard let after = try joined.withUnsafeBytes({ try decode($0, from: 0, below: tail, body) })
            else { return }
            // Where the next entry begins, in the stream: on in the chunk that holds it.
            let position = chunks.starts[k] + next + after
            k = chunks.chunk(containing: position)
            chunk = k == j - 1 ? following : chunks.bytes(k, keep: false)
            offset = position - chunks.starts[k]
        }
    }

    /// The number of entries whose key is below `key` (or at most `key` when `inclusive`):
    /// `OrderedIndex.rank`.
    func rank(_ key: [UInt8], inclusive: Bool) -> Int {
        guard count > 0 else { return 0 }
        let low = seek(key, inclusive: inclusive)
        var rank = section.seeks[low].entry
        key.withUnsafeBytes { probe in
            walk(from: low) { entry, k, _ in
                let c = compareBytes(k, probe)
                guard inclusive ? c <= 0 : c < 0 else { return false }
                rank = entry + 1
                return true
            }
        }
        return rank
    }

    /// The last point whose entry before it is below `key` (at most `key` when `inclusive`):
    /// every entry before that point is below too, so a walk for the first entry not below
    /// starts there. (Point 0 has no entry before it.)
    private func seek(_ key: [UInt8], inclusive: Bool) -> Int {
        key.withUnsafeBytes { probe in
            var low = 0
            var high = section.seeks.count - 1
            while low < high {
                let mid = (low + high + 1) / 2
                let c = section.seeks.withKey(mid) { compareBytes($0, probe) }
                if inclusive ? c <= 0 : c < 0 { low = mid } else { high = mid - 1 }
            }
            return low
        }
    }

    /// Walks the entries between the bounds in order, in one pass from the point before the
    /// lower bound, each bound checked against each entry's key; `body` returns false to stop.
    /// `wholeCounts`: whether a walk of every entry counts toward the build (`walk`).
    private func walkRange(
        _ lower: IndexBound?, _ upper: IndexBound?, wholeCounts: Bool = true,
        _ body: (UnsafeRawBufferPointer, UInt64) throws -> Bool
    ) rethrows {
        guard count > 0 else { return }
        let start = lower.map { seek($0.key, inclusive: !$0.inclusive) } ?? 0
        try walk(from: start, wholeCounts: wholeCounts, keep: lower != nil || upper != nil) { _, key, pk in
            if let lower {
                let c = lower.key.withUnsafeBytes { compareBytes(key, $0) }
                if c < 0 || (c == 0 && !lower.inclusive) { return true }
            }
            if let upper {
                let c = upper.key.withUnsafeBytes { compareBytes(key, $0) }
                if c > 0 || (c == 0 && !upper.inclusive) { return false }
            }
            return try body(key, pk)
        }
    }

    /// The ranks bounding the entries between `lower` and `upper`: `OrderedIndex.count`'s.
    private func ranks(_ lower: IndexBound?, _ upper: IndexBound?) -> Range<Int> {
        let start = lower.map { rank($0.key, inclusive: !$0.inclusive) } ?? 0
        let end = upper.map { rank($0.key, inclusive: $0.inclusive) } ?? count
        return start < end ? start..<end : start..<start
    }

    func count(from lower: IndexBound?, to upper: IndexBound?) -> Int { ranks(lower, upper).count }

    /// Visits the entries between the bounds in key order (or reverse, from a decoded copy
    /// of the range); `body` returns false to stop.
    func forEach(
        from lower: IndexBound?, to upper: IndexBound?, reverse: Bool = false,
        _ body: (UnsafeRawBufferPointer, UInt64) throws -> Bool
    ) rethrows {
        guard reverse else {
            try walkRange(lower, upper, wholeCounts: false, body)
            return
        }
        var entries: [([UInt8], UInt64)] = []
        walkRange(lower, upper) { key, pk in
            entries.append((Array(key), pk))
            return true
        }
        for (key, pk) in entries.reversed() {
            if try !key.withUnsafeBytes({ try body($0, pk) }) { return }
        }
    }

    /// The primary keys of the entries between the bounds, in order (or reverse), at most
    /// `limit` of them: `OrderedIndex.primaryKeys`.
    func primaryKeys(from lower: IndexBound?, to upper: IndexBound?, reverse: Bool = false, limit: Int? = nil)
        -> [UInt64]
    {
        let limit = limit ?? .max
        guard limit > 0 else { return [] }
        var out: [UInt64] = []
        // Reversed, the walk decodes from the start for the last entries: a tree would not.
        walkRange(lower, upper, wholeCounts: reverse) { _, pk in
            out.append(pk)
            // Forwards the first `limit` are enough; reversed, the last `limit` are wanted.
            return reverse || out.count < limit
        }
        if reverse { return Array(out.suffix(limit).reversed()) }
        return out
    }
}
