import Foundation
import LogbookEngine

extension FieldValue {
    /// Orders slots of one attribute: no value first, then by value.
    static func compare(_ a: FieldValue, _ b: FieldValue) -> Int {
        switch (a, b) {
        case (.null, .null): return 0
        case (.null, _): return -1
        case (_, .null): return 1
        case (.string(let x), .string(let y)): return x == y ? 0 : (x < y ? -1 : 1)
        case (.int(let x), .int(let y)): return x == y ? 0 : (x < y ? -1 : 1)
        case (.double(let x), .double(let y)): return x == y ? 0 : (x < y ? -1 : 1)
        case (.bool(let x), .bool(let y)): return x == y ? 0 : (!x ? -1 : 1)
        case (.object(let x), .object(let y)): return x == y ? 0 : (x < y ? -1 : 1)
        case (.data(let x), .data(let y)):
            return x.lexicographicallyPrecedes(y) ? -1 : (x == y ? 0 : 1)
        case (.boxed(let x), .boxed(let y)):
            switch (x.value, y.value) {
            case (.uuid(let p), .uuid(let q)):
                return p.uuidString == q.uuidString ? 0 : (p.uuidString < q.uuidString ? -1 : 1)
            case (.url(let p), .url(let q)):
                return p.absoluteString == q.absoluteString ? 0 : (p.absoluteString < q.absoluteString ? -1 : 1)
            case (.decimal(let p), .decimal(let q)): return p == q ? 0 : (p < q ? -1 : 1)
            default: return 0
            }
        default: return 0
        }
    }
}

/// A sort descriptor resolved against an entity: the slot, the direction, the comparison.
struct SortKey {
    var slot: Int
    var ascending: Bool
    var comparison: StringComparison
    /// The attribute or to-one relationship sorted by.
    var name: String = ""

    static func resolve(_ descriptors: [FetchSortDescriptor], layout: EntityLayout) throws -> [SortKey] {
        try descriptors.map { s in
            guard let slot = layout.slotByName[s.key] else {
                throw LogbookError(
                    .unknownKey, "cannot sort by \(s.key): \(layout.name) has no such attribute", entity: layout.name,
                    key: s.key)
            }
            return SortKey(slot: slot, ascending: s.ascending, comparison: s.comparison, name: s.key)
        }
    }

    /// Sorts objects by the keys in turn, ties by key (the order objects were inserted).
    ///
    /// `mixedEntities`: the objects are of an entity and its sub-entities; a to-one
    /// relationship's slot then differs between them and is looked up by name.
    static func sort(_ objects: inout [ManagedObject], by keys: [SortKey], mixedEntities: Bool = false) {
        let byName = mixedEntities && keys.contains { k in objects.contains { $0.layout.attributeCount <= k.slot } }
        if keys.allSatisfy({ $0.comparison == .plain }) && !byName {
            objects.sort { a, b in
                for k in keys {
                    let c = FieldValue.compare(a.slots[k.slot], b.slots[k.slot])
                    if c != 0 { return k.ascending ? c < 0 : c > 0 }
                }
                return a.engineKey < b.engineKey
            }
            return
        }
        // Folded strings are computed once per object, not once per comparison.
        let folded: [[FieldValue]] = objects.map { o in
            keys.map { k in
                let value = byName ? (o.layout.slotByName[k.name].map { o.slots[$0] } ?? .null) : o.slots[k.slot]
                guard let options = k.comparison.foldingOptions, case .string(let s) = value else {
                    return value
                }
                return .string(s.folding(options: options, locale: nil))
            }
        }
        var order = Array(objects.indices)
        order.sort { i, j in
            for (n, k) in keys.enumerated() {
                let c = compare(folded[i][n], folded[j][n], k.comparison)
                if c != 0 { return k.ascending ? c < 0 : c > 0 }
            }
            return objects[i].engineKey < objects[j].engineKey
        }
        objects = order.map { objects[$0] }
    }

    static func compare(_ a: FieldValue, _ b: FieldValue, _ comparison: StringComparison) -> Int {
        if case .string(let x) = a, case .string(let y) = b {
            switch comparison {
            case .localized: return x.localizedCompare(y).rawValue
            case .localizedStandard: return x.localizedStandardCompare(y).rawValue
            default: break
            }
        }
        return FieldValue.compare(a, b)
    }
}
