// The checkpoint decoder: a (decompressed) checkpoint stream.
import FuzzDriver

@testable import LogbookEngine

@_cdecl("FuzzCheckpoint_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    logbook_run_fuzzer(argc, argv) { data, size in fuzz(data!, size) }
}

func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let stream = Array(UnsafeBufferPointer(start: data, count: size))
    let eager = try? Checkpoint.decode(stream)
    // An open defers the secondary indexes once their section passes a check; building them
    // later must then succeed (it traps otherwise) and give what an eager decode gives.
    let deferred = try? Checkpoint.decode(stream) { _ in stream }
    precondition(
        (eager == nil) == (deferred == nil),
        "the deferred decode accepts what the eager one does not, or not what it does")
    if let eager, let deferred {
        precondition(eager.state.indexes.keys.sorted() == deferred.state.indexes.keys.sorted())
        for (id, index) in eager.state.indexes { precondition(deferred.state.indexes[id]!.count == index.count) }
    }
    return 0
}
