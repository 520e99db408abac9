import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// One segment file. Shared by the writer and every snapshot that may read it; when a
/// compaction has replaced it, it is marked obsolete and its name is removed at once: the
/// holders read on through its descriptor, and the disk space goes when the last of them lets
/// go. (It used to be removed by name when the last holder let go; by then a file number reused
/// past `maxSegmentNumber` could name a live segment, which that removal deleted.)
///
/// Its descriptor is open while it is the active segment or obsolete (then it cannot be opened
/// again by name); a sealed segment's is kept among the process's most recently used
/// (`SegmentDescriptors`), closed when others push it out and opened again on the next read.
/// A store of many segments (small ones, or 64 GB of the default size) so never holds more
/// descriptors than that bound (it used to hold one per segment, and failed with `EMFILE`).
final class SegmentFile: Sendable {
    let number: UInt64
    let salt: UInt32
    let path: String
    /// The file's key, in an encrypted store: every frame's payload is sealed with it.
    let cipher: FileCipher?
    private let fileSystem: any FileSystem
    private let writable: Bool
    private let obsolete = AtomicFlag()
    /// The descriptor held apart from the cache (the active segment's, an obsolete one's).
    private let pinned: Locked<(any StorageFile)?>

    /// The format version of the segment's header: the commit records it holds are of that
    /// version, and a writer appends only to a segment of the current version.
    let formatVersion: UInt16

    /// A segment whose file `handle` has open (with `pinned`, held apart: the active segment).
    init(
        number: UInt64, salt: UInt32, path: String, handle: any StorageFile, fileSystem: any FileSystem,
        formatVersion: UInt16 = JournalFormat.version, writable: Bool = true, pinned: Bool = false,
        cipher: FileCipher? = nil
    ) {
        self.number = number
        self.salt = salt
        self.cipher = cipher
        self.path = path
        self.fileSystem = fileSystem
        self.formatVersion = formatVersion
        self.writable = writable
        self.pinned = Locked(pinned ? handle : nil)
        if !pinned { SegmentDescriptors.shared.keep(handle, for: ObjectIdentifier(self)) }
    }

    /// The open file: held apart, cached, or opened again by name (an error when that fails:
    /// the file is gone, or no descriptor is left).
    var handle: any StorageFile {
        get throws {
            if let held = pinned.withLock({ $0 }) { return held }
            return try SegmentDescriptors.shared.handle(for: ObjectIdentifier(self)) {
                try fileSystem.openFile(path, writable: writable, create: false, exclusive: false)
            }
        }
    }

    /// Holds the descriptor apart (the segment became the active one), or lets it join the
    /// cache (sealed).
    func pin(_ held: Bool) {
        if held {
            guard let h = try? handle else { return }
            pinned.withLock { $0 = h }
            SegmentDescriptors.shared.forget(ObjectIdentifier(self))
        } else if let h = pinned.withLock({ p -> (any StorageFile)? in
            defer { p = nil }
            return p
        }) {
            SegmentDescriptors.shared.keep(h, for: ObjectIdentifier(self))
        }
    }

    /// Replaced by a compaction: its name goes now, its descriptor (held apart, since the
    /// file can no longer be opened by name) when the last holder lets go.
    func markObsolete() {
        guard obsolete.setOnce() else { return }
        pin(true)
        try? fileSystem.removeFile(path)
    }

    deinit { SegmentDescriptors.shared.forget(ObjectIdentifier(self)) }

    static func fileName(_ number: UInt64) -> String {
        JournalFormat.segmentPrefix + hex12(number) + JournalFormat.segmentSuffix
    }
}

func hex12(_ n: UInt64) -> String {
    let s = String(n, radix: 16)
    return String(repeating: "0", count: max(0, 12 - s.count)) + s
}

/// The segments a snapshot can read, by number. Immutable: a rollover or compaction makes a new one.
final class SegmentSet: Sendable {
    let files: [UInt64: SegmentFile]
    init(_ files: [UInt64: SegmentFile]) { self.files = files }

    func adding(_ file: SegmentFile) -> SegmentSet {
        var f = files
        f[file.number] = file
        return SegmentSet(f)
    }
}

/// Decoded operation blocks, shared by all readers: a small cache keyed by (segment, frame).
/// Decoded blocks are immutable arrays, so handing them out is safe.
final class FrameCache: Sendable {
    private struct State {
        var blocks: [UInt64: [UInt8]] = [:]
        var order: [UInt64] = []
        var next = 0
        var bytes = 0
    }

    private let state = Locked(State())
    /// Scan buffers given back by finished scans, lent to the next ones (`BlockScanner`).
    private let spareBuffers = Locked<[ScanBuffers]>([])
    let capacityBytes: Int

    init(capacityBytes: Int) { self.capacityBytes = capacityBytes }

    /// Bytes of the blocks held now.
    var bytes: Int { state.withLock { $0.bytes } }

    func get(_ key: UInt64) -> [UInt8]? {
        state.withLock { $0.blocks[key] }
    }

    func insert(_ key: UInt64, _ block: [UInt8]) {
        state.withLock { s in
            if s.blocks.updateValue(block, forKey: key) != nil { return }
            s.bytes += block.count
            s.order.append(key)
            // Evict first-in first-out until under the budget.
            while s.bytes > capacityBytes && s.next < s.order.count {
                let victim = s.order[s.next]
                s.next += 1
                if let gone = s.blocks.removeValue(forKey: victim) { s.bytes -= gone.count }
            }
            if s.next > 4096 && s.next * 2 > s.order.count {
                s.order.removeFirst(s.next)
                s.next = 0
            }
        }
    }

    func removeAll() {
        state.withLock { $0 = State() }
    }

    /// A scan's buffers: spare ones given back by an earlier scan, else new ones.
    func borrowScanBuffers() -> ScanBuffers {
        spareBuffers.withLock { $0.popLast() } ?? ScanBuffers()
    }

    /// Takes back a scan's buffers for the next one, unless enough are spare already or these
    /// grew for an outsized frame (they are then freed).
    func giveBack(_ buffers: ScanBuffers) {
        guard buffers.window.count <= ScanBuffers.maxReadAhead,
            buffers.block.count <= ScanBuffers.initialBlockBytes
        else { return }
        spareBuffers.withLock { spare in
            if spare.count < ScanBuffers.maxSpare { spare.append(buffers) }
        }
    }

    /// Forgets the blocks of one segment number (before the number is given to a new file).
    func removeAll(segment: UInt64) {
        state.withLock { s in
            for key in s.blocks.keys where key >> 32 == segment {
                if let gone = s.blocks.removeValue(forKey: key) { s.bytes -= gone.count }
            }
        }
    }
}

/// Reads operation blocks by location, through the cache, verifying each frame's checksum.
struct BlockReader: Sendable {
    let segments: SegmentSet
    let cache: FrameCache

    /// The frame at `frameOffset` of a segment, checksum verified: its file, its bytes and where
    /// its parts are in them.
    private func readFrame(segment: UInt64, frameOffset: Int) throws -> (SegmentFile, [UInt8], Frame.Parsed) {
        let file = try self.file(segment)
        let header = try file.handle.read(count: JournalFormat.frameHeaderSize, at: frameOffset)
        guard header.count == JournalFormat.frameHeaderSize else {
            throw EngineError.corruption(
                "frame header beyond the end of the file", path: file.path, offset: frameOffset)
        }
        let length = try header.withUnsafeBytes { try Self.payloadLength($0, file: file, offset: frameOffset) }
        let frame = try file.handle.read(count: JournalFormat.frameHeaderSize + length, at: frameOffset)
        let parsed = try frame.withUnsafeBytes { try Self.checked($0, file: file, offset: frameOffset) }
        return (file, frame, parsed)
    }

    /// The segment file a location names.
    func file(_ segment: UInt64) throws -> SegmentFile {
        guard let file = segments.files[segment] else {
            throw EngineError(.corruption, "a record points into segment \(segment), which is not part of the store")
        }
        return file
    }

    /// The payload length a frame's header declares, within the cap.
    static func payloadLength(_ header: UnsafeRawBufferPointer, file: SegmentFile, offset: Int) throws -> Int {
        let length = Int(header.loadLE(at: 4, as: UInt32.self))
        guard length <= JournalFormat.maxFramePayload else {
            throw EngineError.corruption("frame length \(length) exceeds the cap", path: file.path, offset: offset)
        }
        return length
    }

    /// A whole frame's bytes parsed: its checksum verified, and holding operations or
    /// checkpoint data.
    static func checked(_ frame: UnsafeRawBufferPointer, file: SegmentFile, offset: Int) throws -> Frame.Parsed {
        guard case .frame(let parsed) = Frame.parse(frame, at: 0, salt: file.salt),
            parsed.type == .operations || parsed.type == .checkpointData
        else { throw EngineError.corruption("damaged frame", path: file.path, offset: offset) }
        return parsed
    }

    /// The decoded block of a frame: from the cache, else read, verified, decoded and (when
    /// `caching`) kept in the cache. A scan reads with `caching` false, so that a pass over the
    /// whole store does not evict the blocks other reads use.
    func block(segment: UInt64, frameOffset: Int, caching: Bool = true) throws -> [UInt8] {
        let key = segment << 32 | UInt64(frameOffset)
        if let cached = cache.get(key) { return cached }
        let (file, frame, parsed) = try readFrame(segment: segment, frameOffset: frameOffset)
        guard
            let decoded = frame.withUnsafeBytes({
                Frame.decode($0, parsed, cipher: file.cipher, position: frameOffset)
            })
        else {
            throw EngineError.corruption("damaged frame", path: file.path, offset: frameOffset)
        }
        if caching { cache.insert(key, decoded) }
        return decoded
    }
}

/// The memory one scan reads blocks into: frames read ahead from a segment, and the block
/// decoded from one of them. Kept by the `FrameCache` between scans, so that a scan neither
/// allocates per block nor touches fresh pages (a decoded block and its frame allocated and
/// freed per block cost the heap a trim and a regrow, page faults included, every few blocks).
///
/// `@unchecked Sendable`: one scan uses it at a time; it passes from a finished scan to the
/// next only through the cache's lock.
final class ScanBuffers: @unchecked Sendable {
    /// How far a run of adjacent frames is read ahead at most, in one read.
    static let maxReadAhead = 256 << 10
    /// A decoded block's room at first: a block of the target size and its last operation.
    static let initialBlockBytes = JournalFormat.blockTargetSize + 4096
    /// Spare buffers a cache keeps (one per scan worker on a machine of this many cores).
    static let maxSpare = 8

    private(set) var window: UnsafeMutableRawBufferPointer
    private(set) var block: UnsafeMutableRawBufferPointer

    init() {
        window = .allocate(byteCount: Self.maxReadAhead, alignment: 16)
        block = .allocate(byteCount: Self.initialBlockBytes, alignment: 16)
    }

    deinit {
        window.deallocate()
        block.deallocate()
    }

    /// Makes `window` hold at least `count` bytes (its content is not kept).
    func reserveWindow(_ count: Int) {
        guard window.count < count else { return }
        window.deallocate()
        window = .allocate(byteCount: count, alignment: 16)
    }

    /// Makes `block` hold at least `count` bytes (its content is not kept).
    func reserveBlock(_ count: Int) {
        guard block.count < count else { return }
        block.deallocate()
        block = .allocate(byteCount: count, alignment: 16)
    }
}

/// Reads the blocks of one scan or batch read, in the order asked, into buffers borrowed from
/// the cache (given back when the scanner is released): no allocation per block, and adjacent
/// frames are read ahead together (a run of them in storage order, as a scan of keys written
/// together reads them, takes one read per 256 KiB instead of two per frame). A block read is
/// checked as `BlockReader.block` checks it, and taken from the shared cache when it is there.
///
/// ```swift
/// let scanner = BlockScanner(reader: reader, caching: false)
/// let count = try scanner.withBlock(segment: 1, frameOffset: 32) { $0.count }
/// ```
final class BlockScanner {
    private let reader: BlockReader
    private let caching: Bool
    /// Borrowed at the first read from a file: a read that finds every block in the cache
    /// needs none.
    private var borrowed: ScanBuffers?
    private var buffers: ScanBuffers {
        if let borrowed { return borrowed }
        let fresh = reader.cache.borrowScanBuffers()
        borrowed = fresh
        return fresh
    }
    /// The frames in `buffers.window`: which segment, from which offset, how many bytes.
    private var windowSegment = UInt64.max
    private var windowStart = 0
    private var windowCount = 0
    /// How much the next read takes: grows while frames are read in file order.
    private var readAhead = 16 << 10
    /// The block last read: in `buffers.block` (its first `blockCount` bytes), or `held` when
    /// it came from the shared cache or went into it.
    private var blockKey = UInt64.max
    private var blockCount = 0
    private var held: [UInt8]?

    init(reader: BlockReader, caching: Bool) {
        self.reader = reader
        self.caching = caching
    }

    deinit {
        if let borrowed { reader.cache.giveBack(borrowed) }
    }

    /// Calls `body` with the decoded block of the frame at `frameOffset` of a segment (asking
    /// for the block read last does not read it again).
    @inline(__always)
    func withBlock<R>(segment: UInt64, frameOffset: Int, _ body: (UnsafeRawBufferPointer) throws -> R) throws -> R {
        let key = segment << 32 | UInt64(frameOffset)
        if key != blockKey { try load(key, segment: segment, frameOffset: frameOffset) }
        if let held { return try held.withUnsafeBytes(body) }
        return try body(UnsafeRawBufferPointer(rebasing: buffers.block[0..<blockCount]))
    }

    /// Calls `body` with a frame's codec, its payload as stored and its decoded block, read
    /// from the file (not the cache) and not cached: a compaction reads each frame once, and
    /// copies the stored payload as it is when every operation in the block is still live.
    func withFrame<R>(
        segment: UInt64, frameOffset: Int,
        _ body: (JournalFormat.Codec, UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> R
    ) throws -> R {
        blockKey = .max
        held = nil
        let (file, frame, parsed) = try readFrame(segment: segment, frameOffset: frameOffset)
        guard parsed.type == .operations else {
            throw EngineError.corruption("not an operations frame", path: file.path, offset: frameOffset)
        }
        try decode(frame, parsed, file: file, frameOffset: frameOffset)
        let block = UnsafeRawBufferPointer(rebasing: buffers.block[0..<blockCount])
        guard file.cipher != nil else {
            return try body(parsed.codec, UnsafeRawBufferPointer(rebasing: frame[parsed.payload]), block)
        }
        // The payload as it was before sealing (it is sealed again at its new position).
        guard
            let result = try Frame.withOpened(
                frame, parsed, cipher: file.cipher, position: frameOffset, { try body(parsed.codec, $0, block) })
        else { throw EngineError.corruption("a frame does not authenticate", path: file.path, offset: frameOffset) }
        return result
    }

    private func load(_ key: UInt64, segment: UInt64, frameOffset: Int) throws {
        blockKey = .max
        held = reader.cache.get(key)
        if held != nil {
            blockKey = key
            return
        }
        let (file, frame, parsed) = try readFrame(segment: segment, frameOffset: frameOffset)
        if caching {
            // A block the cache keeps is an array of its own, shared with the cache.
            guard let decoded = Frame.decode(frame, parsed, cipher: file.cipher, position: frameOffset) else {
                throw EngineError.corruption("damaged frame", path: file.path, offset: frameOffset)
            }
            reader.cache.insert(key, decoded)
            held = decoded
        } else {
            try decode(frame, parsed, file: file, frameOffset: frameOffset)
        }
        blockKey = key
    }

    /// The frame at `frameOffset` of a segment, checksum verified, in the window: valid until
    /// the next read.
    private func readFrame(segment: UInt64, frameOffset: Int) throws -> (
        SegmentFile, UnsafeRawBufferPointer, Frame.Parsed
    ) {
        let file = try reader.file(segment)
        let header = JournalFormat.frameHeaderSize
        var at = try frameInWindow(file, frameOffset: frameOffset, count: header)
        let length = try BlockReader.payloadLength(
            UnsafeRawBufferPointer(rebasing: buffers.window[at..<(at + header)]), file: file, offset: frameOffset)
        at = try frameInWindow(file, frameOffset: frameOffset, count: header + length)
        let frame = UnsafeRawBufferPointer(rebasing: buffers.window[at..<(at + header + length)])
        return (file, frame, try BlockReader.checked(frame, file: file, offset: frameOffset))
    }

    /// Decodes a frame's payload into `buffers.block`.
    private func decode(
        _ frame: UnsafeRawBufferPointer, _ parsed: Frame.Parsed, file: SegmentFile, frameOffset: Int
    ) throws {
        guard file.cipher != nil else {
            return try decode(
                stored: UnsafeRawBufferPointer(rebasing: frame[parsed.payload]), codec: parsed.codec, file: file,
                frameOffset: frameOffset)
        }
        guard
            try Frame.withOpened(
                frame, parsed, cipher: file.cipher, position: frameOffset,
                { try decode(stored: $0, codec: parsed.codec, file: file, frameOffset: frameOffset) }) != nil
        else { throw EngineError.corruption("a frame does not authenticate", path: file.path, offset: frameOffset) }
    }

    /// Decodes a stored (opened) payload into `buffers.block`.
    private func decode(
        stored: UnsafeRawBufferPointer, codec: JournalFormat.Codec, file: SegmentFile, frameOffset: Int
    ) throws {
        switch codec {
        case .raw:
            buffers.reserveBlock(stored.count)
            UnsafeMutableRawBufferPointer(rebasing: buffers.block[0..<stored.count]).copyMemory(from: stored)
            blockCount = stored.count
        case .lz4:
            guard let count = LZ4.declaredLength(stored), count <= JournalFormat.maxUncompressedPayload else {
                throw EngineError.corruption("damaged frame", path: file.path, offset: frameOffset)
            }
            buffers.reserveBlock(count)
            guard LZ4.decompress(stored, into: UnsafeMutableRawBufferPointer(rebasing: buffers.block[0..<count]))
            else { throw EngineError.corruption("damaged frame", path: file.path, offset: frameOffset) }
            blockCount = count
        }
    }

    /// Where `count` bytes at `frameOffset` of `file` are in the window, reading them (and what
    /// follows, as far as `readAhead` goes) when they are not all there.
    private func frameInWindow(_ file: SegmentFile, frameOffset: Int, count: Int) throws -> Int {
        if windowSegment == file.number && frameOffset >= windowStart
            && frameOffset + count <= windowStart + windowCount
        {
            return frameOffset - windowStart
        }
        // A read that starts within or right after the last one is a run in file order: read
        // further ahead next time. Any other starts over from a small read.
        let adjacent =
            windowSegment == file.number && frameOffset >= windowStart && frameOffset <= windowStart + windowCount
        readAhead = adjacent ? min(readAhead * 2, ScanBuffers.maxReadAhead) : 16 << 10
        let want = max(count, readAhead)
        buffers.reserveWindow(want)
        windowSegment = .max
        var total = 0
        while total < want {
            let n = try file.handle.read(
                into: UnsafeMutableRawBufferPointer(rebasing: buffers.window[total..<want]), at: frameOffset + total)
            if n == 0 { break }
            total += n
        }
        windowSegment = file.number
        windowStart = frameOffset
        windowCount = total
        guard total >= count else {
            throw EngineError.corruption(
                count == JournalFormat.frameHeaderSize
                    ? "frame header beyond the end of the file" : "frame beyond the end of the file",
                path: file.path, offset: frameOffset)
        }
        return 0
    }
}

/// The descriptors of sealed segments the process keeps open: at most `capacity`, the least
/// recently used closed first (a read in progress keeps its own reference, so the descriptor
/// closes when that read is done). Process-wide, as the limit on descriptors is.
final class SegmentDescriptors: Sendable {
    static let shared = SegmentDescriptors(capacity: defaultCapacity())

    /// A quarter of the process's limit on descriptors, between 16 and 512.
    static func defaultCapacity() -> Int {
        #if canImport(Glibc) || canImport(Darwin)
            var limit = rlimit()
            if getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < 1 << 30 {
                return max(16, min(512, Int(limit.rlim_cur) / 4))
            }
        #endif
        return 512
    }

    /// The bound (a test may lower it).
    var capacity: Int {
        get { limit.load(ordering: .relaxed) }
        set { limit.store(newValue, ordering: .relaxed) }
    }
    private let limit: Atomic<Int>
    private let state = Locked<(open: [ObjectIdentifier: (file: any StorageFile, used: UInt64)], clock: UInt64)>(
        ([:], 0))

    init(capacity: Int) { limit = Atomic(capacity) }

    /// How many descriptors are kept now (for tests).
    var count: Int { state.withLock { $0.open.count } }

    /// The cached file of `owner`, or `open()`'s, kept.
    func handle(for owner: ObjectIdentifier, open: () throws -> any StorageFile) throws -> any StorageFile {
        let cached = state.withLock { s -> (any StorageFile)? in
            guard let entry = s.open[owner] else { return nil }
            s.clock += 1
            s.open[owner]!.used = s.clock
            return entry.file
        }
        if let cached { return cached }
        let file = try open()
        keep(file, for: owner)
        return file
    }

    /// Keeps `file` for `owner`, closing the least recently used beyond the capacity (their
    /// last reference goes outside the lock).
    func keep(_ file: any StorageFile, for owner: ObjectIdentifier) {
        let evicted = state.withLock { s -> [any StorageFile] in
            s.clock += 1
            s.open[owner] = (file, s.clock)
            var out: [any StorageFile] = []
            let capacity = self.capacity
            while s.open.count > capacity, let oldest = s.open.min(by: { $0.value.used < $1.value.used }) {
                out.append(oldest.value.file)
                s.open[oldest.key] = nil
            }
            return out
        }
        _ = evicted
    }

    /// Lets `owner`'s descriptor go.
    func forget(_ owner: ObjectIdentifier) {
        let gone = state.withLock { $0.open.removeValue(forKey: owner) }
        _ = gone
    }
}
