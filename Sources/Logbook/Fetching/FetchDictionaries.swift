import Foundation

/// A property of a dictionary result (Core Data's `propertiesToFetch`): an attribute's value,
/// or an expression over the objects of a group (count, sum, average, minimum, maximum).
///
/// ```swift
/// var request = FetchRequest<Person>()
/// request.propertiesToFetch = [.attribute("lastName"), .count(as: "people"), .average("age", as: "meanAge")]
/// request.propertiesToGroupBy = ["lastName"]
/// let rows = try context.fetchDictionaries(request)   // [["lastName": "Smith", "people": 3, "meanAge": 41.0], …]
/// ```
public struct FetchProperty: Sendable, Hashable {
    /// An aggregate over the values of a key (Core Data's expression functions).
    public enum Function: String, Sendable {
        /// The number of values (of objects, without a key).
        case count
        /// The sum of numeric values.
        case sum
        /// The mean of numeric values.
        case average
        /// The smallest value.
        case min
        /// The largest value.
        case max
    }
    /// The key in each result dictionary.
    public var name: String
    /// The attribute or to-one relationship read (nil for a count of objects).
    public var key: String?
    /// The expression, nil for the attribute's own value.
    public var function: Function?

    /// The value of an attribute (a to-one relationship gives the related object's `ObjectID`).
    public static func attribute(_ key: String) -> FetchProperty { FetchProperty(name: key, key: key, function: nil) }
    /// The number of objects (with `key`: of objects whose `key` has a value).
    public static func count(_ key: String? = nil, as name: String) -> FetchProperty {
        FetchProperty(name: name, key: key, function: .count)
    }
    /// The sum of a numeric attribute (an integer for integer attributes, else a Double).
    public static func sum(_ key: String, as name: String) -> FetchProperty {
        FetchProperty(name: name, key: key, function: .sum)
    }
    /// The mean of a numeric attribute, as a Double (absent when no object has a value).
    public static func average(_ key: String, as name: String) -> FetchProperty {
        FetchProperty(name: name, key: key, function: .average)
    }
    /// The smallest value of an attribute (numbers, strings, dates).
    public static func min(_ key: String, as name: String) -> FetchProperty {
        FetchProperty(name: name, key: key, function: .min)
    }
    /// The largest value of an attribute.
    public static func max(_ key: String, as name: String) -> FetchProperty {
        FetchProperty(name: name, key: key, function: .max)
    }
}

extension ManagedObjectContext {
    /// The request's results as dictionaries of the `propertiesToFetch` (Core Data's dictionary
    /// result type). Without `propertiesToGroupBy`: one dictionary per object when only
    /// attributes are asked for, or a single dictionary when only expressions are. With it: one
    /// dictionary per distinct combination of the group-by keys, each expression computed over
    /// the group; every plain attribute must then be a group-by key. A key without a value is
    /// left out of its dictionary. Sort descriptors name result keys; `fetchOffset` and
    /// `fetchLimit` apply to the dictionaries. Unsaved changes are seen, as with every fetch.
    public func fetchDictionaries<T: ManagedObject>(_ request: FetchRequest<T>) throws -> [[String: any Sendable]] {
        let layout = try model.layout(named: request.entityName)
        var properties = request.propertiesToFetch
        if properties.isEmpty {
            properties =
                layout.entity.attributes.map { .attribute($0.name) }
                + layout.toOne.map { .attribute(layout.slotNames[$0]) }
        }
        let groupBy = request.propertiesToGroupBy
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
        var unlimited = request
        unlimited.fetchLimit = 0
        unlimited.fetchOffset = 0
        unlimited.fetchBatchSize = 0
        unlimited.sortDescriptors =
            groupBy.isEmpty && expressions.isEmpty
            ? request.sortDescriptors.filter { layout.slotByName[$0.key] != nil } : []
        // The values of every matching object: straight from the store's records when nothing
        // unsaved or object-bound is involved (no object is made), else from the objects.
        let records: [[Slot]]
        let plan = try plan(unlimited, layout: layout)
        if plan.objectResidual == nil && !considersPendingChanges(unlimited, layout)
            && !spansSubentities(unlimited, layout) && (unlimited.sortDescriptors.isEmpty || plan.orderFromIndex)
        {
            let matches = try storeMatches(
                plan, layout: layout, snapshot: readSnapshot(), output: .records, limit: nil)
            lastFetchRecordsRead = matches.examined
            let destinations = layout.toOne.map { storeLayout.keyspace[layout.relationshipDestination[$0]] }
            let attributeCount = layout.attributeCount
            records = try RecordCodec.readingRecords(of: layout) {
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
            records = objects.map(\.slots)
        }

        func value(_ slots: [Slot], _ slot: Int) -> (any Sendable)? {
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
            var groups: [[Slot]: [[Slot]]] = [:]
            for o in records { groups[groupSlots.map { o[$0] }, default: []].append(o) }
            if groupBy.isEmpty && groups.isEmpty { groups[[]] = [] }
            let ordered = groups.keys.sorted { a, b in
                for (x, y) in zip(a, b) {
                    let c = Slot.compare(x, y)
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
        if !request.sortDescriptors.isEmpty && !(groupBy.isEmpty && expressions.isEmpty) {
            rows.sort { a, b in
                for d in request.sortDescriptors {
                    let c = Self.compareResults(a[d.key], b[d.key], d.comparison)
                    if c != 0 { return d.ascending ? c < 0 : c > 0 }
                }
                return false
            }
        }
        var result = rows[...]
        if request.fetchOffset > 0 { result = result.dropFirst(request.fetchOffset) }
        if request.fetchLimit > 0 { result = result.prefix(request.fetchLimit) }
        return Array(result)
    }

    static func aggregate(_ f: FetchProperty.Function, _ records: [[Slot]], slot: Int?, layout: EntityLayout)
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
            let best = present.min { a, b in f == .min ? Slot.compare(a, b) < 0 : Slot.compare(a, b) > 0 }
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
