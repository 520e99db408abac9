/// The manifest: which segments make up the store, in replay order, and the current
/// checkpoint. Replaced atomically (write a temporary file, sync it, rename it over
/// `MANIFEST`, sync the directory).
///
/// Layout: magic[8] · version u16 · reserved u16 · payloadLength u32 · payload · crc32c u32
/// (over everything before it). Payload: generation u64 · nextFileNumber u64 ·
/// checkpoint u64 (0 = none) · segmentCount u32 · segment numbers u64…; in an encrypted store
/// (version 3) then: flags u32 (1) · key salt [16] · key check [16] · signature [16] (HMAC of
/// everything before it, from the magic on).
struct Manifest: Equatable {
    /// The store's key and key salt, in an encrypted store: the manifest is written with its
    /// key salt and check, and signed.
    var cipher: StoreCipher?
    /// What a decoded manifest says of encryption (nil: not encrypted), checked against a key
    /// by `verify(key:path:)`.
    var sealing: (keySalt: [UInt8], keyCheck: [UInt8], signature: [UInt8], signed: [UInt8])?
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
        if let cipher {
            payload.appendLE(UInt32(1))
            payload.append(contentsOf: cipher.keySalt)
            payload.append(contentsOf: cipher.keyCheck())
        }
        var w = ByteWriter()
        w.append(contentsOf: JournalFormat.manifestMagic)
        w.appendLE(cipher == nil ? JournalFormat.version : JournalFormat.encryptedManifestVersion)
        w.appendLE(UInt16(0))
        w.appendLE(UInt32(payload.count + (cipher == nil ? 0 : 16)))
        w.append(contentsOf: payload.bytes)
        if let cipher { w.append(contentsOf: cipher.manifestMAC(w.bytes)) }
        w.appendLE(CRC32C.checksum(w.bytes))
        return w.bytes
    }

    /// The cipher of an encrypted store's manifest with `key`: a clear error when the store is
    /// encrypted and no key was given, a key was given and the store is not encrypted, the
    /// key is not the store's, or the manifest's signature does not match (it was changed).
    static func cipher(for manifest: Manifest, key: EncryptionKey?, path: String) throws -> StoreCipher? {
        switch (manifest.sealing, key) {
        case (nil, nil): return nil
        case (nil, .some):
            throw EngineError(
                .notEncrypted,
                "the store is not encrypted and a key was given; encrypt it first with Store.changeKey (logbook rekey --new-key-file)",
                path: parentDirectory(path))
        case (.some, nil):
            throw EngineError(
                .keyRequired, "the store is encrypted; open it with its key (StoreOptions.encryptionKey, --key-file)",
                path: parentDirectory(path))
        case (.some(let sealing), .some(let key)):
            let cipher = StoreCipher(key: key, keySalt: sealing.keySalt)
            guard cipher.keyCheck() == sealing.keyCheck else {
                throw EngineError(.wrongKey, "the key is not the store's key", path: parentDirectory(path))
            }
            guard cipher.manifestMAC(sealing.signed) == sealing.signature else {
                throw EngineError.corruption("the manifest's signature does not match its bytes", path: path, offset: 0)
            }
            return cipher
        }
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
            let encrypted = version == JournalFormat.encryptedManifestVersion
            guard JournalFormat.readableVersions.contains(version) || encrypted else {
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
                guard n * 8 + (encrypted ? 52 : 0) == r.remaining else { throw ByteReader.OutOfBounds() }
                for _ in 0..<n { m.segments.append(try r.readLE(UInt64.self)) }
                if encrypted {
                    guard try r.readLE(UInt32.self) == 1 else { throw ByteReader.OutOfBounds() }
                    let salt = try (0..<16).map { _ in try r.readLE(UInt8.self) }
                    let check = try (0..<16).map { _ in try r.readLE(UInt8.self) }
                    let signature = try (0..<16).map { _ in try r.readLE(UInt8.self) }
                    m.sealing = (salt, check, signature, Array(raw[0..<(16 + length - 16)]))
                }
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
