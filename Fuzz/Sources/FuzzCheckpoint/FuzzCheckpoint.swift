// The checkpoint decoder: a (decompressed) checkpoint stream.
import FuzzDriver

@testable import LogbookEngine

@_cdecl("FuzzCheckpoint_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    logbook_run_fuzzer(argc, argv) { data, size in fuzz(data!, size) }
}

func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let stream = Array(UnsafeBufferPointer(start: data, count: size))
    // Both layouts of the primary section: files of version 3 (whole leaves named; none
    // here, where no file holds them) and of versions 1 and 2 (every key in the stream).
    for form in [Checkpoint.PrimaryForm.leaves, .entries] {
        func decode(deferring: Bool) -> Checkpoint.Loaded? {
            let bytes = stream
            let again: @Sendable (Range<Int>) -> [UInt8] = { _ in bytes }
            return bytes.withUnsafeBytes { raw -> Checkpoint.Loaded? in
                do { return try Checkpoint.decode(raw, form: form, stream: deferring ? again : nil) } catch {
                    return nil
                }
            }
        }
        let eager = decode(deferring: false)
        // An open defers the secondary indexes once their section passes a check; building
        // them later must then succeed (it traps otherwise) and give what an eager decode gives.
        let deferred = decode(deferring: true)
        precondition(
            (eager == nil) == (deferred == nil),
            "the deferred decode accepts what the eager one does not, or not what it does")
        if let eager, let deferred {
            precondition(eager.state.indexes.keys.sorted() == deferred.state.indexes.keys.sorted())
            for (id, index) in eager.state.indexes { precondition(deferred.state.indexes[id]!.count == index.count) }
        }
        // A version-3 open checks the secondary-index section after it returns, and takes the
        // indexes from the journal (here: none) when that check fails. What the eager decode
        // rejects, it must reject at open or replace; what the eager decode accepts, it must
        // accept as it is, with the same indexes.
        guard form == .leaves else { continue }
        let bytes = stream
        let later = try? Checkpoint.decode(stream, stream: { _ in bytes }, fallback: { _, _ in [:] }, atOnce: true)
        precondition(later != nil || eager == nil, "the later check rejects at open what the eager decode accepts")
        if let later {
            let problem = later.state.secondary.checkProblem()
            precondition((problem != nil) == (eager == nil), "the later check disagrees with the eager decode")
            if let eager, problem == nil {
                precondition(eager.state.indexes.keys.sorted() == later.state.indexes.keys.sorted())
                for (id, index) in eager.state.indexes { precondition(later.state.indexes[id]!.count == index.count) }
            }
        }
    }
    return 0
}
