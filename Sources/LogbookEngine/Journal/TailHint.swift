/// Where the last commit of any writing process ends, for the next writer (`TAIL`): the
/// segment, the offset after its commit record, its version and the segment's salt; the
/// manifest's generation (a rollover, checkpoint or compaction of another writer changes it
/// without a commit); and the next file number free for a new segment or checkpoint (writers
/// allocate numbers under the commit lock, before the manifest that names the file is written). A writer
/// reads it under the commit lock; when it names the writer's own end, no other process has
/// committed since, and the writer goes on without reading the manifest or the journal.
///
/// 48 bytes, little-endian: segment number u64 · end offset u64 · version u64 · next file
/// number u64 · manifest generation u64 · segment salt u32 · CRC-32C of the 44 bytes before u32. Written in place with one `pwrite` before the
/// commit lock is released, never synced (after a crash every writer's first catch-up reads
/// the journal). It is a hint: one that is missing, torn, or names another end makes the
/// writer read the manifest and the journal from where it stopped.
struct TailHint: Equatable, Sendable {
    var segment: UInt64
    var end: Int
    var version: UInt64
    var nextFileNumber: UInt64
    var generation: UInt64
    var salt: UInt32

    static let size = 48

    /// Whether this names the same end and manifest as `other` (the file numbers aside).
    func sameEnd(_ other: TailHint) -> Bool {
        segment == other.segment && end == other.end && version == other.version && salt == other.salt
            && generation == other.generation
    }

    func encoded() -> [UInt8] {
        var w = ByteWriter()
        w.appendLE(segment)
        w.appendLE(UInt64(end))
        w.appendLE(version)
        w.appendLE(nextFileNumber)
        w.appendLE(generation)
        w.appendLE(salt)
        let crc = w.bytes.withUnsafeBytes { CRC32C.checksum($0) }
        w.appendLE(crc)
        return w.bytes
    }

    /// The hint in `file`, if it reads whole (read into a buffer on the stack: a fetch checks
    /// it, and allocates nothing for it).
    static func read(_ file: any StorageFile) -> TailHint? {
        withUnsafeTemporaryAllocation(byteCount: size, alignment: 8) { buffer -> TailHint? in
            guard let n = try? file.read(into: buffer, at: 0), n == size else { return nil }
            return decode(UnsafeRawBufferPointer(buffer))
        }
    }

    static func decode(_ bytes: [UInt8]) -> TailHint? {
        bytes.withUnsafeBytes { decode($0) }
    }

    static func decode(_ raw: UnsafeRawBufferPointer) -> TailHint? {
        guard raw.count >= size,
            CRC32C.checksum(UnsafeRawBufferPointer(rebasing: raw[0..<44])) == raw.loadLE(at: 44, as: UInt32.self)
        else { return nil }
        let end = raw.loadLE(at: 8, as: UInt64.self)
        guard end <= UInt64(Int.max) else { return nil }
        return TailHint(
            segment: raw.loadLE(at: 0, as: UInt64.self), end: Int(end), version: raw.loadLE(at: 16, as: UInt64.self),
            nextFileNumber: raw.loadLE(at: 24, as: UInt64.self), generation: raw.loadLE(at: 32, as: UInt64.self),
            salt: raw.loadLE(at: 40, as: UInt32.self))
    }
}

/// The serial numbers writers have claimed, per keyspace, in `TAIL` after the hint: the object
/// layer hands out an object's key when the object is inserted, long before its save, so
/// writers in several processes claim blocks of serials under the commit lock and never hand
/// out the same key. Entry `k` (16 bytes at `4096 + 16·k`): the next serial no writer has
/// claimed (u64 LE) · its bitwise complement (u64 LE). Written in place with one `pwrite`, never
/// synced: the committed counters record (which a save takes as at least these) is the floor
/// after a crash; an entry that is missing or does not match its complement counts as 0.
enum SerialClaims {
    static let start = 4096
    static let entrySize = 16

    static func offset(_ keyspace: UInt16) -> Int { start + Int(keyspace) * entrySize }

    /// The next unclaimed serial of `keyspace` (0 when none is recorded).
    static func read(_ file: any StorageFile, keyspace: UInt16) -> UInt64 {
        withUnsafeTemporaryAllocation(byteCount: entrySize, alignment: 8) { buffer -> UInt64 in
            guard let n = try? file.read(into: buffer, at: offset(keyspace)), n == entrySize else { return 0 }
            let raw = UnsafeRawBufferPointer(buffer)
            let value = raw.loadLE(at: 0, as: UInt64.self)
            return raw.loadLE(at: 8, as: UInt64.self) == ~value ? value : 0
        }
    }

    static func write(_ file: any StorageFile, keyspace: UInt16, next: UInt64) throws {
        var w = ByteWriter()
        w.appendLE(next)
        w.appendLE(~next)
        try w.bytes.withUnsafeBytes { try file.write($0, at: offset(keyspace)) }
    }
}
