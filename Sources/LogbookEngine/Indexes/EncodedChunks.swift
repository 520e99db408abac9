/// The checkpoint stream as the reads in place of its secondary indexes (`EncodedIndex`) see
/// it: chunk by chunk, each decompressed when a read reaches it.
///
/// The stream's chunks are the checkpoint file's data frames (1 MiB of stream each before
/// LZ4). The reads before the deferred build (`DeferredIndexes`) held the whole section
/// decompressed from the first read on: 52 MB for an index of ten million dates, which
/// compress to 0.5 MB in the file, for as long as the build had not finished — in a fetch of
/// every object sorted by the index, the largest allocation after the objects'. Now a read
/// decompresses the chunks it reaches, and keeps (`kept`) only those that short reads need
/// again: the chunks where a walk begins (a count, a seek, a range) are kept, and a long walk
/// (a fetch of the whole index in its order) reads the rest once and lets them go, so that
/// it holds a chunk or two, not the section.
///
/// `Sendable`: the chunks' places are immutable, the kept chunks behind a lock, and a chunk's
/// bytes an immutable array once made.
final class EncodedChunks: Sendable {
    /// Where each chunk begins in the stream, ascending, the first at 0.
    let starts: [Int]
    /// The stream's length.
    let total: Int
    /// Chunk `k`'s bytes, decompressed (the stream was checked before any read: it decodes).
    private let decompress: @Sendable (Int) -> [UInt8]
    /// The chunks kept for the reads to come.
    private let kept = Locked<[Int: [UInt8]]>([:])

    init(starts: [Int], total: Int, decompress: @escaping @Sendable (Int) -> [UInt8]) {
        precondition(starts.first == 0 || (starts.isEmpty && total == 0), "the first chunk begins the stream")
        self.starts = starts.isEmpty ? [0] : starts
        self.total = total
        self.decompress = decompress
    }

    /// `stream` cut into chunks of `size` bytes (a stream held in memory: one chunk, unless
    /// a test wants its walks to cross chunks).
    convenience init(_ stream: [UInt8], chunkSize size: Int = .max) {
        precondition(size > 0)
        let starts = Array(stride(from: 0, to: max(stream.count, 1), by: min(size, max(stream.count, 1))))
        self.init(starts: starts, total: stream.count) { [starts] k in
            let end = k + 1 < starts.count ? starts[k + 1] : stream.count
            return starts[k] == 0 && end == stream.count ? stream : Array(stream[starts[k]..<end])
        }
    }

    var count: Int { starts.count }

    /// Where chunk `k` ends in the stream.
    func end(of k: Int) -> Int { k + 1 < starts.count ? starts[k + 1] : total }

    /// The chunk that holds stream offset `offset` (the last chunk for an offset at the end).
    func chunk(containing offset: Int) -> Int {
        var low = 0
        var high = starts.count - 1
        while low < high {
            let mid = (low + high + 1) / 2
            if starts[mid] <= offset { low = mid } else { high = mid - 1 }
        }
        return low
    }

    /// Chunk `k`'s bytes: kept ones as they are, others decompressed now, and kept when `keep`.
    func bytes(_ k: Int, keep: Bool) -> [UInt8] {
        if let bytes = kept.withLock({ $0[k] }) { return bytes }
        let bytes = decompress(k)
        if keep { kept.withLock { $0[k] = bytes } }
        return bytes
    }

    /// The bytes the kept chunks hold.
    var keptBytes: Int { kept.withLock { $0.values.reduce(0) { $0 + $1.count } } }
}
