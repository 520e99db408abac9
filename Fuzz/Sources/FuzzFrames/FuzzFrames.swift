// The frame reader: a segment's bytes after its header, as recovery scans them — frames,
// their payloads (LZ4 included), commit records, and the operations of every block.
import FuzzDriver

@testable import LogbookEngine

@_cdecl("FuzzFrames_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    logbook_run_fuzzer(argc, argv) { data, size in fuzz(data!, size) }
}

func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let raw = UnsafeRawBufferPointer(start: data, count: size)
    var blocks: [(frameOffset: Int, block: [UInt8])] = []
    var offset = 0
    scan: while true {
        switch Frame.parse(raw, at: offset, salt: 0x0102_0304) {
        case .end, .invalid: break scan
        case .frame(let frame):
            switch frame.type {
            case .operations:
                guard let block = Frame.decode(raw, frame) else { break scan }
                blocks.append((offset, block))
                block.withUnsafeBytes { bytes in
                    var o = 0
                    while o < bytes.count, let (_, next) = try? JournalOperation.decode(bytes, at: o) { o = next }
                }
            case .commit:
                _ = CommitRecord(UnsafeRawBufferPointer(rebasing: raw[frame.payload]))
                _ = try? OperationTable.decode(blocks)
                blocks.removeAll()
            default:
                _ = Frame.decode(raw, frame)
            }
            offset = frame.end
        }
    }
    _ = Recovery.commitRecords(in: raw, after: 0, salt: 0x0102_0304)
    fuzzSealed(raw)
    return 0
}

/// The same frames in an encrypted store's file: each one's payload sealed at its position
/// with a fixed key. Reading them back with the key gives exactly the plain frames' payloads;
/// a byte changed in a sealed payload (its checksum made to match again) never decodes.
func fuzzSealed(_ raw: UnsafeRawBufferPointer) {
    let cipher = StoreCipher(
        key: try! EncryptionKey(bytes: (0..<32).map { UInt8($0) }), keySalt: Array(repeating: 9, count: 16)
    )
    .fileCipher(
        magic: JournalFormat.segmentMagic,
        header: FileHeader(magic: JournalFormat.segmentMagic, number: 1, salt: 0x0102_0304, keyNonce: 5))
    var sealed: [UInt8] = []
    var plain: [[UInt8]?] = []
    var offset = 0
    while case .frame(let frame) = Frame.parse(raw, at: offset, salt: 0x0102_0304) {
        plain.append(Frame.decode(raw, frame))
        Frame.append(
            type: frame.type, codec: frame.codec, stored: UnsafeRawBufferPointer(rebasing: raw[frame.payload]),
            salt: 0x0102_0304, seal: FrameSeal(cipher: cipher, base: 0), to: &sealed)
        offset = frame.end
    }
    sealed.withUnsafeBytes { image in
        var at = 0
        var i = 0
        while case .frame(let frame) = Frame.parse(image, at: at, salt: 0x0102_0304) {
            precondition(
                Frame.decode(image, frame, cipher: cipher, position: at) == plain[i],
                "a sealed frame reads back otherwise")
            at = frame.end
            i += 1
        }
        precondition(i == plain.count, "a sealed frame does not parse")
    }
    // One byte changed in each frame's sealed payload, its checksum fixed: never decoded.
    var at = 0
    while at < sealed.count {
        guard case .frame(let frame) = sealed.withUnsafeBytes({ Frame.parse($0, at: at, salt: 0x0102_0304) }) else {
            break
        }
        var changed = sealed
        changed[frame.payload.lowerBound + (frame.payload.count / 2)] ^= 0x10
        let crc = changed.withUnsafeBytes { image in
            Frame.checksum(
                salt: 0x0102_0304, headerTail: UnsafeRawBufferPointer(rebasing: image[(at + 4)..<(at + 12)]),
                payload: UnsafeRawBufferPointer(rebasing: image[frame.payload]))
        }
        withUnsafeBytes(of: crc.littleEndian) { for k in 0..<4 { changed[at + k] = $0[k] } }
        changed.withUnsafeBytes { image in
            guard case .frame(let again) = Frame.parse(image, at: at, salt: 0x0102_0304) else {
                preconditionFailure("a frame with its checksum fixed does not parse")
            }
            precondition(
                Frame.decode(image, again, cipher: cipher, position: at) == nil, "a changed sealed frame decodes")
            _ = Recovery.commitRecords(in: image, after: 0, salt: 0x0102_0304, cipher: cipher)
        }
        at = frame.end
    }
}
