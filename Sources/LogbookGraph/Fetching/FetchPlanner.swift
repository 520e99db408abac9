import Foundation
import LogbookEngine

/// A fetch's plan as the fetch paths run it: `explained` is what `explain` shows (its fields
/// read through this type as well), the rest is the index, its bounds in bytes and the
/// conditions left to check.
@dynamicMemberLookup
struct ExecutionPlan: Sendable {
    /// The public description (`ManagedObjectContext.explain`).
    var explained: FetchPlan
    var index: IndexID?
    var lowerBound: IndexBound?
    var upperBound: IndexBound?
    var reverse = false
    var residual: PredicateNode?
    /// For `indexPoints`: the index keys to look up.
    var points: [[UInt8]]?
    /// The part of `residual` compiled to a test on records.
    var recordFilter: RecordFilter?
    /// The part of `residual` checked on objects.
    var objectResidual: PredicateNode?

    subscript<Value>(dynamicMember path: WritableKeyPath<FetchPlan, Value>) -> Value {
        get { explained[keyPath: path] }
        set { explained[keyPath: path] = newValue }
    }
}

/// Plans a fetch of one entity over the store as one snapshot holds it, with no context: the
/// predicate's top-level conjuncts come in already resolved (`ManagedObjectContext.plan`
/// turns conditions through to-one relationships into sets of destinations first).
///
/// ```swift
/// let planner = FetchPlanner(entity: layout, store: storeLayout, snapshot: store.snapshot())
/// let plan = planner.plan(conjuncts, sortDescriptors: [], window: .all, predicateFormat: "age > 40")
/// print(plan.explained)     // FETCH Person: INDEX age range … ; ORDER from index
/// ```
struct FetchPlanner {
    let entity: EntityLayout
    let store: StoreLayout
    let snapshot: Snapshot

    /// Plans the conjuncts of a request's predicate: each indexed slot's range (or points) and each compound index's prefix; the
    /// access that reads the fewest entries (counted in the indexes, O(log n) each), against a
    /// scan; what is left for a filter (compiled to a test on records where it can be), and
    /// what the index settles alone (order, limit, count).
    func plan(
        _ conjuncts: [PredicateNode], sortDescriptors: [FetchSortDescriptor], window: ResultWindow,
        predicateFormat: String?
    ) -> ExecutionPlan {
        let indexed = store.slotIndex[entity.index]
        let (ranges, settled) = FetchPlanner.indexRanges(
            conjuncts, layout: entity, indexed: indexed, store: store.identity)
        // The index orders strings plainly: a sort comparing them otherwise cannot use it.
        let firstSort = sortDescriptors.first.flatMap { s -> (slot: Int, ascending: Bool)? in
            guard let slot = entity.slotByName[s.key] else { return nil }
            if s.comparison != .plain, slot < entity.attributeCount, entity.entity.attributes[slot].type == .string {
                return nil
            }
            return (slot, s.ascending)
        }
        let compound = FetchPlanner.compoundRanges(
            conjuncts, layout: entity, indexes: store.compoundIndexes[entity.index])
        let choice = FetchPlanner.choose(
            ranges, compound: compound, firstSort: firstSort, layout: entity, indexed: indexed, snapshot: snapshot,
            entityCount: snapshot.count(inKeyspace: store.keyspace[entity.index]),
            limit: window.stopAfter)

        var plan = ExecutionPlan(
            explained: FetchPlan(
                entity: entity.name, access: .scan, filter: nil, orderFromIndex: false, limitPushedDown: false,
                countFromIndex: false))
        plan.reason = choice.reason
        let residualParts = takeAccess(
            choice.access, into: &plan, conjuncts: conjuncts, ranges: ranges, settled: settled, compound: compound,
            firstSort: firstSort, sortDescriptors: sortDescriptors)
        takeFilter(residualParts, into: &plan, predicateFormat: predicateFormat)
        // A limit stops the walk when nothing after the records' filter can drop a record and
        // the order is the walk's.
        plan.limitPushedDown =
            window.limit > 0 && plan.objectResidual == nil
            && (plan.orderFromIndex || sortDescriptors.isEmpty) && plan.points == nil
        plan.countFromIndex = plan.residual == nil
        return plan
    }

    /// The chosen access written into `plan` (index, bounds or points, order); returns the
    /// conjuncts the access does not settle, left for the filter.
    private func takeAccess(
        _ access: ChosenAccess, into plan: inout ExecutionPlan, conjuncts: [PredicateNode],
        ranges: [Int: PlannedRange], settled: [Int: Int], compound: [CompoundRange],
        firstSort: (slot: Int, ascending: Bool)?, sortDescriptors: [FetchSortDescriptor]
    ) -> [PredicateNode] {
        let indexed = store.slotIndex[entity.index]
        var residualParts = conjuncts
        switch access {
        case .scan:
            plan.orderFromIndex = sortDescriptors.isEmpty
        case .slot(let slot):
            let range = ranges[slot] ?? PlannedRange()
            let name = entity.slotNames[slot]
            plan.index = indexed[slot]
            if let points = range.points {
                plan.access = .indexPoints(attribute: name, values: points.count)
                plan.points = points
                plan.orderFromIndex = sortDescriptors.isEmpty
            } else {
                let reverse = firstSort.map { $0.slot == slot && !$0.ascending } ?? false
                plan.access = .indexRange(
                    attribute: name, lower: FetchPlanner.show(range.lower), upper: FetchPlanner.show(range.upper),
                    reverse: reverse)
                plan.lowerBound = range.lower
                plan.upperBound = range.upper
                plan.reverse = reverse
                plan.orderFromIndex =
                    sortDescriptors.isEmpty || (sortDescriptors.count == 1 && firstSort?.slot == slot)
            }
            // Conditions on the chosen slot are settled by the range; the rest filter.
            residualParts = conjuncts.enumerated().filter { n, _ in settled[n] != slot }.map(\.1)
        case .compound(let k):
            let c = compound[k]
            plan.index = c.index
            plan.access = .compoundIndex(
                keys: c.slots.map { entity.slotNames[$0] }, equalities: c.equalities, range: c.hasRange)
            plan.lowerBound = c.lower
            plan.upperBound = c.upper
            // Past the equal keys, entries are in the order of the next key: a sort by it alone
            // is the walk's order (backwards when descending).
            if let first = firstSort, sortDescriptors.count == 1, first.slot == c.nextSlot {
                plan.orderFromIndex = true
                plan.reverse = !first.ascending
            } else {
                plan.orderFromIndex = sortDescriptors.isEmpty
            }
        // Every condition is checked again on the records: entries cut at the longest key
        // may match bounds their values do not.
        }
        return residualParts
    }

    /// The conditions left, as a filter: compiled to a test on records where it can be, the
    /// rest checked on objects.
    private func takeFilter(_ residualParts: [PredicateNode], into plan: inout ExecutionPlan, predicateFormat: String?)
    {
        guard !residualParts.isEmpty else { return }
        plan.residual = residualParts.count == 1 ? residualParts[0] : .and(residualParts)
        plan.filter = predicateFormat
        let destinations = entity.toOne.map { store.keyspace[entity.relationshipDestination[$0]] }
        let attributeCount = entity.attributeCount
        let (filter, rest) = RecordFilter.compile(
            residualParts, layout: entity, format: predicateFormat ?? "",
            destinationKeyspace: { destinations[$0 - attributeCount] })
        plan.recordFilter = filter
        plan.objectResidual = rest.isEmpty ? nil : (rest.count == 1 ? rest[0] : .and(rest))
        plan.filtersRecords = filter != nil
        plan.filterOnObjects = !rest.isEmpty
    }

    /// A bound as `explain` shows it: `[` (inclusive) or `(`, then the key in hex.
    static func show(_ b: IndexBound?) -> String? {
        // Hex by hand: `String(format:)` would cost more than planning a small fetch.
        b.map { bound in
            let digits = Array("0123456789abcdef".utf8)
            var out: [UInt8] = [bound.inclusive ? UInt8(ascii: "[") : UInt8(ascii: "(")]
            for byte in bound.key {
                out.append(digits[Int(byte >> 4)])
                out.append(digits[Int(byte & 15)])
            }
            return String(decoding: out, as: UTF8.self)
        }
    }
}

extension FetchPlanner {
    /// Step 2: by indexed slot (attribute or to-one relationship), the index range (or points)
    /// its comparisons allow, and which conjuncts (by position) a slot's range settles exactly.
    static func indexRanges(
        _ conjuncts: [PredicateNode], layout: EntityLayout, indexed: [IndexID?], store: StoreIdentity
    ) -> (ranges: [Int: PlannedRange], settled: [Int: Int]) {
        var ranges: [Int: PlannedRange] = [:]
        var settled: [Int: Int] = [:]
        for (n, c) in conjuncts.enumerated() {
            guard let (slot, op, value) = indexableComparison(c, layout: layout, indexed: indexed) else { continue }
            func key(_ v: Any?, equality: Bool = false) -> [UInt8]? {
                indexKeyBytes(v, slot: slot, layout: layout, equality: equality)
            }
            var r = ranges[slot] ?? PlannedRange()
            switch op {
            case .equal:
                guard let k = key(value, equality: true) else { continue }
                r.tighten(lower: IndexBound(k, inclusive: true), upper: IndexBound(k, inclusive: true))
                r.equality = true
            case .less, .lessOrEqual:
                guard let v = value, let k = key(v) else { continue }
                // Above the no-value entries (tag 0), which a comparison never matches.
                r.tighten(lower: IndexBound([1], inclusive: true), upper: IndexBound(k, inclusive: op == .lessOrEqual))
            case .greater, .greaterOrEqual:
                guard let v = value, let k = key(v) else { continue }
                r.tighten(lower: IndexBound(k, inclusive: op == .greaterOrEqual), upper: nil)
            case .between:
                guard let bounds = value as? [Any?], bounds.count == 2, let b0 = bounds[0], let b1 = bounds[1],
                    let lo = key(b0), let hi = key(b1)
                else { continue }
                r.tighten(lower: IndexBound(lo, inclusive: true), upper: IndexBound(hi, inclusive: true))
            case .in:
                guard let items = value as? [Any?] else { continue }
                var points: [[UInt8]] = []
                for item in items {
                    guard let k = key(item, equality: true) else {
                        points = []
                        break
                    }
                    points.append(k)
                }
                guard !points.isEmpty || items.isEmpty else { continue }
                // A second IN on the same slot: only the values in both.
                if let existing = r.points { points = points.filter { existing.contains($0) } }
                r.points = Array(Set(points)).sorted { $0.lexicographicallyPrecedes($1) }
                r.equality = true
            default:
                continue
            }
            ranges[slot] = r
            // A slot with both points and a range settles neither alone: keep both as filters.
            if r.points != nil && (r.lower != nil || r.upper != nil) {
                for (m, s) in settled where s == slot { settled[m] = nil }
                ranges[slot]!.lower = nil
                ranges[slot]!.upper = nil
                continue
            }
            settled[n] = slot
        }
        return (ranges, settled)
    }

    /// A plain comparison of an indexed slot with a constant, as `slot op value` (`value op
    /// slot` mirrored); nil for anything an index cannot answer ([c], [d], ANY, key paths…).
    static func indexableComparison(_ c: PredicateNode, layout: EntityLayout, indexed: [IndexID?]) -> (
        slot: Int, op: Comparison.Operator, value: Any?
    )? {
        // Only plain comparisons: [c] and [d] compare folded strings, which the index does not hold.
        guard case .comparison(let cmp) = c, cmp.modifier == .direct, !cmp.caseInsensitive, !cmp.diacriticInsensitive
        else { return nil }
        var attributeSide = cmp.lhs
        var valueSide = cmp.rhs
        var op = cmp.op
        if case .keyPath = cmp.rhs, RecordFilter.Compiler.constant(cmp.lhs) != nil {
            guard op != .in, op != .between else { return nil }
            attributeSide = cmp.rhs
            valueSide = cmp.lhs
            op = RecordFilter.Compiler.mirrored(op)
        }
        guard case .keyPath(let path, _) = attributeSide, path.count == 1, let slot = layout.slotByName[path[0]],
            slot < indexed.count, indexed[slot] != nil, let v = RecordFilter.Compiler.constant(valueSide)
        else { return nil }
        if slot < layout.attributeCount, layout.entity.attributes[slot].isTransient { return nil }
        return (slot, op, v)
    }

    /// The index key of a constant for a slot, when the index settles comparisons with it
    /// exactly: nil for values of another type, strings longer than an index keeps, floats
    /// that a float cannot hold, and objects not saved yet. Binary data only for `equality`
    /// (`==`, `IN`): predicates do not order data.
    static func indexKeyBytes(_ v: Any?, slot: Int, layout: EntityLayout, equality: Bool = false) -> [UInt8]? {
        if slot >= layout.attributeCount {
            switch v {
            case nil: return [0]
            case let o as ManagedObject where !o.flags.contains(.inserted):
                return RecordCodec.indexKey(.object(o.engineKey), type: .int64, index: 0).bytes
            case let id as ObjectID: return RecordCodec.indexKey(.object(id.key), type: .int64, index: 0).bytes
            default: return nil
            }
        }
        let type = layout.entity.attributes[slot].type
        if case .transformable = type { return nil }
        guard let v else { return [0] }
        if v is Bool, type != .bool { return nil }
        guard let s = try? FieldValue(v, type: type), !s.isNull else { return nil }
        switch s {
        case .string(let str):
            // Strings longer than the index keeps are not settled exactly by it.
            if str.utf8.count >= JournalFormat.maxIndexKeyLength - 1 { return nil }
        case .double(let d):
            // The value as stored must compare as the constant does.
            if type == .float, PredicateEvaluator.number(v) != d { return nil }
        case .data(let d):
            // Data longer than the index keeps is not settled exactly by it either.
            if !equality || d.count >= JournalFormat.maxIndexKeyLength - 1 { return nil }
        case .boxed: return nil
        default: break
        }
        return RecordCodec.indexKey(s, type: type, index: 0).bytes
    }

    /// A compound index's bounds for the conditions: equal values on its first keys, then a
    /// range on the next.
    struct CompoundRange {
        var index: IndexID
        var slots: [Int]
        var equalities: Int
        var hasRange: Bool
        var lower: IndexBound
        var upper: IndexBound
        /// The key after the equal ones, whose order the entries in range follow.
        var nextSlot: Int? { equalities < slots.count ? slots[equalities] : nil }
    }

    /// Step 2b: each compound index that the conditions can use (an equality on its first key at least).
    static func compoundRanges(
        _ conjuncts: [PredicateNode], layout: EntityLayout, indexes: [(slots: [Int], index: IndexID)]
    ) -> [CompoundRange] {
        guard !indexes.isEmpty else { return [] }
        // Every slot counts as indexed here: the compound index is the one asked about.
        let all = [IndexID?](repeating: 0, count: layout.slotCount)
        var equal: [Int: Any?] = [:]
        var lowers: [Int: [(Any, Bool)]] = [:]
        var uppers: [Int: [(Any, Bool)]] = [:]
        for c in conjuncts {
            guard let (slot, op, value) = indexableComparison(c, layout: layout, indexed: all) else { continue }
            switch op {
            case .equal: equal[slot] = .some(value)
            case .greater, .greaterOrEqual:
                if let value { lowers[slot, default: []].append((value, op == .greaterOrEqual)) }
            case .less, .lessOrEqual: if let value { uppers[slot, default: []].append((value, op == .lessOrEqual)) }
            case .between:
                if let b = value as? [Any?], b.count == 2, let lo = b[0], let hi = b[1] {
                    lowers[slot, default: []].append((lo, true))
                    uppers[slot, default: []].append((hi, true))
                }
            default: break
            }
        }
        func part(_ v: Any?, _ slot: Int) -> [UInt8]? {
            guard indexKeyBytes(v, slot: slot, layout: layout) != nil else { return nil }
            guard let s = try? slotValue(v, slot: slot, layout: layout) else { return nil }
            return StoreLayout.compoundPart(s, slot: slot, entity: layout)
        }
        var result: [CompoundRange] = []
        for (slots, index) in indexes {
            var prefix: [UInt8] = []
            var n = 0
            while n < slots.count, let v = equal[slots[n]], let p = part(v, slots[n]) {
                prefix += p
                n += 1
            }
            guard n > 0 else { continue }
            var lower = IndexBound(prefix, inclusive: true)
            var upper = IndexBound(prefix + [0xFF], inclusive: true)
            var hasRange = false
            if n < slots.count {
                let slot = slots[n]
                // The strictest bound of each side (compared by their key bytes).
                for (v, inclusive) in lowers[slot] ?? [] {
                    guard let p = part(v, slot) else { continue }
                    let key = inclusive ? prefix + p : prefix + p + [0xFF]
                    if !hasRange || lower.key.lexicographicallyPrecedes(key) || lower.key == prefix {
                        lower = IndexBound(key, inclusive: true)
                    }
                    hasRange = true
                }
                var upperSet = false
                for (v, inclusive) in uppers[slot] ?? [] {
                    guard let p = part(v, slot) else { continue }
                    let key = inclusive ? prefix + p + [0xFF] : prefix + p
                    let bound = IndexBound(key, inclusive: inclusive)
                    if !upperSet || key.lexicographicallyPrecedes(upper.key)
                        || (key == upper.key && !inclusive)
                    {
                        upper = bound
                    }
                    upperSet = true
                    hasRange = true
                }
                // A comparison never matches no value: above the no-value entries.
                if hasRange && lower.key == prefix { lower = IndexBound(prefix + [1], inclusive: true) }
            }
            result.append(
                CompoundRange(index: index, slots: slots, equalities: n, hasRange: hasRange, lower: lower, upper: upper)
            )
        }
        return result
    }

    static func slotValue(_ v: Any?, slot: Int, layout: EntityLayout) throws -> FieldValue {
        if slot >= layout.attributeCount {
            switch v {
            case let o as ManagedObject: return .object(o.engineKey)
            case let id as ObjectID: return .object(id.key)
            default: return .null
            }
        }
        return try FieldValue(v, type: layout.entity.attributes[slot].type)
    }

    enum ChosenAccess {
        case scan
        case slot(Int)
        case compound(Int)
    }

    /// Step 3: the access that reads the fewest index entries (each candidate counted in its
    /// index), a scan when every one reads more than the entity holds; a tie goes to the index that gives
    /// the first sort key's order. With a limit and no other choice, the first sort key's
    /// index gives the order alone.
    static func choose(
        _ ranges: [Int: PlannedRange], compound: [CompoundRange], firstSort: (slot: Int, ascending: Bool)?,
        layout: EntityLayout, indexed: [IndexID?], snapshot: Snapshot, entityCount: Int, limit: Int?
    ) -> (access: ChosenAccess, reason: String?) {
        var best: (access: ChosenAccess, cost: Int, ordered: Bool)?
        var seen: [String] = []
        func consider(_ access: ChosenAccess, _ cost: Int, ordered: Bool, _ name: String) {
            seen.append("\(name): \(cost)")
            if let b = best, b.cost < cost || (b.cost == cost && (b.ordered || !ordered)) { return }
            best = (access, cost, ordered)
        }
        // An index that cannot be read (its checkpoint section and the journal both failed:
        // `Snapshot.indexCount`) costs more than any scan, which then answers instead.
        func entries(_ index: IndexID, _ lower: IndexBound?, _ upper: IndexBound?) -> Int {
            (try? snapshot.indexCount(index: index, from: lower, to: upper)) ?? .max
        }
        for slot in ranges.keys.sorted() {
            guard let index = indexed[slot] else { continue }
            let r = ranges[slot]!
            let cost: Int
            if let points = r.points {
                cost = points.reduce(0) {
                    let n = entries(index, IndexBound($1, inclusive: true), IndexBound($1, inclusive: true))
                    return $0 > .max - n ? .max : $0 + n
                }
            } else {
                cost = entries(index, r.lower, r.upper)
            }
            consider(.slot(slot), cost, ordered: firstSort?.slot == slot && r.points == nil, layout.slotNames[slot])
        }
        for (k, c) in compound.enumerated() {
            let cost = entries(c.index, c.lower, c.upper)
            consider(
                .compound(k), cost, ordered: firstSort != nil && firstSort?.slot == c.nextSlot,
                "(" + c.slots.map { layout.slotNames[$0] }.joined(separator: ", ") + ")")
        }
        // At equal cost the index wins: it settles its conditions (a count needs no record).
        if let b = best, b.cost <= entityCount {
            return (b.access, seen.joined(separator: ", ") + " of \(entityCount)")
        }
        // No condition narrows: the first sort key's index gives the order (with a limit, it
        // stops the walk; without, it saves the sort).
        if let first = firstSort, first.slot < indexed.count, let index = indexed[first.slot],
            entries(index, nil, nil) != .max
        {
            return (.slot(first.slot), nil)
        }
        return (.scan, seen.isEmpty ? nil : seen.joined(separator: ", ") + " of \(entityCount)")
    }
}

/// The range of an index that a request's conditions allow.
struct PlannedRange {
    var lower: IndexBound?
    var upper: IndexBound?
    var equality = false
    /// Exact values to look up (`IN`), instead of a range.
    var points: [[UInt8]]?

    /// Keeps the stricter of each bound: the higher lower bound and the lower upper bound,
    /// and at equal keys the exclusive one (`age > 5 AND age >= 5` is `age > 5`).
    mutating func tighten(lower new: IndexBound?, upper newUpper: IndexBound?) {
        if let new {
            if let l = lower {
                if l.key.lexicographicallyPrecedes(new.key) || (l.key == new.key && !new.inclusive) { lower = new }
            } else {
                lower = new
            }
        }
        if let new = newUpper {
            if let u = upper {
                if new.key.lexicographicallyPrecedes(u.key) || (u.key == new.key && !new.inclusive) { upper = new }
            } else {
                upper = new
            }
        }
    }
}
