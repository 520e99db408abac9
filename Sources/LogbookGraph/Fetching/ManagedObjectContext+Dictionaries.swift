import Foundation

extension ManagedObjectContext {
    /// The request's results as dictionaries of the `propertiesToFetch` (Core Data's dictionary
    /// result type). Without `propertiesToGroupBy`: one dictionary per object when only
    /// attributes are asked for, or a single dictionary when only expressions are. With it: one
    /// dictionary per distinct combination of the group-by keys, each expression computed over
    /// the group; every plain attribute must then be a group-by key. A key without a value is
    /// left out of its dictionary. Sort descriptors name result keys; `fetchOffset` and
    /// `fetchLimit` apply to the dictionaries. Unsaved changes are seen, as with every fetch.
    public func fetchDictionaries<T: ManagedObject>(_ request: FetchRequest<T>) throws -> [[String: any Sendable]] {
        try catchUpWithOtherWriters()
        let layout = try model.layout(named: request.entityName)
        var properties = request.propertiesToFetch
        if properties.isEmpty {
            properties =
                layout.entity.attributes.map { .attribute($0.name) }
                + layout.toOne.map { .attribute(layout.slotNames[$0]) }
        }
        let groupBy = request.propertiesToGroupBy
        let (groupSlots, plain, expressions) = try dictionaryColumns(
            properties, groupBy: groupBy, layout: layout)
        var unlimited = request
        unlimited.window = .all
        unlimited.fetchBatchSize = 0
        unlimited.sortDescriptors =
            groupBy.isEmpty && expressions.isEmpty
            ? request.sortDescriptors.filter { layout.slotByName[$0.key] != nil } : []
        let records = try recordValues(unlimited, layout: layout)
        var rows = dictionaries(
            records, plain: plain, expressions: expressions, groupBy: groupBy, groupSlots: groupSlots, layout: layout)
        if !request.sortDescriptors.isEmpty && !(groupBy.isEmpty && expressions.isEmpty) {
            rows.sort { a, b in
                for d in request.sortDescriptors {
                    let c = Self.compareResults(a[d.key], b[d.key], d.comparison)
                    if c != 0 { return d.ascending ? c < 0 : c > 0 }
                }
                return false
            }
        }
        let result = request.window.apply(to: rows)
        return Array(result)
    }

    /// The columns of a dictionary fetch, checked: the group-by slots, the plain attributes
    /// (each must be a group-by key when there are some) and the expressions (numeric
    /// attributes for the functions that need them).
    private func dictionaryColumns(_ properties: [FetchProperty], groupBy: [String], layout: EntityLayout) throws -> (
        groupSlots: [Int], plain: [(name: String, slot: Int)], expressions: [(FetchProperty, Int?)]
    ) {
        func slot(_ key: String, _ role: String) throws -> Int {
            guard let slot = layout.slotByName[key] else {
                throw LogbookError(
                    .unknownKey,
                    "cannot \(role) \(key): \(layout.name) has no attribute or to-one relationship named \(key)",
                    entity: layout.name, key: key)
            }
            return slot
        }
        let groupSlots = try groupBy.map { try slot($0, "group by") }
        var plain: [(name: String, slot: Int)] = []
        var expressions: [(FetchProperty, Int?)] = []
        for p in properties {
            if let f = p.function {
                let s = try p.key.map { try slot($0, "compute \(f.rawValue) of") }
                if let s, f != .count, f != .min, f != .max, s < layout.attributeCount,
                    !layout.entity.attributes[s].type.isNumeric
                {
                    throw LogbookError(
                        .typeMismatch,
                        "\(f.rawValue) needs a numeric attribute; \(p.key!) is \(layout.entity.attributes[s].type)",
                        entity: layout.name, key: p.key)
                }
                expressions.append((p, s))
            } else {
                let s = try slot(p.key ?? p.name, "fetch")
                if !groupBy.isEmpty && !groupBy.contains(p.key ?? p.name) {
                    throw LogbookError(
                        .invalidFetch,
                        "\(p.name) is fetched with propertiesToGroupBy but is not one of them; fetch it as an expression or group by it",
                        entity: layout.name, key: p.name)
                }
                plain.append((p.name, s))
            }
        }
        if groupBy.isEmpty && !plain.isEmpty && !expressions.isEmpty {
            throw LogbookError(
                .invalidFetch, "attributes and expressions together need propertiesToGroupBy", entity: layout.name)
        }
        return (groupSlots, plain, expressions)
    }

    /// The values of every object a dictionary fetch reads: straight from the store's records
    /// when nothing unsaved or object-bound is involved (no object is made), else from the objects.
    private func recordValues<T: ManagedObject>(_ unlimited: FetchRequest<T>, layout: EntityLayout) throws
        -> [[FieldValue]]
    {
        let plan = try plan(unlimited, layout: layout)
        if plan.objectResidual == nil && !considersPendingChanges(unlimited, layout)
            && !spansSubentities(unlimited, layout) && (unlimited.sortDescriptors.isEmpty || plan.orderFromIndex)
        {
            let matches = try storeMatches(
                plan, layout: layout, snapshot: readSnapshot(), output: .records, limit: nil)
            lastFetchRecordsRead = matches.examined
            let destinations = layout.toOne.map { storeLayout.keyspace[layout.relationshipDestination[$0]] }
            let attributeCount = layout.attributeCount
            return try RecordCodec.readingRecords(of: layout) {
                try matches.bytes.withUnsafeBytes { all in
                    try matches.spans.map { span in
                        try RecordCodec.decode(
                            UnsafeRawBufferPointer(rebasing: all[Int(span.offset)..<Int(span.offset + span.count)]),
                            layout: layout, destinationKeyspace: { destinations[$0 - attributeCount] })
                    }
                }
            }
        } else {
            let objects = try fetchObjects(unlimited, layout: layout, plan: plan)
            // Values are read from the slots: faults made from the fetch's records decode them now.
            for o in objects where o.flags.contains(.fault) { try fulfill(o) }
            return objects.map(\.slots)
        }
    }

    /// The dictionaries of `records`: one per record without grouping or expressions, else one
    /// per group (one group of everything without group-by), in the order of the group keys.
    private func dictionaries(
        _ records: [[FieldValue]], plain: [(name: String, slot: Int)], expressions: [(FetchProperty, Int?)],
        groupBy: [String], groupSlots: [Int], layout: EntityLayout
    ) -> [[String: any Sendable]] {
        func value(_ slots: [FieldValue], _ slot: Int) -> (any Sendable)? {
            if slot >= layout.attributeCount {
                guard case .object(let k) = slots[slot] else { return nil }
                return ObjectID(store: storeLayout.identity, key: k)
            }
            return slots[slot].value(type: layout.entity.attributes[slot].type)
        }
        var rows: [[String: any Sendable]] = []
        if groupBy.isEmpty && expressions.isEmpty {
            rows.reserveCapacity(records.count)
            for o in records {
                var row: [String: any Sendable] = [:]
                for (name, s) in plain { row[name] = value(o, s) }
                rows.append(row)
            }
        } else {
            // Groups in order of their keys (one group of everything without group-by).
            var groups: [[FieldValue]: [[FieldValue]]] = [:]
            for o in records { groups[groupSlots.map { o[$0] }, default: []].append(o) }
            if groupBy.isEmpty && groups.isEmpty { groups[[]] = [] }
            let ordered = groups.keys.sorted { a, b in
                for (x, y) in zip(a, b) {
                    let c = FieldValue.compare(x, y)
                    if c != 0 { return c < 0 }
                }
                return false
            }
            for key in ordered {
                let members = groups[key]!
                var row: [String: any Sendable] = [:]
                if let first = members.first { for (name, s) in plain { row[name] = value(first, s) } }
                for (p, s) in expressions {
                    row[p.name] = Self.aggregate(p.function!, members, slot: s, layout: layout)
                }
                rows.append(row)
            }
        }
        return rows
    }

    static func aggregate(_ f: FetchProperty.Function, _ records: [[FieldValue]], slot: Int?, layout: EntityLayout)
        -> (any Sendable)?
    {
        guard let slot else { return records.count }
        let present = records.map { $0[slot] }.filter { !$0.isNull }
        let type: AttributeType? = slot < layout.attributeCount ? layout.entity.attributes[slot].type : nil
        switch f {
        case .count: return present.count
        case .sum, .average:
            if case .int = present.first, f == .sum {
                return present.reduce(Int64(0)) {
                    if case .int(let i) = $1 { return $0 &+ i }
                    return $0
                }
            }
            let numbers = present.compactMap(\.number)
            if f == .sum { return numbers.reduce(0, +) }
            return numbers.isEmpty ? nil : numbers.reduce(0, +) / Double(numbers.count)
        case .min, .max:
            let best = present.min { a, b in f == .min ? FieldValue.compare(a, b) < 0 : FieldValue.compare(a, b) > 0 }
            guard let best else { return nil }
            if let type { return best.value(type: type) }
            if case .object(let k) = best { return k }
            return nil
        }
    }

    static func compareResults(_ a: (any Sendable)?, _ b: (any Sendable)?, _ comparison: StringComparison) -> Int {
        switch (a, b) {
        case (nil, nil): return 0
        case (nil, _): return -1
        case (_, nil): return 1
        default: break
        }
        if let x = a as? String, let y = b as? String { return SortKey.compare(.string(x), .string(y), comparison) }
        if let x = PredicateEvaluator.number(a!), let y = PredicateEvaluator.number(b!) {
            return x == y ? 0 : (x < y ? -1 : 1)
        }
        if let x = a as? Date, let y = b as? Date { return x == y ? 0 : (x < y ? -1 : 1) }
        if let x = a as? Bool, let y = b as? Bool { return x == y ? 0 : (!x ? -1 : 1) }
        return 0
    }
}
