// The manifest decoder, and the file header decoder of segments and checkpoints.
import FuzzDriver

@testable import LogbookEngine

@_cdecl("FuzzManifest_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    logbook_run_fuzzer(argc, argv) { data, size in fuzz(data!, size) }
}

func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    _ = try? Manifest.decode(bytes, path: "MANIFEST")
    _ = FileHeader.decode(bytes, magic: JournalFormat.segmentMagic)
    return 0
}
