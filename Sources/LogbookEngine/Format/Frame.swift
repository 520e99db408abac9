/// Encoding and decoding of frames, the unit of everything after a file header:
/// `crc32c u32 · payloadLength u32 · type u8 · codec u8 · reserved u16 · payload`.
enum Frame {
    typealias FrameType = JournalFormat.FrameType
    typealias Codec = JournalFormat.Codec

    /// Appends a frame holding `payload`, LZ4-compressed when `compress` is set and it saves space.
    static func append(
        type: FrameType, payload: UnsafeRawBufferPointer, compress: Bool, salt: UInt32, to out: inout [UInt8]
    ) {
        if compress {
            let (codec, stored) = encodePayload(payload)
            if let stored {
                stored.withUnsafeBytes { append(type: type, codec: codec, stored: $0, salt: salt, to: &out) }
                return
            }
        }
        append(type: type, codec: .raw, stored: payload, salt: salt, to: &out)
    }

    /// The stored form of a payload: LZ4 when that saves space, else raw (nil: store as is).
    static func encodePayload(_ payload: UnsafeRawBufferPointer) -> (Codec, [UInt8]?) {
        // A large transaction keeps its payloads until the commit: each is held at its size
        // (`LZ4.compress` appends exactly what the block takes), not at the compression bound.
        var out: [UInt8] = []
        guard LZ4.compress(payload, appendingTo: &out) else { return (.raw, nil) }
        return (.lz4, out)
    }

    /// Appends a frame whose stored payload was prepared by `encodePayload`.
    static func append(
        type: FrameType, codec: Codec, stored: UnsafeRawBufferPointer, salt: UInt32, to out: inout [UInt8]
    ) {
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

    static func append(type: FrameType, payload: [UInt8], compress: Bool, salt: UInt32, to out: inout [UInt8]) {
        payload.withUnsafeBytes { append(type: type, payload: $0, compress: compress, salt: salt, to: &out) }
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

    /// The uncompressed payload of a frame, or nil if the LZ4 payload is malformed.
    static func decode(_ buffer: UnsafeRawBufferPointer, _ frame: Parsed) -> [UInt8]? {
        let stored = UnsafeRawBufferPointer(rebasing: buffer[frame.payload])
        switch frame.codec {
        case .raw: return Array(stored)
        case .lz4: return LZ4.decompress(stored, limit: JournalFormat.maxUncompressedPayload)
        }
    }
}

/// The 32-byte header of segment and checkpoint files.
struct FileHeader: Equatable {
    var magic: [UInt8]
    var number: UInt64
    var salt: UInt32
    /// The format version the file was written with (new files: `JournalFormat.version`).
    var version: UInt16 = JournalFormat.version

    func encoded() -> [UInt8] {
        var w = ByteWriter(capacity: JournalFormat.fileHeaderSize)
        w.append(contentsOf: magic)
        w.appendLE(version)
        w.appendLE(UInt16(JournalFormat.fileHeaderSize))
        w.appendLE(UInt32(0))
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
            version: version)
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
