/// How far the writer's last sync reached, for readers in other processes (followers): the
/// file `SYNCED` holds the active segment's number and salt and the offset before which its
/// last successful sync covered every byte. A follower reads the segments before that one
/// whole (they were synced when sealed), that one up to the offset, and none after it; so it
/// never reads a commit that a failed sync may still cut.
///
/// 24 bytes, little-endian: segment number u64 · synced offset u64 · segment salt u32 ·
/// CRC-32C of the 20 bytes before u32. Written in place with one `pwrite` after each sync
/// that moves the offset, never synced: it is for readers in the same boot (after a crash the
/// next writer writes it again once its open has synced; a reader before that finds a hint
/// that names another segment or an offset past the file, both harmless). A hint that is
/// missing, torn (its checksum fails) or names no segment of the manifest gives no limit.
struct SyncedHint: Equatable, Sendable {
    var segment: UInt64
    var offset: Int
    var salt: UInt32

    static let size = 24

    func encoded() -> [UInt8] {
        var w = ByteWriter()
        w.appendLE(segment)
        w.appendLE(UInt64(offset))
        w.appendLE(salt)
        let bytes = w.bytes
        let crc = bytes.withUnsafeBytes { CRC32C.checksum($0) }
        w.appendLE(crc)
        return w.bytes
    }

    static func decode(_ bytes: [UInt8]) -> SyncedHint? {
        guard bytes.count >= size else { return nil }
        return bytes.withUnsafeBytes { raw -> SyncedHint? in
            guard CRC32C.checksum(UnsafeRawBufferPointer(rebasing: raw[0..<20])) == raw.loadLE(at: 20, as: UInt32.self)
            else { return nil }
            let offset = raw.loadLE(at: 8, as: UInt64.self)
            guard offset <= UInt64(Int.max) else { return nil }
            return SyncedHint(
                segment: raw.loadLE(at: 0, as: UInt64.self), offset: Int(offset),
                salt: raw.loadLE(at: 16, as: UInt32.self))
        }
    }

    /// The hint in `directory`, if it reads whole.
    static func read(_ directory: String, fileSystem fs: any FileSystem) -> SyncedHint? {
        let path = joinPath(directory, JournalFormat.syncedFileName)
        guard fs.fileExists(path),
            let handle = try? fs.openFile(path, writable: false, create: false, exclusive: false)
        else { return nil }
        defer { handle.close() }
        return (try? handle.read(count: size, at: 0)).flatMap(decode)
    }
}
