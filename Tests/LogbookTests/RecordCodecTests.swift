import Foundation
import LogbookEngine
import Testing

@testable import LogbookGraph

/// Records that do not decode are errors, never traps: inputs the fuzzer found.
@Suite struct RecordCodecTests {
    func layout() throws -> EntityLayout {
        let model = try ManagedObjectModel {
            EntityDescription("Note") {
                AttributeDescription("title", .string, optional: true)
                AttributeDescription("body", .data, optional: true)
                RelationshipDescription("next", to: "Note", inverse: "previous")
                RelationshipDescription("previous", to: "Note", inverse: "next")
            }
        }
        return model.layouts[0]
    }

    /// A string whose length varint does not fit in `Int` used to trap converting it.
    @Test func aLengthPastIntMaxIsMalformedNotATrap() throws {
        let layout = try layout()
        // Presence bits, then a length of 2^64 - 1.
        let record: [UInt8] = [0x01] + [UInt8](repeating: 0xFF, count: 9) + [0x01]
        #expect(throws: (any Error).self) {
            try record.withUnsafeBytes { try RecordCodec.decode($0, layout: layout, destinationKeyspace: { _ in 1 }) }
        }
    }

    /// A to-one relationship's serial past 48 bits used to trap building its key.
    @Test func aSerialPast48BitsIsMalformedNotATrap() throws {
        let layout = try layout()
        var slots = layout.defaultSlots
        slots[layout.attributeCount] = .object(EngineKey(keyspace: 1, id: 5).rawValue)
        var record: [UInt8] = []
        RecordCodec.encode(slots, layout: layout, into: &record)
        // The serial is the record's last varint: make it 2^56.
        record.removeLast()
        record += [0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01]
        #expect(throws: (any Error).self) {
            try record.withUnsafeBytes { try RecordCodec.decode($0, layout: layout, destinationKeyspace: { _ in 1 }) }
        }
    }
}
