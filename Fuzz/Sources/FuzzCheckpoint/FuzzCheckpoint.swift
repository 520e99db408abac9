// The checkpoint decoder: a (decompressed) checkpoint stream.
import FuzzDriver

@testable import LogbookEngine

@_cdecl("FuzzCheckpoint_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    logbook_run_fuzzer(argc, argv) { data, size in fuzz(data!, size) }
}

func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    _ = try? Checkpoint.decode(Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}
