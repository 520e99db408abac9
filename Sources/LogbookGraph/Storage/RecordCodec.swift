import Foundation
import LogbookEngine

/// The bytes of the records one fetch read, which its objects decode from on first use
/// (Core Data's row cache, per fetch): immutable once made.
///
/// Two forms: the records with a span for each (a scan's matches, `spans` not empty; an
/// object's index is its record's number), or the records packed one after another
/// (`spans` empty), each without its format byte, checked as it was packed
/// (`RecordArena.pack`): the arena's first byte is the format byte, and an object's index is
/// the offset of the byte before its record's bitmap, which a read takes for the format byte
/// it does not check again. A packed record has no length: it is read from its first byte
/// until its values end (the bitmap and the entity's slots say where), and the records after
/// it are never read as its own. The second form costs a record nothing where a span costs
/// eight and a length and a format byte two: a direct fetch of many objects makes its arenas
/// so, a chunk of records each (see `ManagedObjectContext.streamedFaults`; 20 MB less at
/// ten million objects).
// @unchecked: immutable once made; shared by the fetch's objects, only read.
final class RecordArena: @unchecked Sendable {
    // @unchecked: never mutated after init.
    let bytes: [UInt8]
    /// Each record's place in `bytes`, or empty when the records are packed.
    let spans: [(offset: UInt32, count: UInt32)]
    /// The store version the records were read at.
    let version: UInt64

    init(_ bytes: [UInt8], spans: [(offset: UInt32, count: UInt32)], version: UInt64) {
        self.bytes = bytes
        self.spans = spans
        self.version = version
    }

    /// Records packed by `pack(_:into:)` into `bytes` (which `startPacking` began).
    init(packed bytes: [UInt8], version: UInt64) {
        self.bytes = bytes
        self.spans = []
        self.version = version
    }

    /// Begins the bytes of a packed arena.
    static func startPacking(_ bytes: inout [UInt8]) {
        bytes.removeAll(keepingCapacity: true)
        bytes.append(RecordCodec.format)
    }

    /// Packs a stored record after the others (its format byte checked and left out); returns
    /// its index, or throws `RecordCodec.Malformed` for a record of another format.
    static func pack(_ record: UnsafeRawBufferPointer, into bytes: inout [UInt8]) throws -> Int {
        guard let format = record.first, format == RecordCodec.format else { throw RecordCodec.Malformed() }
        let index = bytes.count - 1
        bytes.append(contentsOf: UnsafeRawBufferPointer(rebasing: record[1...]))
        return index
    }

    /// One attribute of record `index` (nil when the record is malformed).
    func slot(_ slot: Int, index: UInt32, layout: EntityLayout) -> FieldValue? {
        withRecord(index) { record, checked in
            layout.slotKinds.withUnsafeBufferPointer { kinds in
                try? RecordCodec.decodeSlot(record, slot, kinds: kinds, formatChecked: checked)
            }
        }
    }

    /// The whole of record `index`.
    func slots(index: UInt32, layout: EntityLayout, destinationKeyspace: (Int) -> UInt16) throws -> [FieldValue] {
        try withRecord(index) { record, checked in
            try RecordCodec.decode(
                record, layout: layout, formatChecked: checked, destinationKeyspace: destinationKeyspace)
        }
    }

    /// Calls `body` with the bytes of record `index` and whether its format was checked as it
    /// was packed (then the bytes run to the arena's end).
    @inline(__always)
    private func withRecord<R>(_ index: UInt32, _ body: (UnsafeRawBufferPointer, Bool) throws -> R) rethrows -> R {
        try bytes.withUnsafeBytes { all in
            guard !spans.isEmpty else {
                let start = min(Int(index), all.count)
                return try body(UnsafeRawBufferPointer(rebasing: all[start...]), true)
            }
            let span = spans[Int(index)]
            let start = Int(span.offset)
            let end = Int(span.count) <= all.count - start ? start + Int(span.count) : all.count
            return try body(UnsafeRawBufferPointer(rebasing: all[start..<end]), false)
        }
    }
}

/// The binary record of a managed object: a format byte, a bitmap of the slots that hold a
/// value, then each value: strings and data as length-prefixed bytes, integers as zigzag
/// varints, doubles and dates as 8 bytes, floats as 4, booleans as 1, UUIDs as 16, decimals as
/// their decimal string, to-one relationships as the destination's serial number (or, when the
/// destination entity has sub-entities, as a varint of `serial << 16 | keyspace`).
enum RecordCodec {
    static let format: UInt8 = 1

    static func encode(_ slots: [FieldValue], layout: EntityLayout, into out: inout [UInt8]) {
        out.removeAll(keepingCapacity: true)
        out.append(format)
        let n = slots.count
        let bitmapStart = out.count
        out.append(contentsOf: repeatElement(0, count: (n + 7) / 8))
        for i in 0..<n {
            let slot = slots[i]
            if slot.isNull { continue }
            out[bitmapStart + i / 8] |= UInt8(1 << (i % 8))
            appendValue(slot, at: i, layout: layout, to: &out)
        }
    }

    /// Appends the stored form of one non-null value (slot `i` of `layout`'s records).
    static func appendValue(_ slot: FieldValue, at i: Int, layout: EntityLayout, to out: inout [UInt8]) {
        switch slot {
        case .null: break
        case .string(var s):
            s.withUTF8 { u in
                appendVarint(UInt64(u.count), &out)
                out.append(contentsOf: u)
            }
        case .int(let v): appendVarint(UInt64(bitPattern: (v << 1) ^ (v >> 63)), &out)
        case .double(let d):
            if layout.slotKinds[i] == .float {
                appendLE(Float(d).bitPattern, &out)
            } else {
                appendLE(d.bitPattern, &out)
            }
        case .bool(let b): out.append(b ? 1 : 0)
        case .data(let d):
            appendVarint(UInt64(d.count), &out)
            out.append(contentsOf: d)
        case .boxed(let b):
            switch b.value {
            case .uuid(let u): withUnsafeBytes(of: u.uuid) { out.append(contentsOf: $0) }
            case .url(let u):
                let s = Array(u.absoluteString.utf8)
                appendVarint(UInt64(s.count), &out)
                out.append(contentsOf: s)
            case .decimal(let d):
                let s = Array(d.description.utf8)
                appendVarint(UInt64(s.count), &out)
                out.append(contentsOf: s)
            }
        case .object(let key): appendVarint(objectCode(key, layout.slotKinds[i]), &out)
        }
    }

    /// How a to-one value is written: the serial, or serial and keyspace for a destination
    /// with sub-entities (whose objects live in several keyspaces).
    @inline(__always)
    static func objectCode(_ key: UInt64, _ kind: EntityLayout.SlotKind) -> UInt64 {
        let k = EngineKey(rawValue: key)
        return kind == .anyObject ? k.id << 16 | UInt64(k.keyspace) : k.id
    }

    /// The size `write` needs, or nil when a slot has a form `write` does not handle (boxed values).
    static func encodedSize(_ slots: [FieldValue], layout: EntityLayout) -> Int? {
        var size = 1 + (slots.count + 7) / 8
        // The slot kinds, not the attributes' types: a type is an enum with a payload, and
        // comparing one retained and released it for every value.
        let kinds = layout.slotKinds
        for i in slots.indices {
            switch slots[i] {
            case .null: break
            case .string(let s):
                let n = s.utf8.count
                size += varintSize(UInt64(n)) + n
            case .int(let v): size += varintSize(UInt64(bitPattern: (v << 1) ^ (v >> 63)))
            case .double: size += kinds[i] == .float ? 4 : 8
            case .bool: size += 1
            case .data(let d): size += varintSize(UInt64(d.count)) + d.count
            case .boxed: return nil
            case .object(let k): size += varintSize(objectCode(k, kinds[i]))
            }
        }
        return size
    }

    /// Writes the record into exactly `encodedSize` bytes (same layout as `encode`).
    static func write(_ slots: [FieldValue], layout: EntityLayout, to out: UnsafeMutableRawBufferPointer) {
        let p = out.baseAddress!
        p.storeBytes(of: format, as: UInt8.self)
        let bitmapBytes = (slots.count + 7) / 8
        for b in 0..<bitmapBytes { p.storeBytes(of: 0, toByteOffset: 1 + b, as: UInt8.self) }
        var o = 1 + bitmapBytes
        let kinds = layout.slotKinds
        func varint(_ value: UInt64) {
            var v = value
            while v >= 0x80 {
                p.storeBytes(of: UInt8(truncatingIfNeeded: v) | 0x80, toByteOffset: o, as: UInt8.self)
                v >>= 7
                o += 1
            }
            p.storeBytes(of: UInt8(v), toByteOffset: o, as: UInt8.self)
            o += 1
        }
        for i in slots.indices {
            let slot = slots[i]
            if slot.isNull { continue }
            let bit = p.load(fromByteOffset: 1 + i / 8, as: UInt8.self) | UInt8(1 << (i % 8))
            p.storeBytes(of: bit, toByteOffset: 1 + i / 8, as: UInt8.self)
            switch slot {
            case .null, .boxed: break
            case .string(var s):
                s.withUTF8 { u in
                    varint(UInt64(u.count))
                    if u.count > 0 { (p + o).copyMemory(from: u.baseAddress!, byteCount: u.count) }
                    o += u.count
                }
            case .int(let v): varint(UInt64(bitPattern: (v << 1) ^ (v >> 63)))
            case .double(let d):
                if kinds[i] == .float {
                    p.storeBytes(of: Float(d).bitPattern.littleEndian, toByteOffset: o, as: UInt32.self)
                    o += 4
                } else {
                    p.storeBytes(of: d.bitPattern.littleEndian, toByteOffset: o, as: UInt64.self)
                    o += 8
                }
            case .bool(let b):
                p.storeBytes(of: b ? 1 : 0, toByteOffset: o, as: UInt8.self)
                o += 1
            case .data(let d):
                varint(UInt64(d.count))
                d.withUnsafeBytes { if $0.count > 0 { (p + o).copyMemory(from: $0.baseAddress!, byteCount: $0.count) } }
                o += d.count
            case .object(let k): varint(objectCode(k, kinds[i]))
            }
        }
    }

    @inline(__always)
    static func varintSize(_ value: UInt64) -> Int {
        let bits = 64 - value.leadingZeroBitCount
        return bits == 0 ? 1 : (bits + 6) / 7
    }

    struct Malformed: Error {}

    /// Runs `body`, which reads records of `layout`, turning what it throws into the errors
    /// users see: a malformed record is a `.store` error naming the entity, engine errors are
    /// wrapped, Logbook errors pass.
    static func readingRecords<R>(of layout: EntityLayout, _ body: () throws -> R) throws -> R {
        do {
            return try body()
        } catch is Malformed {
            throw LogbookError(.store, "a record of \(layout.name) is malformed", entity: layout.name)
        } catch let e as LogbookError {
            throw e
        } catch {
            throw LogbookError.wrap(error)
        }
    }

    /// Decodes a record; `destinationKeyspace` gives the keyspace of each to-one slot.
    /// `formatChecked`: see `RecordCursor.init(_:slotCount:formatChecked:)`.
    static func decode(
        _ raw: UnsafeRawBufferPointer, layout: EntityLayout, formatChecked: Bool = false,
        destinationKeyspace: (Int) -> UInt16
    ) throws -> [FieldValue] {
        try layout.slotKinds.withUnsafeBufferPointer { kinds in
            try decode(raw, kinds: kinds, formatChecked: formatChecked, destinationKeyspace: destinationKeyspace)
        }
    }

    /// The same with the slot kinds given (a loop over many records takes them once).
    @inline(__always)
    static func decode(
        _ raw: UnsafeRawBufferPointer, kinds: UnsafeBufferPointer<EntityLayout.SlotKind>, formatChecked: Bool = false,
        destinationKeyspace: (Int) -> UInt16
    ) throws -> [FieldValue] {
        let n = kinds.count
        var cursor = try RecordCursor(raw, slotCount: n, formatChecked: formatChecked)
        var result = [FieldValue](repeating: .null, count: n)
        try result.withUnsafeMutableBufferPointer { slots in
            for i in 0..<n where cursor.isPresent(i) {
                slots[i] = try cursor.value(kinds[i]) { destinationKeyspace(i) }
            }
        }
        return result
    }

    /// One attribute's value from a record, without decoding the others.
    static func decodeSlot(
        _ raw: UnsafeRawBufferPointer, _ target: Int, kinds: UnsafeBufferPointer<EntityLayout.SlotKind>,
        formatChecked: Bool = false
    ) throws -> FieldValue {
        guard target < kinds.count else { throw Malformed() }
        var cursor = try RecordCursor(raw, slotCount: kinds.count, formatChecked: formatChecked)
        guard cursor.isPresent(target) else { return .null }
        // Skip the values present before the target.
        for i in 0..<target where cursor.isPresent(i) { try cursor.skip(kinds[i]) }
        return try cursor.value(kinds[target]) { 0 }
    }

    /// A record with some values replaced, made from the stored bytes without decoding the
    /// others (a batch update's constant values). `changes` are sorted by slot; each value is
    /// nil (no value) or its stored form (`appendValue`). `buffer` is grown as needed and
    /// reused from record to record; `body` is given the spliced record in it, unless the
    /// changes leave the record byte for byte as it was: then `body` is not called and the
    /// result is nil.
    static func splice<R>(
        _ raw: UnsafeRawBufferPointer, kinds: UnsafeBufferPointer<EntityLayout.SlotKind>,
        changes: [(slot: Int, stored: [UInt8]?)], buffer: inout [UInt8],
        _ body: (UnsafeRawBufferPointer) throws -> R
    ) throws -> R? {
        let capacity = raw.count + spliceGrowth(changes)
        if buffer.count < capacity { buffer = [UInt8](repeating: 0, count: max(capacity, 2 * buffer.count)) }
        return try buffer.withUnsafeMutableBytes { out in
            guard let count = try splice(raw, kinds: kinds, changes: changes, to: out) else { return nil }
            return try body(UnsafeRawBufferPointer(rebasing: out[0..<count]))
        }
    }

    /// The most bytes `changes` can add to a record: every new value's.
    static func spliceGrowth(_ changes: [(slot: Int, stored: [UInt8]?)]) -> Int {
        changes.reduce(0) { $0 + ($1.stored?.count ?? 0) }
    }

    /// Copies `bytes[range]` to `out` at `w`, which moves past them (a function, not a local
    /// closure: one that captures `w` checks its exclusive access at every call).
    @inline(__always)
    private static func spliceCopy(
        _ bytes: UnsafeRawBufferPointer, _ range: Range<Int>, to out: UnsafeMutableRawBufferPointer, at w: inout Int
    ) {
        guard !range.isEmpty else { return }
        (out.baseAddress! + w).copyMemory(from: bytes.baseAddress! + range.lowerBound, byteCount: range.count)
        w += range.count
    }

    /// `splice` into `out`, which holds the record and `spliceGrowth(changes)` bytes more;
    /// returns the bytes written, or nil when the changes leave the record as it was (each
    /// changed slot already held that value, byte for byte, or no value where none is set).
    static func splice(
        _ raw: UnsafeRawBufferPointer, kinds: UnsafeBufferPointer<EntityLayout.SlotKind>,
        changes: [(slot: Int, stored: [UInt8]?)], to out: UnsafeMutableRawBufferPointer
    ) throws -> Int? {
        let n = kinds.count
        var cursor = try RecordCursor(raw, slotCount: n)
        var w = 0
        spliceCopy(raw, 0..<cursor.offset, to: out, at: &w)
        var next = 0
        var changedAny = false
        // Runs of unchanged values are copied whole.
        var runStart = cursor.offset
        for i in 0..<n {
            let present = cursor.isPresent(i)
            let changed = next < changes.count && changes[next].slot == i
            if !changed {
                if present { try cursor.skip(kinds[i]) }
                continue
            }
            spliceCopy(raw, runStart..<cursor.offset, to: out, at: &w)
            let old = cursor.offset
            if present { try cursor.skip(kinds[i]) }
            let o = cursor.offset
            runStart = o
            if let stored = changes[next].stored {
                out[1 + i / 8] |= UInt8(1 << (i % 8))
                stored.withUnsafeBytes {
                    if !changedAny {
                        changedAny =
                            !present || o - old != $0.count
                            || memcmp(raw.baseAddress! + old, $0.baseAddress!, $0.count) != 0
                    }
                    spliceCopy($0, $0.indices, to: out, at: &w)
                }
            } else {
                out[1 + i / 8] &= ~UInt8(1 << (i % 8))
                if present { changedAny = true }
            }
            next += 1
        }
        guard changedAny else { return nil }
        spliceCopy(raw, runStart..<cursor.offset, to: out, at: &w)
        return w
    }

    @inline(__always)
    static func varint(_ raw: UnsafeRawBufferPointer, _ o: inout Int) throws -> UInt64 {
        var result: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            guard o < raw.count, shift < 64 else { throw Malformed() }
            let b = raw[o]
            o += 1
            result |= UInt64(b & 0x7F) << shift
            if b < 0x80 { return result }
            shift += 7
        }
    }

    /// A length: a varint that must fit in `Int` (a larger one is damage, not a trap).
    @inline(__always)
    static func length(_ raw: UnsafeRawBufferPointer, _ o: inout Int) throws -> Int {
        guard let count = Int(exactly: try varint(raw, &o)) else { throw Malformed() }
        return count
    }

    /// The value of one present slot at `o`, which moves past it.
    @inline(__always)
    static func value(
        _ kind: EntityLayout.SlotKind, _ raw: UnsafeRawBufferPointer, _ o: inout Int,
        destinationKeyspace: () -> UInt16
    ) throws -> FieldValue {
        func bytes(_ count: Int) throws -> UnsafeRawBufferPointer {
            guard count >= 0, count <= raw.count - o else { throw Malformed() }
            defer { o += count }
            return UnsafeRawBufferPointer(rebasing: raw[o..<(o + count)])
        }
        switch kind {
        case .object:
            let serial = try varint(raw, &o)
            guard serial <= EngineKey.maxID else { throw Malformed() }
            return .object(EngineKey(keyspace: destinationKeyspace(), id: serial).rawValue)
        case .anyObject:
            let code = try varint(raw, &o)
            return .object(EngineKey(keyspace: UInt16(truncatingIfNeeded: code), id: code >> 16).rawValue)
        case .string:
            let b = try bytes(try length(raw, &o))
            return .string(String(decoding: b, as: UTF8.self))
        case .int:
            let z = try varint(raw, &o)
            return .int(Int64(bitPattern: z >> 1) ^ -Int64(bitPattern: z & 1))
        case .double:
            let b = try bytes(8)
            return .double(Double(bitPattern: b.loadUnaligned(as: UInt64.self).littleEndian))
        case .float:
            let b = try bytes(4)
            return .double(Double(Float(bitPattern: b.loadUnaligned(as: UInt32.self).littleEndian)))
        case .bool:
            return .bool(try bytes(1)[0] != 0)
        case .data:
            return .data(Data(try bytes(try length(raw, &o))))
        case .uuid:
            let b = try bytes(16)
            var u: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
            withUnsafeMutableBytes(of: &u) { $0.copyMemory(from: b) }
            return .boxed(.init(.uuid(UUID(uuid: u))))
        case .url:
            let s = String(decoding: try bytes(try length(raw, &o)), as: UTF8.self)
            guard let u = URL(string: s) else { throw Malformed() }
            return .boxed(.init(.url(u)))
        case .decimal:
            let s = String(decoding: try bytes(try length(raw, &o)), as: UTF8.self)
            guard let d = Decimal(string: s, locale: Locale(identifier: "en_US_POSIX")) else { throw Malformed() }
            return .boxed(.init(.decimal(d)))
        }
    }

    /// The ordered index key of a slot: 0x00 for no value, else 0x01 and bytes that sort like
    /// the value (integers and floating point as 8 big-endian bytes, strings as UTF-8).
    static func indexKey(_ slot: FieldValue, type: AttributeType, index: IndexID) -> IndexKey {
        switch slot {
        case .null: return IndexKey(index: index, bytes: [0])
        case .int(let v): return IndexKey(index: index, tag: 1, orderedInt64: v)
        case .double(let d): return IndexKey(index: index, tag: 1, orderedDouble: d)
        case .bool(let b): return IndexKey(index: index, bytes: [1, b ? 1 : 0])
        case .string(let s):
            var bytes: [UInt8] = [1]
            bytes.append(contentsOf: s.utf8.prefix(JournalFormat.maxIndexKeyLength - 1))
            return IndexKey(index: index, bytes: bytes)
        case .boxed(let b):
            switch b.value {
            case .uuid(let u): return IndexKey(index: index, bytes: [1] + withUnsafeBytes(of: u.uuid) { Array($0) })
            case .url(let u):
                return IndexKey(
                    index: index, bytes: [1] + Array(u.absoluteString.utf8.prefix(JournalFormat.maxIndexKeyLength - 1)))
            case .decimal(let d):
                return IndexKey(index: index, tag: 1, orderedDouble: NSDecimalNumber(decimal: d).doubleValue)
            }
        case .data(let d):
            return IndexKey(index: index, bytes: [1] + Array(d.prefix(JournalFormat.maxIndexKeyLength - 1)))
        case .object(let k): return IndexKey(index: index, tag: 1, orderedUInt64: k)
        }
    }

    @inline(__always)
    static func appendVarint(_ value: UInt64, _ out: inout [UInt8]) {
        var v = value
        while v >= 0x80 {
            out.append(UInt8(truncatingIfNeeded: v) | 0x80)
            v >>= 7
        }
        out.append(UInt8(v))
    }

    @inline(__always)
    static func appendLE<T: FixedWidthInteger>(_ value: T, _ out: inout [UInt8]) {
        var v = value.littleEndian
        for _ in 0..<MemoryLayout<T>.size {
            out.append(UInt8(truncatingIfNeeded: v))
            v >>= 8
        }
    }
}
