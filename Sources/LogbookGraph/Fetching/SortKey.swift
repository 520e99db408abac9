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
    /// For a key path through to-one relationships (`author.name`): its names, the last an
    /// attribute of the last relationship's destination (`slot` is then unused).
    var path: [String]? = nil

    /// `allowsPaths`: whether keys through relationships are allowed (a sort that reads the
    /// related objects, so not one that runs away from a context).
    static func resolve(
        _ descriptors: [FetchSortDescriptor], layout: EntityLayout, model: ManagedObjectModel, allowsPaths: Bool = true
    ) throws
        -> [SortKey]
    {
        try descriptors.map { s in
            if s.key.contains(".") {
                let names = s.key.split(separator: ".").map(String.init)
                var current = layout
                for (n, name) in names.enumerated() {
                    let last = n == names.count - 1
                    guard let slot = current.slotByName[name] else {
                        throw LogbookError(
                            .unknownKey, "cannot sort by \(s.key): \(current.name) has no property \(name)",
                            entity: layout.name, key: s.key)
                    }
                    if last { continue }
                    guard slot >= current.attributeCount, let r = current.relationshipByName[name],
                        !current.entity.relationships[r].isToMany
                    else {
                        throw LogbookError(
                            .unknownKey, "cannot sort by \(s.key): \(name) is not a to-one relationship",
                            entity: layout.name, key: s.key)
                    }
                    current = model.layouts[current.relationshipDestination[r]]
                }
                guard allowsPaths else {
                    throw LogbookError(
                        .invalidArgument,
                        "an asynchronous fetch cannot sort by \(s.key), a key path through a relationship: sort by an attribute",
                        entity: layout.name, key: s.key)
                }
                return SortKey(slot: -1, ascending: s.ascending, comparison: s.comparison, name: s.key, path: names)
            }
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
        let hasPaths = keys.contains { $0.path != nil }
        if keys.allSatisfy({ $0.comparison == .plain }) && !byName && !hasPaths {
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
                let value =
                    if let path = k.path { pathValue(o, path) } else if byName {
                        o.layout.slotByName[k.name].map { o.slots[$0] } ?? .null
                    } else { o.slots[k.slot] }
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

    /// The value at the end of a key path through to-one relationships (no value when one of
    /// them has none), read through the object's context (on its queue, as a fetch is).
    static func pathValue(_ o: ManagedObject, _ path: [String]) -> FieldValue {
        var current = o
        for name in path.dropLast() {
            guard let next = (try? current.value(forKey: name)) as? ManagedObject else { return .null }
            current = next
        }
        let last = path[path.count - 1]
        // Reading the value fulfils a fault; the slot then holds the stored form.
        _ = try? current.value(forKey: last)
        guard let slot = current.layout.slotByName[last], !current.flags.contains(.fault) else { return .null }
        return current.slots[slot]
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
