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
    return 0
}
