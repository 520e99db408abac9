import Foundation
// The predicate parser: any text as a format string, with a few arguments for its `%@`s.
import FuzzDriver
import LogbookGraph

@_cdecl("FuzzPredicate_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    logbook_run_fuzzer(argc, argv) { data, size in fuzz(data!, size) }
}

func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let format = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    if let predicate = try? FetchPredicate(format: format, "text", 42, 2.5, Date(timeIntervalSince1970: 0), ["a", "b"])
    {
        _ = predicate.description
    }
    return 0
}
