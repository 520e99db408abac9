// The record codec: a managed object's record, decoded with the layout of an entity that has
// an attribute of every type and a to-one relationship, then encoded again.
import Foundation
import FuzzDriver
import FuzzModel

@testable import LogbookGraph

let layout: EntityLayout = try! everythingModel().layouts[0]

/// Filters compiled for the layout, run on every input: a damaged record must throw, never
/// trap, and a record that decodes must be judged without an error.
let filters: [RecordFilter] = [
    "string CONTAINS 'ab' AND int32 > 5", "string LIKE 'a*b?c' OR double <= 2.5", "bool == YES AND date != nil",
    "NOT (int16 IN {1, 2, 3}) AND float BETWEEN {0, 1}", "string BEGINSWITH[c] 'é' OR int64 == 7",
    "other == nil OR string == 'x'", "data == nil AND uuid != nil AND url != nil AND decimal != nil",
    "string MATCHES 'a.*' OR string ENDSWITH 'z'"
].map { format in
    let p = try! FetchPredicate(format: format)
    return RecordFilter.compile([p.node], layout: layout, format: format, destinationKeyspace: { _ in 1 }).filter!
}

@_cdecl("FuzzRecordCodec_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    logbook_run_fuzzer(argc, argv) { data, size in fuzz(data!, size) }
}

func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let raw = UnsafeRawBufferPointer(start: data, count: size)
    let decodes = (try? RecordCodec.decode(raw, layout: layout, destinationKeyspace: { _ in 1 })) != nil
    for filter in filters {
        let judged = filter.withScratch { scratch in (try? filter.matches(raw, scratch: scratch)) != nil }
        precondition(judged || !decodes, "a record that decodes is refused by a filter")
    }
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
