import Foundation
import LogbookEngine

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A predicate compiled once per fetch into a test over one entity's encoded records: it
/// reads only the attributes the predicate names, straight from the record bytes, with no
/// `Any`, no dictionary and no object per record.
///
/// Not every predicate compiles: `compile` takes the top-level conditions that do (comparisons
/// of a stored attribute or to-one relationship with constants, `IN`, `BETWEEN`, `nil` tests,
/// and `AND`, `OR`, `NOT` of those) and leaves the rest (key paths through relationships,
/// aggregates, `SUBQUERY`, functions, two key paths) to be checked on objects, after the
/// compiled part has narrowed the records down.
///
/// Each compiled test gives exactly what `PredicateEvaluator` gives on the decoded object:
/// numbers compare as doubles, dates by their time interval, and strings as UTF-8 bytes when
/// both sides are plain ASCII without a carriage return (where byte order and equality are
/// Swift's `String` order and equality); any other string, and every `[c]`, `[d]` and `MATCHES`
/// comparison, is decoded and handed to the evaluator.
// @unchecked: immutable once compiled; the constants of fallback comparisons are the caller's
// predicate arguments, only read (as `FetchPredicate` holds them).
final class RecordFilter: @unchecked Sendable {
    /// The slot kinds of the entity's records.
    let kinds: [EntityLayout.SlotKind]
    /// The highest slot the test reads (its offset is found by skipping those before it).
    let maxSlot: Int
    let layout: EntityLayout
    let evaluator: PredicateEvaluator

    indirect enum Test {
        case constant(Bool)
        case not(Test)
        case and([Test])
        case or([Test])
        /// The slot holds no value.
        case isNull(Int)
        /// A number (integer, floating point or date) compared with a constant, as doubles.
        case number(Int, NumberKind, Comparison.Operator, Double)
        /// A number that is one of a set of constants.
        case numberIn(Int, NumberKind, Set<Double>)
        case bool(Int, Bool)
        /// A string test on UTF-8 bytes; `fallback` judges strings that are not plain ASCII.
        case string(Int, StringTest, fallback: Fallback)
        /// A to-one relationship whose destination key is (or is not, when the slot is empty)
        /// one of `keys`; `whenNull` is the result for no destination.
        case object(Int, Set<UInt64>, whenNull: Bool)
        /// A comparison judged by the evaluator on the decoded value.
        case generic(Fallback)
    }

    enum NumberKind { case int, double, float, date }

    enum StringTest {
        case equal([UInt8])
        case order(Comparison.Operator, [UInt8])
        case beginsWith([UInt8])
        case endsWith([UInt8])
        case contains([UInt8])
        case like([UInt8])
        case oneOf(Set<[UInt8]>)
    }

    /// A comparison of one slot with a constant, as the evaluator judges it.
    struct Fallback {
        var slot: Int
        var comparison: Comparison
        var constant: Any?
        /// True when the constant is the left side (`5 < age`).
        var constantFirst: Bool
        var type: AttributeType
    }

    /// The test as a flat program of plain values, in memory the filter owns (so that running
    /// it retains nothing).
    let program: UnsafeMutableBufferPointer<Instruction>
    /// Constant bytes of string tests, by offset.
    let pool: UnsafeMutableRawBufferPointer
    /// Sorted constants of `IN` tests: numbers and keys.
    let numbers: UnsafeMutableBufferPointer<Double>
    let keys: UnsafeMutableBufferPointer<UInt64>
    let kindsBuffer: UnsafeMutableBufferPointer<EntityLayout.SlotKind>
    /// Per slot, how `locate` steps over a value: its width in bytes when fixed, 0 for a
    /// length and bytes, -1 for a varint (a table read in place of a branch on the kind).
    let widths: UnsafeMutableBufferPointer<Int8>
    /// Comparisons judged by the evaluator, by index.
    let fallbacks: [Fallback]
    /// Whether the program is one leaf or an `AND` of leaves (run as a loop).
    let flatConjunction: Bool

    /// One step of the program. `end` is the index after the step's subtree (where an `AND`
    /// or `OR` jumps once it knows its result).
    struct Instruction {
        enum Code: UInt8 {
            case constant, not, and, or, isNull, number, numberIn, bool, string, object, generic
        }
        var code: Code
        var end: Int32 = 0
        var slot: Int32 = 0
        var op: Comparison.Operator = .equal
        var kind: NumberKind = .int
        var stringTest: StringTestCode = .equal
        /// A flag: the constant of `constant` and `bool`, `whenNull` of `object`.
        var flag = false
        var value: Double = 0
        /// Offset and count in `pool`, `numbers` or `keys`.
        var start: Int32 = 0
        var count: Int32 = 0
        /// Index in `fallbacks`, or -1.
        var fallback: Int32 = -1
    }

    enum StringTestCode: UInt8 { case equal, order, beginsWith, endsWith, contains, like, oneOf }

    private init(test: Test, layout: EntityLayout, maxSlot: Int, format: String) {
        self.layout = layout
        self.kinds = layout.slotKinds
        self.maxSlot = maxSlot
        self.evaluator = PredicateEvaluator(format: format)
        var lowering = Lowering()
        lowering.lower(test)
        func copy<T>(_ a: [T]) -> UnsafeMutableBufferPointer<T> {
            let b = UnsafeMutableBufferPointer<T>.allocate(capacity: max(1, a.count))
            _ = b.initialize(from: a)
            return UnsafeMutableBufferPointer(rebasing: b[0..<a.count])
        }
        program = copy(lowering.program)
        pool = UnsafeMutableRawBufferPointer(copy(lowering.pool))
        numbers = copy(lowering.numbers)
        keys = copy(lowering.keys)
        kindsBuffer = copy(layout.slotKinds)
        widths = copy(
            layout.slotKinds.map { kind -> Int8 in
                switch kind {
                case .string, .data, .url, .decimal: 0
                case .int, .object, .anyObject: -1
                case .double: 8
                case .float: 4
                case .bool: 1
                case .uuid: 16
                }
            })
        fallbacks = lowering.fallbacks
        // Leaves alone, or an AND whose parts are all leaves.
        let leaves: Set<Instruction.Code> = [.and, .or, .not]
        flatConjunction =
            (lowering.program.count == 1 && !leaves.contains(lowering.program[0].code))
            || (lowering.program.first?.code == .and
                && !lowering.program.dropFirst().contains { leaves.contains($0.code) })
    }

    deinit {
        program.baseAddress?.deallocate()
        pool.baseAddress?.deallocate()
        numbers.baseAddress?.deallocate()
        keys.baseAddress?.deallocate()
        kindsBuffer.baseAddress?.deallocate()
        widths.baseAddress?.deallocate()
    }

    /// Turns a test tree into the flat program.
    private struct Lowering {
        var program: [Instruction] = []
        var pool: [UInt8] = []
        var numbers: [Double] = []
        var keys: [UInt64] = []
        var fallbacks: [Fallback] = []

        mutating func bytes(_ b: [UInt8], into i: inout Instruction) {
            i.start = Int32(pool.count)
            i.count = Int32(b.count)
            pool.append(contentsOf: b)
        }

        mutating func lower(_ t: Test) {
            let at = program.count
            switch t {
            case .constant(let b): program.append(Instruction(code: .constant, flag: b))
            case .not(let inner):
                program.append(Instruction(code: .not))
                lower(inner)
            case .and(let parts), .or(let parts):
                if case .and = t {
                    program.append(Instruction(code: .and, count: Int32(parts.count)))
                } else {
                    program.append(Instruction(code: .or, count: Int32(parts.count)))
                }
                for p in parts { lower(p) }
            case .isNull(let slot): program.append(Instruction(code: .isNull, slot: Int32(slot)))
            case .number(let slot, let kind, let op, let value):
                program.append(Instruction(code: .number, slot: Int32(slot), op: op, kind: kind, value: value))
            case .numberIn(let slot, let kind, let set):
                let sorted = set.sorted()
                program.append(
                    Instruction(
                        code: .numberIn, slot: Int32(slot), kind: kind, start: Int32(numbers.count),
                        count: Int32(sorted.count)))
                numbers.append(contentsOf: sorted)
            case .bool(let slot, let b): program.append(Instruction(code: .bool, slot: Int32(slot), flag: b))
            case .string(let slot, let test, let fallback):
                var i = Instruction(code: .string, slot: Int32(slot), fallback: Int32(fallbacks.count))
                fallbacks.append(fallback)
                switch test {
                case .equal(let b):
                    i.stringTest = .equal
                    bytes(b, into: &i)
                case .order(let op, let b):
                    i.stringTest = .order
                    i.op = op
                    bytes(b, into: &i)
                case .beginsWith(let b):
                    i.stringTest = .beginsWith
                    bytes(b, into: &i)
                case .endsWith(let b):
                    i.stringTest = .endsWith
                    bytes(b, into: &i)
                case .contains(let b):
                    i.stringTest = .contains
                    bytes(b, into: &i)
                case .like(let b):
                    i.stringTest = .like
                    bytes(b, into: &i)
                case .oneOf(let set):
                    // Each member as a length byte pair and its bytes.
                    i.stringTest = .oneOf
                    i.start = Int32(pool.count)
                    for member in set.sorted(by: { $0.lexicographicallyPrecedes($1) }) {
                        let n = member.count
                        pool.append(contentsOf: [
                            UInt8(n >> 24 & 0xFF), UInt8(n >> 16 & 0xFF), UInt8(n >> 8 & 0xFF), UInt8(n & 0xFF)
                        ])
                        pool.append(contentsOf: member)
                    }
                    i.count = Int32(pool.count) - i.start
                }
                program.append(i)
            case .object(let slot, let set, let whenNull):
                let sorted = set.sorted()
                program.append(
                    Instruction(
                        code: .object, slot: Int32(slot), flag: whenNull, start: Int32(keys.count),
                        count: Int32(sorted.count)))
                keys.append(contentsOf: sorted)
            case .generic(let fallback):
                program.append(
                    Instruction(code: .generic, slot: Int32(fallback.slot), fallback: Int32(fallbacks.count)))
                fallbacks.append(fallback)
            }
            program[at].end = Int32(program.count)
        }
    }

    /// Compiles what it can of `conjuncts` (the top-level AND parts of a predicate): the filter
    /// for the parts that compile, and the parts left for objects.
    /// `destinationKeyspace` gives the keyspace of each to-one slot's destination.
    static func compile(
        _ conjuncts: [PredicateNode], layout: EntityLayout, format: String,
        destinationKeyspace: @escaping (Int) -> UInt16
    ) -> (filter: RecordFilter?, rest: [PredicateNode]) {
        var compiled: [Test] = []
        var rest: [PredicateNode] = []
        var compiler = Compiler(layout: layout, destinationKeyspace: destinationKeyspace)
        for c in conjuncts {
            if let t = compiler.compile(c) { compiled.append(t) } else { rest.append(c) }
        }
        guard !compiled.isEmpty else { return (nil, rest) }
        let test = compiled.count == 1 ? compiled[0] : .and(compiled)
        return (RecordFilter(test: test, layout: layout, maxSlot: compiler.maxSlot, format: format), rest)
    }

    // MARK: Evaluation

    /// Runs `body` with a scratch buffer for `matches` (an offset per slot), one per worker.
    func withScratch<R>(_ body: (UnsafeMutableBufferPointer<Int>) throws -> R) rethrows -> R {
        let scratch = UnsafeMutableBufferPointer<Int>.allocate(capacity: max(1, kinds.count))
        scratch.initialize(repeating: -1)
        defer { scratch.deallocate() }
        return try body(scratch)
    }

    /// Whether the record `raw` passes. Malformed records throw `RecordCodec.Malformed`.
    @inline(__always)
    func matches(_ raw: UnsafeRawBufferPointer, scratch offsets: UnsafeMutableBufferPointer<Int>) throws -> Bool {
        try locate(raw, offsets)
        return try runProgram(raw, offsets)
    }

    /// The entries of one block that pass, as their positions in `entries`, written to
    /// `selected` (which holds at least `entries.count`); returns how many. One call per
    /// block: the loop over its records runs here, with the program's state kept across
    /// records rather than set up again for each.
    func select(
        _ block: UnsafeRawBufferPointer, _ entries: UnsafeBufferPointer<Snapshot.ScanEntry>,
        scratch offsets: UnsafeMutableBufferPointer<Int>, into selected: UnsafeMutableBufferPointer<Int32>
    ) throws -> Int {
        var n = 0
        if flatConjunction && program.count == 1 && program[0].code == .bool {
            // One boolean test (`done == YES`), the commonest filter of all: read in place.
            let slot = Int(program[0].slot)
            let flag = program[0].flag
            for (j, e) in entries.enumerated() {
                let raw = UnsafeRawBufferPointer(rebasing: block[e.value])
                let o = try offset(of: slot, in: raw)
                if o >= 0 && (raw[o] != 0) == flag {
                    selected[n] = Int32(truncatingIfNeeded: j)
                    n += 1
                }
            }
            return n
        }
        if flatConjunction && program.count == 1 && program[0].code == .string {
            // One string test (`name CONTAINS 'x'`): straight to its value.
            let i = program[0]
            let constant = constant(of: i, in: UnsafeRawBufferPointer(self.pool))
            for (j, e) in entries.enumerated() {
                let raw = UnsafeRawBufferPointer(rebasing: block[e.value])
                if try string(i, raw, at: try offset(of: Int(i.slot), in: raw), constant) {
                    selected[n] = Int32(truncatingIfNeeded: j)
                    n += 1
                }
            }
            return n
        }
        for (j, e) in entries.enumerated() {
            let raw = UnsafeRawBufferPointer(rebasing: block[e.value])
            try locate(raw, offsets)
            if try runProgram(raw, offsets) {
                selected[n] = Int32(truncatingIfNeeded: j)
                n += 1
            }
        }
        return n
    }

    /// Where `slot`'s value starts in `raw` (-1 for no value): `locate` for one slot, with
    /// nothing stored on the way.
    @inline(always)
    private func offset(of slot: Int, in raw: UnsafeRawBufferPointer) throws -> Int {
        let bitmap = (kinds.count + 7) / 8
        guard raw.count >= 1 + bitmap, raw[0] == RecordCodec.format else { throw RecordCodec.Malformed() }
        guard raw[1 + slot >> 3] & UInt8(1 << (slot & 7)) != 0 else { return -1 }
        var o = 1 + bitmap
        let widths = self.widths
        for i in 0..<slot where raw[1 + i >> 3] & UInt8(1 << (i & 7)) != 0 {
            let width = widths[i]
            if width > 0 {
                o += Int(width)
            } else if width == 0 {
                let length: Int
                if o < raw.count && raw[o] < 0x80 {
                    length = Int(raw[o])
                    o += 1
                } else {
                    length = try RecordCodec.length(raw, &o)
                }
                guard length <= raw.count - o else { throw RecordCodec.Malformed() }
                o += length
            } else {
                _ = try RecordCodec.varint(raw, &o)
            }
        }
        guard o < raw.count else { throw RecordCodec.Malformed() }
        return o
    }

    /// Finds where each slot up to `maxSlot` starts (-1 for no value).
    @inline(always)
    private func locate(_ raw: UnsafeRawBufferPointer, _ offsets: UnsafeMutableBufferPointer<Int>) throws {
        let n = kinds.count
        let bitmap = (n + 7) / 8
        guard raw.count >= 1 + bitmap, raw[0] == RecordCodec.format else { throw RecordCodec.Malformed() }
        var o = 1 + bitmap
        let widths = self.widths
        for i in 0...maxSlot {
            guard raw[1 + i >> 3] & UInt8(1 << (i & 7)) != 0 else {
                offsets[i] = -1
                continue
            }
            offsets[i] = o
            let width = widths[i]
            if width > 0 {
                o += Int(width)
            } else if width == 0 {
                // A length (one byte for the short values of most records), then the bytes.
                let length: Int
                if o < raw.count && raw[o] < 0x80 {
                    length = Int(raw[o])
                    o += 1
                } else {
                    length = try RecordCodec.length(raw, &o)
                }
                guard length <= raw.count - o else { throw RecordCodec.Malformed() }
                o += length
            } else {
                _ = try RecordCodec.varint(raw, &o)
            }
            guard o <= raw.count else { throw RecordCodec.Malformed() }
        }
    }

    /// Runs the program: a top-level `AND` of leaves (the common shape) as a loop, anything
    /// else recursively.
    @inline(__always)
    private func runProgram(
        _ raw: UnsafeRawBufferPointer, _ offsets: UnsafeMutableBufferPointer<Int>
    ) throws -> Bool {
        let program = UnsafeBufferPointer(self.program)
        let pool = UnsafeRawBufferPointer(self.pool)
        if flatConjunction {
            var pc = program[0].code == .and ? 1 : 0
            let base = program.baseAddress!
            while pc < program.count {
                let step = base + pc
                // The cheapest tests inline, read in place; the rest through `leaf`.
                switch step.pointee.code {
                case .bool:
                    let o = offsets[Int(step.pointee.slot)]
                    if o < 0 || (raw[o] != 0) != step.pointee.flag { return false }
                case .isNull:
                    if offsets[Int(step.pointee.slot)] >= 0 { return false }
                default:
                    if try !leaf(step.pointee, raw, offsets, pool) { return false }
                }
                pc += 1
            }
            return true
        }
        var pc = 0
        return try run(program, &pc, raw, offsets, pool)
    }

    /// Runs the step at `pc` (and its subtree); `pc` moves to the step's end.
    private func run(
        _ program: UnsafeBufferPointer<Instruction>, _ pc: inout Int, _ raw: UnsafeRawBufferPointer,
        _ offsets: UnsafeMutableBufferPointer<Int>, _ pool: UnsafeRawBufferPointer
    ) throws -> Bool {
        let i = program[pc]
        defer { pc = Int(i.end) }
        switch i.code {
        case .not:
            pc += 1
            return try !run(program, &pc, raw, offsets, pool)
        case .and, .or:
            let isAnd = i.code == .and
            pc += 1
            for _ in 0..<i.count {
                let r = try run(program, &pc, raw, offsets, pool)
                if r != isAnd { return r }
            }
            return isAnd
        default: return try leaf(i, raw, offsets, pool)
        }
    }

    /// One test that has no parts.
    @inline(__always)
    private func leaf(
        _ i: Instruction, _ raw: UnsafeRawBufferPointer, _ offsets: UnsafeMutableBufferPointer<Int>,
        _ pool: UnsafeRawBufferPointer
    ) throws -> Bool {
        switch i.code {
        case .constant: return i.flag
        case .not, .and, .or: preconditionFailure("not a leaf")
        case .isNull: return offsets[Int(i.slot)] < 0
        case .number:
            var o = offsets[Int(i.slot)]
            guard o >= 0 else { return i.op == .notEqual }
            let x = try number(i.kind, raw, &o)
            switch i.op {
            case .equal: return x == i.value
            case .notEqual: return x != i.value
            case .less: return x < i.value
            case .lessOrEqual: return x <= i.value
            case .greater: return x > i.value
            default: return x >= i.value
            }
        case .numberIn:
            var o = offsets[Int(i.slot)]
            guard o >= 0 else { return false }
            let x = try number(i.kind, raw, &o)
            return Self.sortedContains(UnsafeBufferPointer(numbers)[Int(i.start)..<Int(i.start + i.count)], x)
        case .bool:
            let o = offsets[Int(i.slot)]
            guard o >= 0 else { return false }
            return (raw[o] != 0) == i.flag
        case .string: return try string(i, raw, at: offsets[Int(i.slot)], constant(of: i, in: pool))
        case .object:
            var o = offsets[Int(i.slot)]
            guard o >= 0 else { return i.flag }
            let code = try RecordCodec.varint(raw, &o)
            let key: UInt64
            if kindsBuffer[Int(i.slot)] == .anyObject {
                key = EngineKey(keyspace: UInt16(truncatingIfNeeded: code), id: code >> 16).rawValue
            } else {
                key = code  // the serial alone: `keys` holds serials for a plain destination
            }
            return Self.sortedContains(UnsafeBufferPointer(keys)[Int(i.start)..<Int(i.start + i.count)], key)
        case .generic:
            let fallback = fallbacks[Int(i.fallback)]
            var o = offsets[fallback.slot]
            guard o >= 0 else { return try judge(fallback, nil) }
            let slot = try RecordCodec.value(kinds[fallback.slot], raw, &o) { 0 }
            var value: Any? = slot.value(type: fallback.type)
            if case .transformable(let name) = fallback.type, case .data(let blob) = slot {
                value = TransformedValue(blob: blob, transformer: name)
            }
            return try judge(fallback, value)
        }
    }

    /// A string test on the value at `o` (-1: no value): on the bytes when they are plain
    /// ASCII, else on the decoded string through the test's fallback.
    @inline(always)
    private func string(
        _ i: Instruction, _ raw: UnsafeRawBufferPointer, at start: Int, _ constant: UnsafeRawBufferPointer
    ) throws -> Bool {
        var o = start
        guard o >= 0 else { return try judge(fallbacks[Int(i.fallback)], nil) }
        let length = try RecordCodec.length(raw, &o)
        guard length <= raw.count - o else { throw RecordCodec.Malformed() }
        let bytes = UnsafeRawBufferPointer(rebasing: raw[o..<(o + length)])
        guard Self.isPlain(bytes) else {
            return try judge(fallbacks[Int(i.fallback)], String(decoding: bytes, as: UTF8.self))
        }
        // The commonest test of a scan, called straight.
        if i.stringTest == .contains { return Self.find(constant, in: bytes) }
        return Self.test(i.stringTest, i.op, constant, bytes)
    }

    /// The constant bytes of a string test.
    @inline(__always)
    private func constant(of i: Instruction, in pool: UnsafeRawBufferPointer) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(rebasing: pool[Int(i.start)..<Int(i.start + i.count)])
    }

    static func sortedContains<T: Comparable>(_ sorted: Slice<UnsafeBufferPointer<T>>, _ x: T) -> Bool {
        var lo = sorted.startIndex
        var hi = sorted.endIndex
        while lo < hi {
            let mid = (lo + hi) / 2
            if sorted[mid] < x { lo = mid + 1 } else { hi = mid }
        }
        return lo < sorted.endIndex && sorted[lo] == x
    }

    @inline(__always)
    private func number(_ kind: NumberKind, _ raw: UnsafeRawBufferPointer, _ o: inout Int) throws -> Double {
        switch kind {
        case .int:
            let z = try RecordCodec.varint(raw, &o)
            return Double(Int64(bitPattern: z >> 1) ^ -Int64(bitPattern: z & 1))
        case .double:
            return Double(bitPattern: raw.loadUnaligned(fromByteOffset: o, as: UInt64.self).littleEndian)
        case .float:
            return Double(Float(bitPattern: raw.loadUnaligned(fromByteOffset: o, as: UInt32.self).littleEndian))
        case .date:
            // As `Date(timeIntervalSince1970:)` then `timeIntervalSinceReferenceDate`: what the
            // evaluator compares for dates.
            let since1970 = Double(bitPattern: raw.loadUnaligned(fromByteOffset: o, as: UInt64.self).littleEndian)
            return Date(timeIntervalSince1970: since1970).timeIntervalSinceReferenceDate
        }
    }

    private func judge(_ f: Fallback, _ value: Any?) throws -> Bool {
        f.constantFirst
            ? try evaluator.apply(f.comparison, f.constant, value)
            : try evaluator.apply(f.comparison, value, f.constant)
    }

    /// ASCII without a carriage return: where byte comparisons are `String` comparisons
    /// ("\r\n" is one character in Swift).
    @inline(__always)
    static func isPlain(_ bytes: UnsafeRawBufferPointer) -> Bool {
        // Eight bytes at a time: no high bit set, and no byte equal to 0x0D.
        let n = bytes.count
        var i = 0
        if let base = bytes.baseAddress {
            while i + 8 <= n {
                let w = base.loadUnaligned(fromByteOffset: i, as: UInt64.self)
                let cr = w ^ 0x0D0D_0D0D_0D0D_0D0D
                let hasCR = (cr &- 0x0101_0101_0101_0101) & ~cr & 0x8080_8080_8080_8080
                if (w & 0x8080_8080_8080_8080) | hasCR != 0 { return false }
                i += 8
            }
        }
        while i < n {
            let b = bytes[i]
            if b >= 0x80 || b == 0x0D { return false }
            i += 1
        }
        return true
    }

    static func isPlain(_ bytes: [UInt8]) -> Bool { bytes.withUnsafeBytes { isPlain($0) } }

    static func test(
        _ t: StringTestCode, _ op: Comparison.Operator, _ c: UnsafeRawBufferPointer, _ s: UnsafeRawBufferPointer
    ) -> Bool {
        switch t {
        case .equal: return c.count == s.count && (c.count == 0 || memcmp(c.baseAddress!, s.baseAddress!, c.count) == 0)
        case .order:
            let order = compare(s, c)
            switch op {
            case .less: return order < 0
            case .lessOrEqual: return order <= 0
            case .greater: return order > 0
            default: return order >= 0
            }
        case .beginsWith:
            return c.count <= s.count && (c.count == 0 || memcmp(c.baseAddress!, s.baseAddress!, c.count) == 0)
        case .endsWith:
            return c.count <= s.count
                && (c.count == 0 || memcmp(c.baseAddress!, s.baseAddress! + (s.count - c.count), c.count) == 0)
        case .contains: return find(c, in: s)
        case .like: return glob(c, s)
        case .oneOf:
            var o = 0
            while o + 4 <= c.count {
                let n = Int(c[o]) << 24 | Int(c[o + 1]) << 16 | Int(c[o + 2]) << 8 | Int(c[o + 3])
                o += 4
                if n == s.count && (n == 0 || memcmp(c.baseAddress! + o, s.baseAddress!, n) == 0) { return true }
                o += n
            }
            return false
        }
    }

    /// Whether `needle` (not empty) occurs in `haystack`: `memchr` for its first byte, then
    /// `memcmp` for the rest.
    @inline(__always)
    static func find(_ needle: UnsafeRawBufferPointer, in haystack: UnsafeRawBufferPointer) -> Bool {
        guard needle.count <= haystack.count, let base = haystack.baseAddress, let n = needle.baseAddress else {
            return false
        }
        let lastStart = haystack.count - needle.count
        if haystack.count <= 32 {
            // Short values (names, titles): a loop costs less than calls to memchr and memcmp.
            let first = needle[0]
            for i in 0...lastStart where haystack[i] == first {
                var k = 1
                while k < needle.count && haystack[i + k] == needle[k] { k += 1 }
                if k == needle.count { return true }
            }
            return false
        }
        let first = Int32(needle[0])
        var i = 0
        while i <= lastStart {
            guard let hit = memchr(base + i, first, lastStart - i + 1) else { return false }
            let at = base.distance(to: UnsafeRawPointer(hit))
            if memcmp(base + at, n, needle.count) == 0 { return true }
            i = at + 1
        }
        return false
    }

    /// Lexicographic byte order (UTF-8 byte order is scalar order).
    static func compare(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Int {
        let n = min(a.count, b.count)
        if n > 0 {
            let r = memcmp(a.baseAddress!, b.baseAddress!, n)
            if r != 0 { return r < 0 ? -1 : 1 }
        }
        return a.count == b.count ? 0 : (a.count < b.count ? -1 : 1)
    }

    /// `LIKE` on plain bytes: `*` matches any run, `?` one byte (one character in ASCII).
    static func glob(_ p: UnsafeRawBufferPointer, _ s: UnsafeRawBufferPointer) -> Bool {
        var pi = 0
        var si = 0
        var starP = -1
        var starS = 0
        while si < s.count {
            if pi < p.count && (p[pi] == UInt8(ascii: "?") || (p[pi] != UInt8(ascii: "*") && p[pi] == s[si])) {
                pi += 1
                si += 1
            } else if pi < p.count && p[pi] == UInt8(ascii: "*") {
                starP = pi
                starS = si
                pi += 1
            } else if starP >= 0 {
                pi = starP + 1
                starS += 1
                si = starS
            } else {
                return false
            }
        }
        while pi < p.count && p[pi] == UInt8(ascii: "*") { pi += 1 }
        return pi == p.count
    }
}

extension RecordFilter {
    /// Turns predicate nodes into tests over one layout; nil for what does not compile.
    struct Compiler {
        let layout: EntityLayout
        let destinationKeyspace: (Int) -> UInt16
        var maxSlot = 0

        init(layout: EntityLayout, destinationKeyspace: @escaping (Int) -> UInt16) {
            self.layout = layout
            self.destinationKeyspace = destinationKeyspace
        }

        mutating func compile(_ node: PredicateNode) -> Test? {
            switch node {
            case .constant(let b): return .constant(b)
            case .not(let n): return compile(n).map { .not($0) }
            case .and(let parts), .or(let parts):
                var tests: [Test] = []
                for p in parts {
                    guard let t = compile(p) else { return nil }
                    tests.append(t)
                }
                if case .and = node { return .and(tests) }
                return .or(tests)
            case .comparison(let c): return comparison(c)
            }
        }

        /// The constant an expression stands for (lists of constants included); nil when it is not one.
        static func constant(_ e: PredicateExpression) -> Any?? {
            switch e {
            case .value(let v): return .some(v)
            case .list(let items):
                var values: [Any?] = []
                for item in items {
                    guard case .value(let v) = item else { return nil }
                    values.append(v)
                }
                return .some(values)
            default: return nil
            }
        }

        private mutating func comparison(_ c: Comparison) -> Test? {
            guard c.modifier == .direct else { return nil }
            // One side a key of this entity's records, the other a constant.
            var path: [String]
            var constant: Any?
            var constantFirst = false
            if case .keyPath(let p, _) = c.lhs, let v = Self.constant(c.rhs) {
                path = p
                constant = v
            } else if case .keyPath(let p, _) = c.rhs, let v = Self.constant(c.lhs) {
                path = p
                constant = v
                constantFirst = true
            } else {
                return nil
            }
            guard path.count == 1, let slot = layout.slotByName[path[0]] else { return nil }
            if slot >= layout.attributeCount {
                return object(c, slot: slot, constant: constant)
            }
            let attribute = layout.entity.attributes[slot]
            guard !attribute.isTransient else { return nil }
            maxSlot = max(maxSlot, slot)
            let fallback = Fallback(
                slot: slot, comparison: c, constant: constant, constantFirst: constantFirst, type: attribute.type)
            if let fast = typed(c, slot: slot, type: attribute.type, constant: constant, constantFirst: constantFirst) {
                return fast
            }
            return .generic(fallback)
        }

        /// A mirror of an order operator, for `constant op key` read as `key op' constant`.
        static func mirrored(_ op: Comparison.Operator) -> Comparison.Operator {
            switch op {
            case .less: .greater
            case .lessOrEqual: .greaterOrEqual
            case .greater: .less
            case .greaterOrEqual: .lessOrEqual
            default: op
            }
        }

        static func plainNumber(_ v: Any?) -> Double? {
            guard let v, !(v is Bool) else { return nil }
            return PredicateEvaluator.number(v)
        }

        /// The fast test for common shapes; nil to fall back to the evaluator.
        private func typed(
            _ c: Comparison, slot: Int, type: AttributeType, constant: Any?, constantFirst: Bool
        ) -> Test? {
            let symmetric: Set<Comparison.Operator> = [
                .equal, .notEqual, .less, .lessOrEqual, .greater, .greaterOrEqual
            ]
            // Nil tests work for every type.
            if constant == nil, c.op == .equal || c.op == .notEqual {
                return c.op == .equal ? .isNull(slot) : .not(.isNull(slot))
            }
            guard !c.caseInsensitive, !c.diacriticInsensitive else { return nil }
            let op = constantFirst ? Self.mirrored(c.op) : c.op
            let kind: NumberKind?
            switch type {
            case .int16, .int32, .int64: kind = .int
            case .double: kind = .double
            case .float: kind = .float
            case .date: kind = .date
            default: kind = nil
            }
            if let kind {
                func value(_ v: Any?) -> Double? {
                    kind == .date ? (v as? Date)?.timeIntervalSinceReferenceDate : Self.plainNumber(v)
                }
                if symmetric.contains(op), let d = value(constant) { return .number(slot, kind, op, d) }
                if !constantFirst, op == .between, let bounds = constant as? [Any?], bounds.count == 2,
                    let lo = value(bounds[0]), let hi = value(bounds[1])
                {
                    return .and([.number(slot, kind, .greaterOrEqual, lo), .number(slot, kind, .lessOrEqual, hi)])
                }
                if !constantFirst, op == .in, let items = constant as? [Any?] {
                    var set = Set<Double>()
                    for item in items {
                        guard let d = value(item) else { return nil }
                        set.insert(d)
                    }
                    return .numberIn(slot, kind, set)
                }
                return nil
            }
            if type == .bool, op == .equal || op == .notEqual, let b = constant as? Bool {
                return op == .equal ? .bool(slot, b) : .not(.bool(slot, b))
            }
            guard type == .string else { return nil }
            let fallback = Fallback(
                slot: slot, comparison: c, constant: constant, constantFirst: constantFirst, type: type)
            if !constantFirst, op == .in, let items = constant as? [Any?] {
                var set = Set<[UInt8]>()
                for item in items {
                    guard let s = item as? String, case let b = Array(s.utf8), RecordFilter.isPlain(b) else {
                        return nil
                    }
                    set.insert(b)
                }
                return .string(slot, .oneOf(set), fallback: fallback)
            }
            guard let s = constant as? String else { return nil }
            let bytes = Array(s.utf8)
            guard RecordFilter.isPlain(bytes) else { return nil }
            let test: StringTest
            switch op {
            case .equal: test = .equal(bytes)
            case .notEqual: return .not(.string(slot, .equal(bytes), fallback: fallback.negated()))
            case .less, .lessOrEqual, .greater, .greaterOrEqual: test = .order(op, bytes)
            case .beginsWith where !constantFirst: test = .beginsWith(bytes)
            case .endsWith where !constantFirst: test = .endsWith(bytes)
            case .contains where !constantFirst && !bytes.isEmpty: test = .contains(bytes)
            case .like where !constantFirst:
                // `abc*`, `*abc*` and `*abc` are prefix, substring and suffix tests.
                let star = UInt8(ascii: "*")
                let inner = bytes.drop { $0 == star }.reversed().drop { $0 == star }.reversed()
                let literal = Array(inner)
                if !literal.isEmpty, !literal.contains(star), !literal.contains(UInt8(ascii: "?")) {
                    let leading = bytes.first == star
                    let trailing = bytes.last == star
                    let stars = bytes.count - literal.count
                    if leading && trailing && stars == 2 {
                        test = .contains(literal)
                    } else if !leading && trailing && stars == 1 {
                        test = .beginsWith(literal)
                    } else if leading && !trailing && stars == 1 {
                        test = .endsWith(literal)
                    } else {
                        test = .like(bytes)
                    }
                } else {
                    test = .like(bytes)
                }
            default: return nil
            }
            return .string(slot, test, fallback: fallback)
        }

        /// A to-one relationship compared with objects, object IDs or nil.
        private mutating func object(_ c: Comparison, slot: Int, constant: Any?) -> Test? {
            let kind = layout.slotKinds[slot]
            func key(_ v: Any?) -> UInt64?? {
                // .some(nil): an object no stored record can point to (not saved yet).
                let raw: UInt64
                switch v {
                case let o as ManagedObject:
                    if o.flags.contains(.inserted) { return .some(nil) }
                    raw = o.engineKey
                case let id as ObjectID: raw = id.key
                default: return nil
                }
                if kind == .anyObject { return .some(raw) }
                // A plain destination's records hold the serial alone: an object of another
                // entity is never the destination.
                let k = EngineKey(rawValue: raw)
                return .some(k.keyspace == destinationKeyspace(slot) ? k.id : nil)
            }
            var keys = Set<UInt64>()
            var whenNull = false
            switch c.op {
            case .equal, .notEqual:
                if constant == nil {
                    maxSlot = max(maxSlot, slot)
                    return c.op == .equal ? .isNull(slot) : .not(.isNull(slot))
                }
                guard let k = key(constant) else { return nil }
                if let k { keys.insert(k) }
            case .in:
                guard let items = constant as? [Any?] else { return nil }
                for item in items {
                    if item == nil {
                        whenNull = true
                        continue
                    }
                    guard let k = key(item) else { return nil }
                    if let k { keys.insert(k) }
                }
            default: return nil
            }
            maxSlot = max(maxSlot, slot)
            let test = Test.object(slot, keys, whenNull: whenNull)
            return c.op == .notEqual ? .not(test) : test
        }
    }
}

extension RecordFilter.Fallback {
    /// The same comparison with `==` for `!=` (the caller negates the result).
    func negated() -> Self {
        var copy = self
        copy.comparison.op = .equal
        return copy
    }
}
