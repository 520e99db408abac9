import CLogbookSupport
import Foundation
import LogbookTestSupport
import Testing

@testable import LogbookEngine

@Suite struct FormatTests {
    @Test func crc32cMatchesTheStandardCheckValue() {
        let data = Array("123456789".utf8)
        #expect(CRC32C.checksum(data) == 0xE306_9283)
        let long = (0..<10_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let software = long.withUnsafeBytes { logbook_crc32c_software_only(0, $0.baseAddress, $0.count) }
        #expect(CRC32C.checksum(long) == software)
        // Continuing a checksum equals checksumming the concatenation.
        let first = CRC32C.checksum(Array(long[0..<333]))
        #expect(CRC32C.checksum(Array(long[333...]), seed: first) == CRC32C.checksum(long))
    }

    /// Large buffers go through three interleaved streams whose CRCs are combined (the
    /// hardware path); every length around the block sizes, any alignment and any seed gives
    /// what the table-driven path gives.
    @Test func theInterleavedHardwarePathMatchesTheTableDrivenOne() {
        var random = SeededGenerator(seed: 42)
        let buffer = (0..<(3 * 4096 * 9 + 64)).map { _ in UInt8.random(in: 0...255, using: &random) }
        let lengths = [
            0, 1, 7, 8, 9, 767, 768, 769, 1_000, 3 * 256 * 5 + 3, 12_287, 12_288, 12_289, 12_288 + 767,
            12_288 + 768, 2 * 12_288 + 5, 100_003, buffer.count - 64
        ]
        buffer.withUnsafeBytes { raw in
            for length in lengths {
                for offset in [0, 1, 3, 8] where offset + length <= raw.count {
                    for seed: UInt32 in [0, 0xDEAD_BEEF] {
                        let start = raw.baseAddress! + offset
                        #expect(
                            logbook_crc32c(seed, start, length) == logbook_crc32c_software_only(seed, start, length),
                            "length \(length), offset \(offset), seed \(seed)")
                    }
                }
            }
        }
    }

    @Test func varintsRoundTripAndRejectOverlongInput() throws {
        let values: [UInt64] = [0, 1, 127, 128, 300, 16_383, 16_384, UInt64(UInt32.max), UInt64.max - 1, UInt64.max]
        var w = ByteWriter()
        for v in values { w.appendVarint(v) }
        #expect(w.count == values.reduce(0) { $0 + varintSize($1) })
        let decoded: [UInt64] = try w.bytes.withUnsafeBytes { raw in
            var r = ByteReader(raw)
            var out: [UInt64] = []
            for _ in values { out.append(try r.readVarint()) }
            #expect(r.isAtEnd)
            return out
        }
        #expect(decoded == values)
        let overlong = [UInt8](repeating: 0xFF, count: 11)
        overlong.withUnsafeBytes { raw in
            var r = ByteReader(raw)
            #expect(throws: ByteReader.OutOfBounds.self) { try r.readVarint() }
        }
        [UInt8]([0x80]).withUnsafeBytes { raw in
            var r = ByteReader(raw)
            #expect(throws: ByteReader.OutOfBounds.self) { try r.readVarint() }
        }
    }

    @Test func framesRoundTripRawAndCompressed() {
        let salt: UInt32 = 0xDEAD_BEEF
        let small = bytes("short payload")
        let large = [UInt8](repeating: 65, count: 50_000) + bytes("tail")
        var out: [UInt8] = []
        Frame.append(type: .operations, payload: small, compress: true, salt: salt, to: &out)
        let secondAt = out.count
        Frame.append(type: .commit, payload: large, compress: true, salt: salt, to: &out)
        #expect(out.count < secondAt + 2000, "50 KB of one byte should compress")
        out.withUnsafeBytes { raw in
            guard case .frame(let f1) = Frame.parse(raw, at: 0, salt: salt) else {
                Issue.record("first frame")
                return
            }
            #expect(f1.type == .operations && f1.codec == .raw)
            #expect(Frame.decode(raw, f1) == small)
            guard case .frame(let f2) = Frame.parse(raw, at: f1.end, salt: salt) else {
                Issue.record("second frame")
                return
            }
            #expect(f2.codec == .lz4)
            #expect(Frame.decode(raw, f2) == large)
            guard case .end = Frame.parse(raw, at: f2.end, salt: salt) else {
                Issue.record("end")
                return
            }
            // Another file's salt never validates these bytes.
            guard case .invalid(let reason) = Frame.parse(raw, at: 0, salt: salt ^ 1) else {
                Issue.record("salt")
                return
            }
            #expect(reason == "checksum mismatch")
        }
    }

    @Test func zeroFillAndHugeLengthsAreInvalidWithoutAllocating() {
        let zeros = [UInt8](repeating: 0, count: 64)
        zeros.withUnsafeBytes { raw in
            guard case .invalid(let reason) = Frame.parse(raw, at: 0, salt: 1) else {
                Issue.record("zero")
                return
            }
            #expect(reason == "zero fill")
        }
        var huge = [UInt8](repeating: 0, count: 64)
        huge[4] = 0xFF
        huge[5] = 0xFF
        huge[6] = 0xFF
        huge[7] = 0x7F
        huge[8] = 1
        huge.withUnsafeBytes { raw in
            guard case .invalid(let reason) = Frame.parse(raw, at: 0, salt: 1) else {
                Issue.record("huge")
                return
            }
            #expect(reason.contains("exceeds the cap"))
        }
    }

    @Test func lz4RejectsMalformedPayloads() {
        let source = [UInt8]((0..<4000).map { UInt8(truncatingIfNeeded: $0 % 17) })
        var packed: [UInt8] = []
        #expect(source.withUnsafeBytes { LZ4.compress($0, appendingTo: &packed) })
        #expect(packed.withUnsafeBytes { LZ4.decompress($0, limit: 1 << 20) } == source)
        // A declared length over the limit is refused before allocating.
        #expect(packed.withUnsafeBytes { LZ4.decompress($0, limit: 100) } == nil)
        var damaged = packed
        damaged[6] ^= 0xFF
        damaged[packed.count - 1] ^= 0xFF
        let result = damaged.withUnsafeBytes { LZ4.decompress($0, limit: 1 << 20) }
        #expect(result == nil || result! != source)
        #expect([UInt8]([9, 0, 0, 0, 0xF0]).withUnsafeBytes { LZ4.decompress($0, limit: 100) } == nil)
    }

    @Test func fileHeadersAndManifestRoundTrip() throws {
        let header = FileHeader(magic: JournalFormat.segmentMagic, number: 42, salt: 7)
        let encoded = header.encoded()
        #expect(encoded.count == JournalFormat.fileHeaderSize)
        let decoded = try FileHeader.decode(encoded, magic: JournalFormat.segmentMagic).get()
        #expect(decoded == header)
        var bad = encoded
        bad[20] ^= 1
        #expect(throws: FileHeader.DecodeError.self) {
            try FileHeader.decode(bad, magic: JournalFormat.segmentMagic).get()
        }
        let manifest = Manifest(generation: 3, nextFileNumber: 9, checkpoint: 8, segments: [5, 7])
        #expect(try Manifest.decode(manifest.encoded(), path: "m") == manifest)
        var damaged = manifest.encoded()
        damaged[25] ^= 4
        #expect(throws: EngineError.self) { try Manifest.decode(damaged, path: "m") }
    }

    @Test func locationsPackAndUnpack() {
        let l = Location(segment: 262_143, frameOffset: (1 << 30) - 1, blockOffset: 65_535)
        #expect(Location(packed: l.packed) == l)
        let m = Location(segment: 1, frameOffset: 32, blockOffset: 0)
        #expect(Location(packed: m.packed) == m)
        #expect(m.packed != 0)
    }

    @Test func orderedIndexKeysOrderLikeTheirValues() {
        func cmp(_ a: IndexKey, _ b: IndexKey) -> Int { a.withBytes { x in b.withBytes { y in compareBytes(x, y) } } }
        let ints: [Int64] = [.min, -5, -1, 0, 1, 7, .max]
        for (a, b) in zip(ints, ints.dropFirst()) {
            #expect(cmp(IndexKey(index: 0, orderedInt64: a), IndexKey(index: 0, orderedInt64: b)) < 0)
        }
        let doubles: [Double] = [-.infinity, -1e10, -1, -0.5, 0, 0.25, 1, 1e300, .infinity]
        for (a, b) in zip(doubles, doubles.dropFirst()) {
            #expect(cmp(IndexKey(index: 0, orderedDouble: a), IndexKey(index: 0, orderedDouble: b)) < 0)
        }
        let long = IndexKey(index: 3, bytes: Array(repeating: 9, count: 40))
        #expect(long.bytes == Array(repeating: 9, count: 40))
        #expect(IndexKey(index: 3, bytes: bytes("abc")).bytes == bytes("abc"))
    }
}

/// The worked example of docs/journal-format.md, byte for byte.
@Suite struct WorkedExampleTests {
    static func hex(_ b: [UInt8]) -> String { b.map { String(format: "%02x", $0) }.joined(separator: " ") }

    @Test func theDocumentedBytesAreTheBytesWritten() {
        var t = Transaction()
        t.put(key(1, 5), value: bytes("hi"), indexKeys: [IndexKey(index: 1, orderedUInt64: 7)])
        t.addMembers([key(1, 9), key(1, 7)], toSet: key(2, 5))
        let block = t.finishedBlocks()[0]
        #expect(Self.hex(block) == Self.documentedBlock, "\(Self.hex(block))")
        var frames: [UInt8] = []
        let salt: UInt32 = 0x0102_0304
        Frame.append(type: .operations, payload: block, compress: true, salt: salt, to: &frames)
        let commit = CommitRecord(
            version: 1, operationFrames: 1, operations: 2, firstFrameOffset: 32, timestampMillis: 1_700_000_000_000,
            syncedOffset: 32, transactionCRC: CRC32C.checksum(frames))
        #expect(String(CRC32C.checksum(frames), radix: 16) == Self.documentedTransactionCRC)
        Frame.append(type: .commit, payload: commit.encoded(), compress: false, salt: salt, to: &frames)
        #expect(Self.hex(frames) == Self.documentedFrames, "\(Self.hex(frames))")
        let header = FileHeader(magic: JournalFormat.segmentMagic, number: 1, salt: salt).encoded()
        #expect(Self.hex(header) == Self.documentedHeader, "\(Self.hex(header))")
    }

    static let documentedTransactionCRC = "b4b504f4"
    static let documentedBlock = "01 01 05 02 68 69 01 01 08 00 00 00 00 00 00 00 07 03 02 05 02 01 07 02"
    static let documentedFrames =
        "71 1d 44 ef 18 00 00 00 01 00 00 00 01 01 05 02 68 69 01 01 08 00 00 00 00 00 00 00 07 03 02 05 02 01 07 02 30 d9 0b 1b 2c 00 00 00 02 00 00 00 01 00 00 00 00 00 00 00 01 00 00 00 02 00 00 00 20 00 00 00 00 00 00 00 00 68 e5 cf 8b 01 00 00 20 00 00 00 00 00 00 00 f4 04 b5 b4"
    static let documentedHeader =
        "4c 42 4b 4a 52 4e 4c 00 02 00 20 00 00 00 00 00 01 00 00 00 00 00 00 00 04 03 02 01 4f d7 92 8d"
}

@Suite struct TaggedIndexKeyTests {
    @Test func taggedKeysAreTheTagThenTheOrderedBytes() {
        #expect(IndexKey(index: 2, tag: 1, orderedUInt64: 0x0102_0304_0506_0708).bytes == [1, 1, 2, 3, 4, 5, 6, 7, 8])
        #expect(
            IndexKey(index: 2, tag: 1, orderedDouble: -2.5).bytes == [1] + IndexKey(index: 0, orderedDouble: -2.5).bytes
        )
        #expect(IndexKey(index: 2, tag: 7, orderedInt64: -9).bytes == [7] + IndexKey(index: 0, orderedInt64: -9).bytes)
    }
}
