// The record codec: a managed object's record, decoded with the layout of an entity that has
// an attribute of every type and a to-one relationship, then encoded again.
import Foundation
import FuzzDriver
import FuzzModel
@testable import Logbook

let layout: EntityLayout = try! everythingModel().layouts[0]

@_cdecl("FuzzRecordCodec_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    logbook_run_fuzzer(argc, argv) { data, size in fuzz(data!, size) }
}

func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let raw = UnsafeRawBufferPointer(start: data, count: size)
    if let slots = try? RecordCodec.decode(raw, layout: layout, destinationKeyspace: { _ in 1 }) {
        var out: [UInt8] = []
        RecordCodec.encode(slots, layout: layout, into: &out)
        // What decodes must encode to a record that decodes and encodes to the same bytes
        // (bytes, not values: a NaN is not equal to itself).
        guard
            let again = out.withUnsafeBytes({
                try? RecordCodec.decode($0, layout: layout, destinationKeyspace: { _ in 1 })
            })
        else { preconditionFailure("a record the codec wrote does not decode") }
        var twice: [UInt8] = []
        RecordCodec.encode(again, layout: layout, into: &twice)
        precondition(twice == out, "a record does not survive a round trip")
    }
    return 0
}
