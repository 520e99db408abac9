import Foundation
import LogbookEngine

/// How a fetch reads the store: `explain` shows it.
public struct FetchPlan: Sendable, CustomStringConvertible {
    /// How the candidates are found.
    public enum Access: Sendable, Equatable {
        /// Every object of the entity, in key order.
        case scan
        /// The entries of an attribute's index between two bounds, in index order.
        case indexRange(attribute: String, lower: String?, upper: String?, reverse: Bool)
    }
    /// The entity the plan is for.
    public var entity: String
    /// How its candidates are found: a scan of the entity or a range of an index.
    public var access: Access
    /// Conditions checked on each object read (those the index does not settle).
    public var filter: String?
    /// True when the order comes from the index (no sort after reading).
    public var orderFromIndex: Bool
    /// True when the limit stops the index walk early.
    public var limitPushedDown: Bool
    /// True when a count is answered from the index without reading objects.
    public var countFromIndex: Bool

    public var description: String {
        var s = "FETCH \(entity): "
        switch access {
        case .scan: s += "SCAN all objects"
        case .indexRange(let attribute, let lower, let upper, let reverse):
            s += "INDEX \(attribute) range \(lower ?? "-∞") … \(upper ?? "+∞")\(reverse ? " descending" : "")"
        }
        if let filter { s += "; FILTER \(filter)" }
        s += orderFromIndex ? "; ORDER from index" : "; ORDER by sorting"
        if limitPushedDown { s += "; LIMIT stops the walk" }
        if countFromIndex { s += "; COUNT from index" }
        return s
    }

    // Internal: the index and bounds in bytes, and the residual predicate.
    var index: IndexID?
    var lowerBound: IndexBound?
    var upperBound: IndexBound?
    var reverse = false
    var residual: PredicateNode?
}

extension ManagedObjectContext {
    /// The plan a request would use (which index, which filter, whether it sorts).
    public func explain<T: ManagedObject>(_ request: FetchRequest<T>) throws -> FetchPlan {
        try plan(request, layout: try model.layout(named: request.entityName))
    }

    /// Plans a request in four steps: the predicate's top-level conjuncts; the index range
    /// each indexed attribute's conditions allow; the one index to walk (an equality, else the
    /// first sort key's range, else any range, else the first sort key's order); and what is
    /// left for a filter, with what the index settles alone (order, limit, count).
    func plan<T: ManagedObject>(_ request: FetchRequest<T>, layout: EntityLayout) throws -> FetchPlan {
        try container.checkConfiguration(layout)
        let conjuncts = Self.conjuncts(of: request.predicate)
        let indexed = storeLayout.attributeIndex[layout.index]
        let (ranges, settled) = Self.indexRanges(conjuncts, layout: layout, indexed: indexed)
        // The index orders strings plainly: a sort comparing them otherwise cannot use it.
        let firstSort = request.sortDescriptors.first.flatMap { s -> (slot: Int, ascending: Bool)? in
            guard let slot = layout.slotByName[s.key] else { return nil }
            if s.comparison != .plain, slot < layout.attributeCount, layout.entity.attributes[slot].type == .string {
                return nil
            }
            return (slot, s.ascending)
        }
        let chosen = Self.chooseIndex(ranges, firstSort: firstSort, layout: layout, indexed: indexed)

        var plan = FetchPlan(
            entity: layout.name, access: .scan, filter: nil, orderFromIndex: false, limitPushedDown: false,
            countFromIndex: false)
        var residualParts = conjuncts
        if let slot = chosen, let index = indexed[slot] {
            let range = ranges[slot] ?? PlannedRange()
            let reverse = firstSort.map { $0.slot == slot && !$0.ascending } ?? false
            func show(_ b: IndexBound?) -> String? {
                b.map { "\($0.inclusive ? "[" : "(")\($0.key.map { String(format: "%02x", $0) }.joined())" }
            }
            plan.access = .indexRange(
                attribute: layout.entity.attributes[slot].name, lower: show(range.lower), upper: show(range.upper),
                reverse: reverse)
            plan.index = index
            plan.lowerBound = range.lower
            plan.upperBound = range.upper
            plan.reverse = reverse
            // Conditions on the chosen attribute are settled by the range; the rest filter.
            residualParts = conjuncts.enumerated().filter { n, c in
                guard settled.contains(n), case .comparison(let cmp) = c else { return true }
                let path: [String]? = {
                    if case .keyPath(let p, _) = cmp.lhs { return p }
                    if case .keyPath(let p, _) = cmp.rhs { return p }
                    return nil
                }()
                return path != [layout.entity.attributes[slot].name]
            }.map(\.1)
            plan.orderFromIndex = request.sortDescriptors.count == 1 && firstSort?.slot == slot
        } else {
            plan.orderFromIndex = request.sortDescriptors.isEmpty
        }
        if !residualParts.isEmpty {
            plan.residual = residualParts.count == 1 ? residualParts[0] : .and(residualParts)
            plan.filter = request.predicate?.format
        }
        plan.limitPushedDown = request.fetchLimit > 0 && plan.residual == nil && plan.orderFromIndex
        plan.countFromIndex = plan.residual == nil
        return plan
    }

    /// Step 1: the top-level AND parts of a predicate (a `TRUEPREDICATE` part drops out).
    private static func conjuncts(of predicate: FetchPredicate?) -> [PredicateNode] {
        var conjuncts: [PredicateNode] = []
        func flatten(_ n: PredicateNode) {
            if case .and(let parts) = n {
                parts.forEach(flatten)
            } else if case .constant(true) = n {
            } else {
                conjuncts.append(n)
            }
        }
        if let predicate { flatten(predicate.node) }
        return conjuncts
    }

    /// Step 2: by indexed attribute slot, the index range its comparisons allow, and the
    /// conjuncts (by position) that a range settles exactly.
    private static func indexRanges(
        _ conjuncts: [PredicateNode], layout: EntityLayout,
        indexed: [IndexID?]
    ) -> (ranges: [Int: PlannedRange], settled: Set<Int>) {
        var ranges: [Int: PlannedRange] = [:]
        var settled = Set<Int>()
        for (n, c) in conjuncts.enumerated() {
            // Only plain comparisons: [c] and [d] compare folded strings, which the index does not hold.
            guard case .comparison(let cmp) = c, cmp.modifier == .direct, !cmp.caseInsensitive,
                !cmp.diacriticInsensitive
            else { continue }
            // `value op attribute` is read as `attribute op' value`.
            var attributeSide = cmp.lhs
            var valueSide = cmp.rhs
            var op = cmp.op
            if case .value = cmp.lhs, case .keyPath = cmp.rhs {
                attributeSide = cmp.rhs
                valueSide = cmp.lhs
                switch op {
                case .less: op = .greater
                case .lessOrEqual: op = .greaterOrEqual
                case .greater: op = .less
                case .greaterOrEqual: op = .lessOrEqual
                default: break
                }
            }
            guard case .keyPath(let path, _) = attributeSide, path.count == 1, let slot = layout.slotByName[path[0]],
                slot < layout.attributeCount, indexed[slot] != nil
            else { continue }
            let type = layout.entity.attributes[slot].type
            func key(_ v: Any?) -> [UInt8]? {
                guard let v, let s = try? Slot(v, type: type), !s.isNull else { return nil }
                // Strings longer than the index keeps are not settled exactly by it.
                if case .string(let str) = s, str.utf8.count >= JournalFormat.maxIndexKeyLength - 1 { return nil }
                if case .boxed = s { return nil }
                return RecordCodec.indexKey(s, type: type, index: 0).bytes
            }
            var r = ranges[slot] ?? PlannedRange()
            func tighten(lower: IndexBound?, upper: IndexBound?) {
                if let lower {
                    if r.lower == nil || lower.key.lexicographicallyPrecedes(r.lower!.key) == false { r.lower = lower }
                }
                if let upper {
                    if r.upper == nil || upper.key.lexicographicallyPrecedes(r.upper!.key) { r.upper = upper }
                }
            }
            guard case .value(let v) = valueSide else { continue }
            switch op {
            case .equal:
                guard let k = key(v) else { continue }
                tighten(lower: IndexBound(k, inclusive: true), upper: IndexBound(k, inclusive: true))
                r.equality = true
            case .less, .lessOrEqual:
                guard let k = key(v) else { continue }
                // Above the no-value entries (tag 0), which a comparison never matches.
                tighten(lower: IndexBound([1], inclusive: true), upper: IndexBound(k, inclusive: op == .lessOrEqual))
            case .greater, .greaterOrEqual:
                guard let k = key(v) else { continue }
                tighten(lower: IndexBound(k, inclusive: op == .greaterOrEqual), upper: nil)
            case .between:
                guard let bounds = v as? [Any?] ?? (v as? [Any]).map({ $0.map { $0 } }), bounds.count == 2,
                    let lo = key(bounds[0]), let hi = key(bounds[1])
                else { continue }
                tighten(lower: IndexBound(lo, inclusive: true), upper: IndexBound(hi, inclusive: true))
            default:
                continue
            }
            ranges[slot] = r
            settled.insert(n)
        }
        return (ranges, settled)
    }

    /// Step 3: the attribute whose index to walk: an equality, else the first sort key's
    /// range, else any range (the lowest slot, for a stable plan), else the first sort key's
    /// index for its order alone; nil for a scan.
    private static func chooseIndex(
        _ ranges: [Int: PlannedRange], firstSort: (slot: Int, ascending: Bool)?,
        layout: EntityLayout, indexed: [IndexID?]
    ) -> Int? {
        if let equality = ranges.first(where: { $0.value.equality })?.key { return equality }
        if let first = firstSort, ranges[first.slot] != nil { return first.slot }
        if let any = ranges.keys.sorted().first { return any }
        if let first = firstSort, first.slot < layout.attributeCount, indexed[first.slot] != nil { return first.slot }
        return nil
    }
}

/// The range of an index that a request's conditions allow.
struct PlannedRange {
    var lower: IndexBound?
    var upper: IndexBound?
    var equality = false
}
