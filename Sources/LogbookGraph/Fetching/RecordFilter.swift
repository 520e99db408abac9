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
        widths = copy(layout.slotKinds.map(RecordCursor.width))
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
        var cursor = try RecordCursor(raw, slotCount: kinds.count)
        guard cursor.isPresent(slot) else { return -1 }
        try cursor.skip(to: slot, widths: widths)
        guard cursor.offset < raw.count else { throw RecordCodec.Malformed() }
        return cursor.offset
    }

    /// Finds where each slot up to `maxSlot` starts (-1 for no value).
    @inline(always)
    private func locate(_ raw: UnsafeRawBufferPointer, _ offsets: UnsafeMutableBufferPointer<Int>) throws {
        var cursor = try RecordCursor(raw, slotCount: kinds.count)
        let widths = self.widths
        for i in 0...maxSlot {
            guard cursor.isPresent(i) else {
                offsets[i] = -1
                continue
            }
            offsets[i] = cursor.offset
            try cursor.skip(width: widths[i])
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
            // Stored as `Date` holds it (seconds since 2001): what the evaluator compares.
            return Double(bitPattern: raw.loadUnaligned(fromByteOffset: o, as: UInt64.self).littleEndian)
        }
    }

    private func judge(_ f: Fallback, _ value: Any?) throws -> Bool {
        f.constantFirst
            ? try evaluator.apply(f.comparison, f.constant, value)
            : try evaluator.apply(f.comparison, value, f.constant)
    }

}
