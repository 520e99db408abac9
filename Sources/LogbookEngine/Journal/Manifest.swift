/// The manifest: which segments make up the store, in replay order, and the current
/// checkpoint. Replaced atomically (write a temporary file, sync it, rename it over
/// `MANIFEST`, sync the directory).
///
/// Layout: magic[8] · version u16 · reserved u16 · payloadLength u32 · payload · crc32c u32
/// (over everything before it). Payload: generation u64 · nextFileNumber u64 ·
/// checkpoint u64 (0 = none) · segmentCount u32 · segment numbers u64…
struct Manifest: Equatable {
    var generation: UInt64 = 1
    /// Next number for a new segment or checkpoint file (they share one sequence).
    var nextFileNumber: UInt64 = 1
    var checkpoint: UInt64 = 0
    var segments: [UInt64] = []

    /// Where the search for a free number goes on from, once the sequence is spent (not
    /// stored: after a reopen it starts again at 1).
    var reuseCursor: UInt64 = 1

    /// A number for a new segment or checkpoint file: the next of the sequence while it lasts
    /// (a location has room for `JournalFormat.maxSegmentNumber`), then one that this manifest
    /// does not name and that `isFree` says no file uses — so numbers never run out. The
    /// search goes on from the last number it gave, so that numbers handed out but not yet
    /// created as files (a compaction's output) are not given twice.
    mutating func allocateFileNumber(isFree: (UInt64) -> Bool) throws -> UInt64 {
        if nextFileNumber <= JournalFormat.maxSegmentNumber {
            defer { nextFileNumber += 1 }
            return nextFileNumber
        }
        let named = Set(segments).union([checkpoint])
        let count = JournalFormat.maxSegmentNumber
        for step in 0..<count {
            let candidate = (reuseCursor - 1 + step) % count + 1
            if !named.contains(candidate) && isFree(candidate) {
                reuseCursor = candidate % count + 1
                return candidate
            }
        }
        throw EngineError(
            .invalidArgument, "every one of the \(count) file numbers is in use by a file of the store")
    }

    static func == (a: Manifest, b: Manifest) -> Bool {
        a.generation == b.generation && a.nextFileNumber == b.nextFileNumber && a.checkpoint == b.checkpoint
            && a.segments == b.segments
    }

    func encoded() -> [UInt8] {
        var payload = ByteWriter()
        payload.appendLE(generation)
        payload.appendLE(nextFileNumber)
        payload.appendLE(checkpoint)
        payload.appendLE(UInt32(segments.count))
        for s in segments { payload.appendLE(s) }
        var w = ByteWriter()
        w.append(contentsOf: JournalFormat.manifestMagic)
        w.appendLE(JournalFormat.version)
        w.appendLE(UInt16(0))
        w.appendLE(UInt32(payload.count))
        w.append(contentsOf: payload.bytes)
        w.appendLE(CRC32C.checksum(w.bytes))
        return w.bytes
    }

    static func decode(_ bytes: [UInt8], path: String) throws -> Manifest {
        try bytes.withUnsafeBytes { raw in
            guard raw.count >= 8, Array(raw[0..<8]) == JournalFormat.manifestMagic else {
                throw EngineError(.notAStore, "MANIFEST is not a Logbook manifest", path: path)
            }
            guard raw.count >= 20 else {
                throw EngineError.corruption("manifest is truncated", path: path, offset: raw.count)
            }
            let version = raw.loadLE(at: 8, as: UInt16.self)
            guard JournalFormat.readableVersions.contains(version) else {
                throw EngineError(
                    .unsupportedFormat,
                    "format version \(version); this build reads versions \(JournalFormat.readableVersions)",
                    path: path)
            }
            let length = Int(raw.loadLE(at: 12, as: UInt32.self))
            guard length >= 28, raw.count == 16 + length + 4 else {
                throw EngineError.corruption("manifest length does not match its file", path: path, offset: 12)
            }
            guard
                CRC32C.checksum(UnsafeRawBufferPointer(rebasing: raw[0..<(16 + length)]))
                    == raw.loadLE(at: 16 + length, as: UInt32.self)
            else {
                throw EngineError.corruption("manifest checksum mismatch", path: path, offset: 16 + length)
            }
            var r = ByteReader(UnsafeRawBufferPointer(rebasing: raw[16..<(16 + length)]))
            do {
                var m = Manifest()
                m.generation = try r.readLE(UInt64.self)
                m.nextFileNumber = try r.readLE(UInt64.self)
                m.checkpoint = try r.readLE(UInt64.self)
                let n = Int(try r.readLE(UInt32.self))
                guard n * 8 == r.remaining else { throw ByteReader.OutOfBounds() }
                for _ in 0..<n { m.segments.append(try r.readLE(UInt64.self)) }
                // Numbers a location can name, each once; a checkpoint that is not a segment.
                let valid = 1...JournalFormat.maxSegmentNumber
                guard m.segments.allSatisfy({ valid.contains($0) }), Set(m.segments).count == m.segments.count,
                    m.checkpoint == 0 || (valid.contains(m.checkpoint) && !m.segments.contains(m.checkpoint)),
                    m.nextFileNumber >= 1
                else { throw ByteReader.OutOfBounds() }
                return m
            } catch {
                throw EngineError.corruption("manifest payload is malformed", path: path, offset: 16)
            }
        }
    }
}
