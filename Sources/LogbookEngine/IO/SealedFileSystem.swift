/// The file system an encrypted store writes and reads its checkpoints through: a checkpoint
/// file (written once, in order, then renamed; read whole) is sealed as a stream of chunks
/// (`JournalFormat.sealedChunkSize` bytes of its plain form each, AES-256-GCM), behind a file
/// header of its own. The checkpoint's code writes and reads the plain form it always has:
/// frames, whole leaves at their alignment, checksums. Every other file goes through as it is
/// (segments seal each frame themselves). See "Encryption" in docs/journal-format.md.
struct SealedFileSystem: FileSystem {
    let base: any FileSystem
    let cipher: StoreCipher

    /// `fs` itself in an unencrypted store.
    static func wrapping(_ fs: any FileSystem, _ cipher: StoreCipher?) -> any FileSystem {
        cipher.map { SealedFileSystem(base: fs, cipher: $0) } ?? fs
    }

    private static func isCheckpoint(_ path: String) -> Bool {
        path.hasSuffix(JournalFormat.checkpointSuffix)
            || path.hasSuffix(JournalFormat.checkpointSuffix + JournalFormat.temporarySuffix)
    }

    func openFile(_ path: String, writable: Bool, create: Bool, exclusive: Bool) throws -> any StorageFile {
        let file = try base.openFile(path, writable: writable, create: create, exclusive: exclusive)
        guard Self.isCheckpoint(path) else { return file }
        if writable { return SealingFile(file, cipher: cipher) }
        do { return try OpenedFile(file, cipher: cipher) } catch {
            file.close()
            throw error
        }
    }

    func rename(_ from: String, to: String) throws { try base.rename(from, to: to) }
    func removeFile(_ path: String) throws { try base.removeFile(path) }
    func syncDirectory(_ path: String) throws { try base.syncDirectory(path) }
    func listDirectory(_ path: String) throws -> [String] { try base.listDirectory(path) }
    func fileExists(_ path: String) -> Bool { base.fileExists(path) }
    func isDirectory(_ path: String) -> Bool { base.isDirectory(path) }
    func createDirectory(_ path: String) throws { try base.createDirectory(path) }
    func lockFile(_ path: String, exclusive: Bool, create: Bool) throws -> any FileLock {
        try base.lockFile(path, exclusive: exclusive, create: create)
    }
    func availableBytes(_ path: String) -> Int? { base.availableBytes(path) }

    /// What a chunk's tag authenticates besides its bytes: the file's header, and whether it is
    /// the last chunk (a file cut at a chunk's end does not pass for a whole one).
    static func additionalData(header: [UInt8], final: Bool) -> [UInt8] { header + [final ? 1 : 0] }
}

/// A checkpoint being written, sealed chunk by chunk as its plain bytes come (in order). The
/// last chunk is sealed by `sync()`; nothing can be written after it.
///
/// `@unchecked Sendable`: a checkpoint is written by one thread; the state is not shared.
private final class SealingFile: StorageFile, @unchecked Sendable {
    private let file: any StorageFile
    private let storeCipher: StoreCipher
    private var cipher: FileCipher?
    private var header: [UInt8] = []
    private var pending: [UInt8] = []
    private var plainCount = 0
    private var chunks: UInt64 = 0
    private var sealed = false

    init(_ file: any StorageFile, cipher: StoreCipher) {
        self.file = file
        self.storeCipher = cipher
    }

    var path: String { file.path }

    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int) throws -> Int {
        throw EngineError(.invalidArgument, "a sealed checkpoint being written is not read", path: path)
    }

    func write(_ buffer: UnsafeRawBufferPointer, at offset: Int) throws {
        guard offset == plainCount, !sealed else {
            throw EngineError(.invalidArgument, "a sealed checkpoint is written once, in order", path: path)
        }
        pending.append(contentsOf: buffer.bindMemory(to: UInt8.self))
        plainCount += buffer.count
        if cipher == nil {
            // The plain header names the file; the file's own header is that with a key nonce.
            guard pending.count >= JournalFormat.fileHeaderSize else { return }
            var plain = try pending.withUnsafeBytes {
                try FileHeader.decode(
                    UnsafeRawBufferPointer(rebasing: $0[0..<JournalFormat.fileHeaderSize]),
                    magic: JournalFormat.checkpointMagic, versions: JournalFormat.readableCheckpointVersions)
            }
            plain.keyNonce = FileHeader.randomSalt()
            header = plain.encoded()
            cipher = storeCipher.fileCipher(magic: JournalFormat.checkpointMagic, header: plain)
            try file.write(header, at: 0)
        }
        let size = JournalFormat.sealedChunkSize
        var start = 0
        while pending.count - start > size {
            try sealChunk(
                pending.withUnsafeBytes { UnsafeRawBufferPointer(rebasing: $0[start..<(start + size)]) }, final: false)
            start += size
        }
        if start > 0 { pending.removeFirst(start) }
    }

    private func sealChunk(_ bytes: UnsafeRawBufferPointer, final: Bool) throws {
        let sealedChunk = cipher!.seal(
            bytes, position: chunks,
            authenticating: SealedFileSystem.additionalData(header: header, final: final))
        let at = JournalFormat.fileHeaderSize + Int(chunks) * (JournalFormat.sealedChunkSize + FileCipher.tagSize)
        try file.write(sealedChunk, at: at)
        chunks += 1
    }

    func sync() throws {
        if !sealed {
            guard cipher != nil else {
                throw EngineError(.invalidArgument, "a sealed checkpoint without its header", path: path)
            }
            try pending.withUnsafeBytes { try sealChunk($0, final: true) }
            pending = []
            sealed = true
        }
        try file.sync()
    }

    func size() throws -> Int { plainCount }

    func truncate(to size: Int) throws {
        throw EngineError(.invalidArgument, "a sealed checkpoint is not cut", path: path)
    }

    func close() { file.close() }
}

/// A sealed checkpoint, read through: a read decrypts the chunks it covers (each
/// authenticated before any of its bytes is handed out; the last one read is kept, as reads of
/// a frame's header and then its payload fall in one chunk). The open authenticates the last
/// chunk, so a file cut short is refused at once; the rest is decrypted as the checkpoint's
/// reader asks for it (the whole leaves by the check it leaves to another thread).
private final class OpenedFile: StorageFile, Sendable {
    let path: String
    private let file: any StorageFile
    private let cipher: FileCipher
    private let header: [UInt8]
    private let chunkCount: Int
    private let lastChunkBytes: Int
    private let plainSize: Int
    private let recent = Locked<(index: Int, bytes: [UInt8])?>(nil)

    private static let sealedChunk = JournalFormat.sealedChunkSize + FileCipher.tagSize

    init(_ file: any StorageFile, cipher storeCipher: StoreCipher) throws {
        path = file.path
        self.file = file
        header = try file.read(count: JournalFormat.fileHeaderSize, at: 0)
        let decoded: FileHeader
        do {
            decoded = try header.withUnsafeBytes {
                try FileHeader.decode(
                    $0, magic: JournalFormat.checkpointMagic, versions: JournalFormat.readableCheckpointVersions)
            }
        } catch { throw Self.damaged("its header is damaged (\(error))", path: file.path, at: 0) }
        guard decoded.keyNonce != 0 else { throw Self.damaged("it is not encrypted", path: file.path, at: 12) }
        cipher = storeCipher.fileCipher(magic: JournalFormat.checkpointMagic, header: decoded)
        let body = try file.size() - JournalFormat.fileHeaderSize
        let count = (body + Self.sealedChunk - 1) / Self.sealedChunk
        let last = body - (count - 1) * Self.sealedChunk
        guard count >= 1, last >= FileCipher.tagSize else {
            throw Self.damaged("it is cut short", path: file.path, at: JournalFormat.fileHeaderSize + max(0, body))
        }
        chunkCount = count
        lastChunkBytes = last
        plainSize = body - count * FileCipher.tagSize
        try withChunk(count - 1, keep: true) { _ in }
    }

    private static func damaged(_ why: String, path: String, at offset: Int) -> EngineError {
        EngineError.corruption("sealed checkpoint: \(why)", path: path, offset: offset)
    }

    /// `body` with chunk `index`, authenticated and decrypted; `keep` keeps it for the next
    /// read (a read of part of a chunk: the next one is likely in it too).
    private func withChunk<R>(_ index: Int, keep: Bool, _ body: (UnsafeRawBufferPointer) throws -> R) throws -> R {
        if let kept = recent.withLock({ $0 }), kept.index == index { return try kept.bytes.withUnsafeBytes(body) }
        let final = index == chunkCount - 1
        let at = JournalFormat.fileHeaderSize + index * Self.sealedChunk
        let sealed = try file.read(count: final ? lastChunkBytes : Self.sealedChunk, at: at)
        let aad = SealedFileSystem.additionalData(header: header, final: final)
        let result = try sealed.withUnsafeBytes { raw in
            try cipher.withOpened(raw, position: UInt64(index), authenticating: aad) { plain in
                if keep {
                    let copy = Array(plain)
                    recent.withLock { $0 = (index, copy) }
                }
                return try body(plain)
            }
        }
        guard let result else { throw Self.damaged("chunk \(index) does not authenticate", path: path, at: at) }
        return result
    }

    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int) throws -> Int {
        guard offset < plainSize, buffer.count > 0 else { return 0 }
        let n = min(buffer.count, plainSize - offset)
        var done = 0
        while done < n {
            let position = offset + done
            let index = position / JournalFormat.sealedChunkSize
            let within = position % JournalFormat.sealedChunkSize
            // A whole chunk read goes straight to the buffer; part of one is kept.
            let whole = within == 0 && n - done >= JournalFormat.sealedChunkSize
            let take = try withChunk(index, keep: !whole) { bytes in
                let take = min(n - done, bytes.count - within)
                if take > 0 {
                    (buffer.baseAddress! + done).copyMemory(from: bytes.baseAddress! + within, byteCount: take)
                }
                return take
            }
            guard take > 0 else { throw Self.damaged("chunk \(index) is short", path: path, at: offset) }
            done += take
        }
        return n
    }

    func write(_ buffer: UnsafeRawBufferPointer, at offset: Int) throws {
        throw EngineError(.readOnly, "a checkpoint is read-only once written", path: path)
    }
    func sync() throws {}
    func size() throws -> Int { plainSize }
    func truncate(to size: Int) throws {
        throw EngineError(.readOnly, "a checkpoint is read-only once written", path: path)
    }
    func close() { file.close() }
}
