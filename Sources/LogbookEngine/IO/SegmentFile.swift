/// One open segment file. Shared by the writer and every snapshot that may read it; when a
/// compaction has replaced it, it is marked obsolete and its file is removed once the last
/// holder lets go (so old segments are deleted only when no snapshot reads them).
final class SegmentFile: Sendable {
    let number: UInt64
    let salt: UInt32
    let path: String
    let handle: any StorageFile
    private let fileSystem: any FileSystem
    private let obsolete = AtomicFlag()

    /// The format version of the segment's header: the commit records it holds are of that
    /// version, and a writer appends only to a segment of the current version.
    let formatVersion: UInt16

    init(
        number: UInt64, salt: UInt32, path: String, handle: any StorageFile, fileSystem: any FileSystem,
        formatVersion: UInt16 = JournalFormat.version
    ) {
        self.number = number
        self.salt = salt
        self.path = path
        self.handle = handle
        self.fileSystem = fileSystem
        self.formatVersion = formatVersion
    }

    func markObsolete() { _ = obsolete.setOnce() }

    deinit {
        handle.close()
        if obsolete.isSet { try? fileSystem.removeFile(path) }
    }

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
    let capacityBytes: Int

    init(capacityBytes: Int) { self.capacityBytes = capacityBytes }

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
        guard let file = segments.files[segment] else {
            throw EngineError(.corruption, "a record points into segment \(segment), which is not part of the store")
        }
        let header = try file.handle.read(count: JournalFormat.frameHeaderSize, at: frameOffset)
        guard header.count == JournalFormat.frameHeaderSize else {
            throw EngineError.corruption(
                "frame header beyond the end of the file", path: file.path, offset: frameOffset)
        }
        let length = Int(header.withUnsafeBytes { $0.loadLE(at: 4, as: UInt32.self) })
        guard length <= JournalFormat.maxFramePayload else {
            throw EngineError.corruption("frame length \(length) exceeds the cap", path: file.path, offset: frameOffset)
        }
        let frame = try file.handle.read(count: JournalFormat.frameHeaderSize + length, at: frameOffset)
        let parsed: Frame.Parsed? = frame.withUnsafeBytes { raw in
            guard case .frame(let parsed) = Frame.parse(raw, at: 0, salt: file.salt),
                parsed.type == .operations || parsed.type == .checkpointData
            else { return nil }
            return parsed
        }
        guard let parsed else { throw EngineError.corruption("damaged frame", path: file.path, offset: frameOffset) }
        return (file, frame, parsed)
    }

    /// A frame as stored and its decoded block, read and verified once, not cached (compaction
    /// reads each frame once, and copies the stored payload as it is when every operation in
    /// the block is still live).
    func frameAndBlock(segment: UInt64, frameOffset: Int) throws -> (
        codec: JournalFormat.Codec, frame: [UInt8], payload: Range<Int>, block: [UInt8]
    ) {
        let (file, frame, parsed) = try readFrame(segment: segment, frameOffset: frameOffset)
        guard parsed.type == .operations else {
            throw EngineError.corruption("not an operations frame", path: file.path, offset: frameOffset)
        }
        guard let decoded = frame.withUnsafeBytes({ Frame.decode($0, parsed) }) else {
            throw EngineError.corruption("damaged frame", path: file.path, offset: frameOffset)
        }
        return (parsed.codec, frame, parsed.payload, decoded)
    }

    /// The decoded block of a frame: from the cache, else read, verified, decoded and (when
    /// `caching`) kept in the cache. A scan reads with `caching` false, so that a pass over the
    /// whole store does not evict the blocks other reads use.
    func block(segment: UInt64, frameOffset: Int, caching: Bool = true) throws -> [UInt8] {
        let key = segment << 32 | UInt64(frameOffset)
        if let cached = cache.get(key) { return cached }
        let (file, frame, parsed) = try readFrame(segment: segment, frameOffset: frameOffset)
        guard let decoded = frame.withUnsafeBytes({ Frame.decode($0, parsed) }) else {
            throw EngineError.corruption("damaged frame", path: file.path, offset: frameOffset)
        }
        if caching { cache.insert(key, decoded) }
        return decoded
    }
}
