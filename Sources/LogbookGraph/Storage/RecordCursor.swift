import LogbookEngine

/// A walk over the values of one stored record (the format of `RecordCodec`): the header is
/// checked once, then each slot in order is present or not, and a present one is read or
/// skipped where the cursor stands. Every reader of record bytes walks through it: decoding a
/// record or one of its values, splicing a batch update's values in, and the filters a fetch
/// runs on stored bytes.
///
/// ```swift
/// var cursor = try RecordCursor(raw, slotCount: kinds.count)
/// for i in 0..<target where cursor.isPresent(i) { try cursor.skip(width: widths[i]) }
/// let start = cursor.offset      // where slot `target`'s value begins
/// ```
///
/// Bounds are checked at every step: a malformed record throws `RecordCodec.Malformed`, never
/// reads outside `raw`.
struct RecordCursor {
    /// The record's bytes.
    let raw: UnsafeRawBufferPointer
    /// Where the next value to read starts.
    var offset: Int

    /// Checks the header of a record of `slotCount` slots (its format byte and bitmap) and
    /// stands before its first value.
    ///
    /// `formatChecked`: the format byte was checked before, and `raw[0]` is not it (a record
    /// packed in a `RecordArena`, whose first byte is the last of the record before).
    @inline(__always)
    init(_ raw: UnsafeRawBufferPointer, slotCount: Int, formatChecked: Bool = false) throws {
        let valuesStart = RecordCursor.valuesStart(slotCount: slotCount)
        guard raw.count >= valuesStart, formatChecked || raw[0] == RecordCodec.format else {
            throw RecordCodec.Malformed()
        }
        self.raw = raw
        self.offset = valuesStart
    }

    /// Where the values of a record of `slotCount` slots start: after the format byte and the
    /// bitmap of present slots.
    @inline(__always)
    static func valuesStart(slotCount: Int) -> Int { 1 + (slotCount + 7) / 8 }

    /// Whether slot `i` holds a value (its bit in the bitmap).
    @inline(__always)
    func isPresent(_ i: Int) -> Bool { raw[1 + i >> 3] & UInt8(1 << (i & 7)) != 0 }

    /// The stored width of a kind of value: bytes for fixed-size values, 0 for length-prefixed
    /// ones, -1 for varints. (The filters keep these in a table of their own.)
    @inline(__always)
    static func width(_ kind: EntityLayout.SlotKind) -> Int8 {
        switch kind {
        case .string, .data, .url, .decimal: 0
        case .int, .object, .anyObject: -1
        case .double: 8
        case .float: 4
        case .bool: 1
        case .uuid: 16
        }
    }

    /// Moves past one present value of `kind`.
    @inline(__always)
    mutating func skip(_ kind: EntityLayout.SlotKind) throws { try skip(width: RecordCursor.width(kind)) }

    /// Moves past one present value of the given width (see `width(_:)`).
    @inline(__always)
    mutating func skip(width: Int8) throws {
        if width > 0 {
            offset += Int(width)
        } else if width == 0 {
            // A length (one byte for the short values of most records), then the bytes.
            let length: Int
            if offset < raw.count && raw[offset] < 0x80 {
                length = Int(raw[offset])
                offset += 1
            } else {
                length = try RecordCodec.length(raw, &offset)
            }
            guard length <= raw.count - offset else { throw RecordCodec.Malformed() }
            offset += length
        } else {
            _ = try RecordCodec.varint(raw, &offset)
        }
        guard offset <= raw.count else { throw RecordCodec.Malformed() }
    }

    /// Moves to the value of slot `target` (which must be present), skipping the present
    /// values before it; the cursor must stand at the start of the values.
    @inline(__always)
    mutating func skip(to target: Int, widths: UnsafeMutableBufferPointer<Int8>) throws {
        for i in 0..<target where isPresent(i) { try skip(width: widths[i]) }
    }

    /// Reads the present value of `kind` where the cursor stands, and moves past it.
    @inline(__always)
    mutating func value(_ kind: EntityLayout.SlotKind, destinationKeyspace: () -> UInt16) throws -> FieldValue {
        try RecordCodec.value(kind, raw, &offset, destinationKeyspace: destinationKeyspace)
    }
}
