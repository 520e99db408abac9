/// Encoding and decoding of frames, the unit of everything after a file header:
/// `crc32c u32 · payloadLength u32 · type u8 · codec u8 · reserved u16 · payload`.
enum Frame {
    typealias FrameType = JournalFormat.FrameType
    typealias Codec = JournalFormat.Codec

    /// Appends a frame holding `payload`, LZ4-compressed when `compress` is set and it saves space.
    static func append(
        type: FrameType, payload: UnsafeRawBufferPointer, compress: Bool, salt: UInt32, seal: FrameSeal? = nil,
        to out: inout [UInt8]
    ) {
        if compress {
            let (codec, stored) = encodePayload(payload)
            if let stored {
                stored.withUnsafeBytes {
                    append(type: type, codec: codec, stored: $0, salt: salt, seal: seal, to: &out)
                }
                return
            }
        }
        append(type: type, codec: .raw, stored: payload, salt: salt, seal: seal, to: &out)
    }

    /// The stored form of a payload: LZ4 when that saves space, else raw (nil: store as is).
    static func encodePayload(_ payload: UnsafeRawBufferPointer) -> (Codec, [UInt8]?) {
        // A large transaction keeps its payloads until the commit: each is held at its size
        // (`LZ4.compress` appends exactly what the block takes), not at the compression bound.
        var out: [UInt8] = []
        guard LZ4.compress(payload, appendingTo: &out) else { return (.raw, nil) }
        return (.lz4, out)
    }

    /// Appends a frame whose stored payload was prepared by `encodePayload` (sealed first, in
    /// an encrypted file).
    static func append(
        type: FrameType, codec: Codec, stored: UnsafeRawBufferPointer, salt: UInt32, seal: FrameSeal? = nil,
        to out: inout [UInt8]
    ) {
        if let seal {
            let sealed = seal.cipher.seal(
                stored, position: UInt64(seal.base + out.count), authenticating: additionalData(type, codec))
            sealed.withUnsafeBytes { append(type: type, codec: codec, stored: $0, salt: salt, to: &out) }
            return
        }
        let start = out.count
        out.append(contentsOf: repeatElement(0, count: JournalFormat.frameHeaderSize))
        out.append(contentsOf: stored.assumingMemoryBound(to: UInt8.self))
        finish(at: start, type: type, codec: codec, length: stored.count, salt: salt, in: &out)
    }

    /// Appends a frame of `storedLength` payload bytes, which `fill` writes in place (every
    /// one of them) before the checksum is taken.
    static func append(
        type: FrameType, codec: Codec, storedLength: Int, salt: UInt32, to out: inout [UInt8],
        _ fill: (UnsafeMutableRawBufferPointer) -> Void
    ) {
        let start = out.count
        out.append(contentsOf: repeatElement(0, count: JournalFormat.frameHeaderSize + storedLength))
        out.withUnsafeMutableBytes { raw in
            fill(UnsafeMutableRawBufferPointer(rebasing: raw[(start + JournalFormat.frameHeaderSize)...]))
        }
        finish(at: start, type: type, codec: codec, length: storedLength, salt: salt, in: &out)
    }

    /// Writes the header of the frame whose payload follows `start` in `out`, its checksum last.
    private static func finish(
        at start: Int, type: FrameType, codec: Codec, length: Int, salt: UInt32, in out: inout [UInt8]
    ) {
        let length = UInt32(length)
        out.withUnsafeMutableBytes { raw in
            let header = raw.baseAddress!.advanced(by: start)
            header.storeBytes(of: length.littleEndian, toByteOffset: 4, as: UInt32.self)
            header.storeBytes(of: type.rawValue, toByteOffset: 8, as: UInt8.self)
            header.storeBytes(of: codec.rawValue, toByteOffset: 9, as: UInt8.self)
            let crc = checksum(
                salt: salt, headerTail: UnsafeRawBufferPointer(start: header.advanced(by: 4), count: 8),
                payload: UnsafeRawBufferPointer(start: header.advanced(by: 12), count: Int(length)))
            header.storeBytes(of: crc.littleEndian, toByteOffset: 0, as: UInt32.self)
        }
    }

    static func append(
        type: FrameType, payload: [UInt8], compress: Bool, salt: UInt32, seal: FrameSeal? = nil,
        to out: inout [UInt8]
    ) {
        payload.withUnsafeBytes {
            append(type: type, payload: $0, compress: compress, salt: salt, seal: seal, to: &out)
        }
    }

    /// What a sealed frame's tag authenticates besides its payload: its type and codec (its
    /// position and file are in its nonce and key).
    static func additionalData(_ type: FrameType, _ codec: Codec) -> [UInt8] { [type.rawValue, codec.rawValue] }

    /// `body` with the payload of `frame` (found at `position` of its file) as it was before
    /// sealing: the stored bytes themselves in an unencrypted file. Nil when a sealed payload
    /// does not authenticate.
    static func withOpened<R>(
        _ buffer: UnsafeRawBufferPointer, _ frame: Parsed, cipher: FileCipher?, position: Int,
        _ body: (UnsafeRawBufferPointer) throws -> R
    ) rethrows -> R? {
        let stored = UnsafeRawBufferPointer(rebasing: buffer[frame.payload])
        guard let cipher else { return try body(stored) }
        return try cipher.withOpened(
            stored, position: UInt64(position), authenticating: additionalData(frame.type, frame.codec), body)
    }

    @inline(__always)
    static func checksum(salt: UInt32, headerTail: UnsafeRawBufferPointer, payload: UnsafeRawBufferPointer) -> UInt32 {
        var crc = withUnsafeBytes(of: salt.littleEndian) { CRC32C.checksum($0) }
        crc = CRC32C.checksum(headerTail, seed: crc)
        return CRC32C.checksum(payload, seed: crc)
    }

    /// A frame found in a buffer.
    struct Parsed {
        var type: FrameType
        var codec: Codec
        /// Range of the stored payload in the buffer.
        var payload: Range<Int>
        var end: Int
    }

    /// What is at an offset of a buffer that should hold frames.
    enum ParseResult {
        case frame(Parsed)
        /// Exactly at the end of the data.
        case end
        /// Not a valid frame; the reason says why (incomplete, zero fill, bad checksum…).
        case invalid(String)
    }

    /// The frame at `offset`. With `verify` false its checksum is not computed (the caller
    /// checks it later: `verify(_:at:salt:)`), everything else is.
    static func parse(_ buffer: UnsafeRawBufferPointer, at offset: Int, salt: UInt32, verify: Bool = true)
        -> ParseResult
    {
        let size = buffer.count
        if offset == size { return .end }
        guard size - offset >= JournalFormat.frameHeaderSize else { return .invalid("incomplete frame header") }
        return parseHeader(
            UnsafeRawBufferPointer(rebasing: buffer[offset..<(offset + JournalFormat.frameHeaderSize)]), at: offset,
            size: size
        ) { !verify || self.verify(buffer, at: offset, salt: salt) }
    }

    /// `parse` of the frame at `offset` of a buffer of `size` bytes, from a copy of its
    /// header (its first 12 bytes): everything but the checksum, which `checksumMatches` says
    /// (asked after the length is found to fit, as `parse` does).
    @inline(__always)
    static func parseHeader(
        _ header: UnsafeRawBufferPointer, at offset: Int, size: Int, checksumMatches: () -> Bool = { true }
    ) -> ParseResult {
        let storedCRC = header.loadLE(at: 0, as: UInt32.self)
        let length = Int(header.loadLE(at: 4, as: UInt32.self))
        let typeByte = header[8]
        let codecByte = header[9]
        if typeByte == 0 {
            return .invalid(storedCRC == 0 && length == 0 ? "zero fill" : "invalid frame type 0")
        }
        guard length <= JournalFormat.maxFramePayload else { return .invalid("frame length \(length) exceeds the cap") }
        guard length <= size - offset - JournalFormat.frameHeaderSize else { return .invalid("incomplete frame") }
        guard checksumMatches() else { return .invalid("checksum mismatch") }
        guard let type = FrameType(rawValue: typeByte), type != .invalid else {
            return .invalid("unknown frame type \(typeByte)")
        }
        guard let codec = Codec(rawValue: codecByte) else { return .invalid("unknown codec \(codecByte)") }
        guard header[10] == 0 && header[11] == 0 else { return .invalid("reserved bytes not zero") }
        return .frame(
            Parsed(type: type, codec: codec, payload: (offset + 12)..<(offset + 12 + length), end: offset + 12 + length)
        )
    }

    /// Whether the checksum of the frame at `offset`, whose length `parse` checked, matches.
    static func verify(_ buffer: UnsafeRawBufferPointer, at offset: Int, salt: UInt32) -> Bool {
        let length = Int(buffer.loadLE(at: offset + 4, as: UInt32.self))
        let crc = checksum(
            salt: salt,
            headerTail: UnsafeRawBufferPointer(rebasing: buffer[(offset + 4)..<(offset + 12)]),
            payload: UnsafeRawBufferPointer(rebasing: buffer[(offset + 12)..<(offset + 12 + length)]))
        return crc == buffer.loadLE(at: offset, as: UInt32.self)
    }

    /// The uncompressed payload of a frame (at `position` of its file, opened first when
    /// sealed), or nil if it does not authenticate or its LZ4 payload is malformed.
    static func decode(
        _ buffer: UnsafeRawBufferPointer, _ frame: Parsed, cipher: FileCipher? = nil, position: Int = 0
    ) -> [UInt8]? {
        if cipher != nil {
            return withOpened(buffer, frame, cipher: cipher, position: position) {
                decode(stored: $0, codec: frame.codec)
            } ?? nil
        }
        return decode(stored: UnsafeRawBufferPointer(rebasing: buffer[frame.payload]), codec: frame.codec)
    }

    private static func decode(stored: UnsafeRawBufferPointer, codec: Codec) -> [UInt8]? {
        switch codec {
        case .raw: return Array(stored)
        case .lz4: return LZ4.decompress(stored, limit: JournalFormat.maxUncompressedPayload)
        }
    }
}

/// How frames appended to a buffer are sealed: the file's cipher, and the position in the
/// file of the buffer's first byte (a frame's nonce is its position).
struct FrameSeal {
    let cipher: FileCipher
    let base: Int
}

/// The 32-byte header of segment and checkpoint files.
struct FileHeader: Equatable {
    var magic: [UInt8]
    var number: UInt64
    var salt: UInt32
    /// The format version the file was written with (new files: `JournalFormat.version`).
    var version: UInt16 = JournalFormat.version
    /// Zero in a file of an unencrypted store; in an encrypted one, a random non-zero value
    /// that enters the file's key with its number and salt (see "Encryption" in
    /// docs/journal-format.md).
    var keyNonce: UInt32 = 0

    /// A new file's header, with a key nonce when the store is encrypted.
    static func fresh(magic: [UInt8], number: UInt64, encrypted: Bool) -> FileHeader {
        FileHeader(magic: magic, number: number, salt: randomSalt(), keyNonce: encrypted ? randomSalt() : 0)
    }

    func encoded() -> [UInt8] {
        var w = ByteWriter(capacity: JournalFormat.fileHeaderSize)
        w.append(contentsOf: magic)
        w.appendLE(version)
        w.appendLE(UInt16(JournalFormat.fileHeaderSize))
        w.appendLE(keyNonce)
        w.appendLE(number)
        w.appendLE(salt)
        w.appendLE(CRC32C.checksum(w.bytes))
        return w.bytes
    }

    enum DecodeError: Error {
        case short, wrongMagic
        case unsupportedVersion(UInt16)
        case badChecksum
    }

    static func decode(
        _ bytes: UnsafeRawBufferPointer, magic: [UInt8], versions: ClosedRange<UInt16> = JournalFormat.readableVersions
    ) throws(DecodeError) -> FileHeader {
        guard bytes.count >= JournalFormat.fileHeaderSize else { throw .short }
        guard Array(bytes[0..<8]) == magic else { throw .wrongMagic }
        let crc = CRC32C.checksum(UnsafeRawBufferPointer(rebasing: bytes[0..<28]))
        guard crc == bytes.loadLE(at: 28, as: UInt32.self) else { throw .badChecksum }
        let version = bytes.loadLE(at: 8, as: UInt16.self)
        guard versions.contains(version) else { throw .unsupportedVersion(version) }
        guard bytes.loadLE(at: 10, as: UInt16.self) == UInt16(JournalFormat.fileHeaderSize) else { throw .badChecksum }
        return FileHeader(
            magic: magic, number: bytes.loadLE(at: 16, as: UInt64.self), salt: bytes.loadLE(at: 24, as: UInt32.self),
            version: version, keyNonce: bytes.loadLE(at: 12, as: UInt32.self))
    }

    static func decode(_ bytes: [UInt8], magic: [UInt8]) -> Result<FileHeader, DecodeError> {
        bytes.withUnsafeBytes { raw in Result { () throws(DecodeError) in try decode(raw, magic: magic) } }
    }

    static func randomSalt() -> UInt32 {
        var salt: UInt32 = 0
        while salt == 0 { salt = UInt32.random(in: 1...UInt32.max) }
        return salt
    }
}
