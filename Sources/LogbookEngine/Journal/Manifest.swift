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

    mutating func allocateFileNumber() throws -> UInt64 {
        guard nextFileNumber <= JournalFormat.maxSegmentNumber else {
            throw EngineError(.invalidArgument, "the store has used all \(JournalFormat.maxSegmentNumber) file numbers")
        }
        defer { nextFileNumber += 1 }
        return nextFileNumber
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
                return m
            } catch {
                throw EngineError.corruption("manifest payload is malformed", path: path, offset: 16)
            }
        }
    }
}
