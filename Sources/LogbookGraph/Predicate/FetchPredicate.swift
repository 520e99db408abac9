import Foundation

/// A condition on objects, written in Core Data's predicate format language (what
/// `NSPredicate(format:)` parses on Apple platforms, which Foundation on Linux lacks).
///
/// ```swift
/// let p = try FetchPredicate(format: "(age >= %d) AND (age <= %d)", 100, 200)
/// let q = try FetchPredicate(format: "lastName BEGINSWITH[cd] %@ OR ANY employees.age > 60", "ro")
/// let r = try FetchPredicate(format: "SUBQUERY(employees, $e, $e.age < 30).@count > 2")
/// try p.evaluate(with: person)
/// ```
///
/// Comparisons `== = != <> < <= > >=`, `BETWEEN {a, b}`, `IN`, `BEGINSWITH`, `ENDSWITH`,
/// `CONTAINS`, `LIKE` (`*` and `?`), `MATCHES` (a regular expression), with `[c]`, `[d]` or
/// `[cd]`; `AND OR NOT && || !` and parentheses; `TRUEPREDICATE`, `FALSEPREDICATE`; strings,
/// numbers, `nil`/`NULL`, `TRUE`/`FALSE`/`YES`/`NO`, `{lists}`; arguments `%@ %K %d %i %ld %f %lf`;
/// key paths through to-one relationships (`manager.lastName`); `ANY`, `ALL`, `NONE` over to-many
/// relationships; `@count`, `@sum`, `@avg`, `@min`, `@max`; `SUBQUERY`. Comparing a transformable
/// attribute with a value compares the transformed values. A syntax error throws
/// `.invalidPredicate` saying what was expected and at which column.
public struct FetchPredicate: @unchecked Sendable, CustomStringConvertible {
    // @unchecked: the tree holds the argument values given at creation, which are only read.
    let node: PredicateNode
    /// The format string the predicate was made from.
    public let format: String

    /// A predicate from a format string with `%@`, `%d`, `%K`… arguments, as Core Data's `predicateWithFormat:`.
    ///
    /// ```swift
    /// try FetchPredicate(format: "age >= %d AND lastName BEGINSWITH[c] %@", 18, "rob")
    /// ```
    public init(format: String, _ arguments: Any?...) throws {
        try self.init(format: format, argumentArray: arguments)
    }

    /// A predicate from a format string and an array of arguments.
    public init(format: String, argumentArray: [Any?]) throws {
        var parser = try PredicateParser(format, arguments: argumentArray)
        node = try parser.parse()
        self.format = format
    }

    init(node: PredicateNode, format: String) {
        self.node = node
        self.format = format
    }

    /// `TRUEPREDICATE`: every object.
    public static let alwaysTrue = FetchPredicate(node: .constant(true), format: "TRUEPREDICATE")
    /// `FALSEPREDICATE`: no object.
    public static let alwaysFalse = FetchPredicate(node: .constant(false), format: "FALSEPREDICATE")

    public var description: String { format }

    /// Whether `object` satisfies the predicate. Unknown keys and values that cannot be
    /// compared are errors that name the key and the column.
    public func evaluate(with object: ManagedObject) throws -> Bool {
        var evaluator = PredicateEvaluator(format: format)
        return try evaluator.test(node, object: object)
    }
}

/// A transformable attribute's stored blob, compared by transforming the other side.
struct TransformedValue {
    var blob: Data
    var transformer: String
}

struct PredicateEvaluator {
    let format: String
    var bindings: [String: Any?] = [:]

    func fail(_ message: String, _ column: Int, key: String? = nil) -> LogbookError {
        LogbookError(.invalidPredicate, "\(message) at column \(column) of \"\(format)\"", key: key)
    }

    mutating func test(_ node: PredicateNode, object: ManagedObject) throws -> Bool {
        switch node {
        case .constant(let b): return b
        case .not(let n): return try !test(n, object: object)
        case .and(let parts):
            for p in parts where try !test(p, object: object) { return false }
            return true
        case .or(let parts):
            for p in parts where try test(p, object: object) { return true }
            return false
        case .comparison(let c): return try compare(c, object: object)
        }
    }

    // MARK: Expressions

    mutating func value(_ e: ExpressionNode, object: ManagedObject) throws -> Any? {
        switch e {
        case .value(let v): return v
        case .list(let items): return try items.map { try value($0, object: object) } as [Any?]
        case .keyPath(let path, let column): return try resolve(path, from: object, column: column)
        case .variable(let name, let path, let column):
            guard let bound = bindings[name] else { throw fail("unknown variable $\(name)", column) }
            return path.isEmpty ? bound : try resolve(path, from: bound, column: column)
        case .subquery(let collection, let variable, let predicate, let aggregate, let column):
            guard let items = asCollection(try value(collection, object: object)) else {
                throw fail("SUBQUERY needs a to-many relationship", column)
            }
            var kept: [Any?] = []
            let saved = bindings[variable]
            for item in items {
                bindings[variable] = item
                if let o = item as? ManagedObject, try test(predicate, object: o) { kept.append(o) }
            }
            bindings[variable] = saved ?? nil
            if saved == nil { bindings.removeValue(forKey: variable) }
            switch aggregate {
            case nil: return kept
            case "count": return kept.count
            default: throw fail("only @count follows a SUBQUERY", column)
            }
        case .arithmetic(let op, let a, let b, let column):
            return try arithmetic(op, try value(a, object: object), try value(b, object: object), column: column)
        case .unary(let op, let a, let column):
            return try unary(op, try value(a, object: object), column: column)
        case .function(let name, let args, let column):
            return try function(name, try args.map { try value($0, object: object) }, column: column)
        case .element(let base, let index, let column):
            let v = try value(base, object: object)
            guard let items = asCollection(v) else {
                if v == nil { return nil }
                throw fail("[FIRST], [LAST], [SIZE] and [n] need a collection", column)
            }
            switch index {
            case .first: return items.first ?? nil
            case .last: return items.last ?? nil
            case .size: return items.count
            case .at(let n):
                guard n >= 0, n < items.count else { throw fail("index \(n) is outside 0..<\(items.count)", column) }
                return items[n]
            }
        case .path(let base, let path, let column):
            return try resolve(path, from: try value(base, object: object), column: column)
        }
    }

    func resolve(_ path: [String], from start: Any?, column: Int) throws -> Any? {
        var current: Any? = start
        var i = 0
        while i < path.count {
            let key = path[i]
            if key.hasPrefix("@") {
                let rest = Array(path[(i + 1)...])
                var items = asCollection(current) ?? []
                if !rest.isEmpty { items = try items.map { try resolve(rest, from: $0, column: column) } }
                return try aggregate(key, items, column: column)
            }
            if let items = asCollection(current) {
                // A key over a collection maps it (employees.age: every employee's age).
                let rest = Array(path[i...])
                return try items.map { try resolve(rest, from: $0, column: column) } as [Any?]
            }
            guard let object = current as? ManagedObject else {
                if current == nil { return nil }
                throw fail("\(key) is not a key of \(type(of: current!))", column, key: key)
            }
            guard
                object.layout.slotByName[key] != nil || object.layout.relationshipByName[key] != nil
                    || object.layout.entity.fetchedProperties.contains(where: { $0.name == key })
            else {
                if key == "entity" {
                    // `entity == 'Car'`, `entity.name == 'Car'`: the object's own entity.
                    current = object.layout.name
                    i += (i + 1 < path.count && path[i + 1] == "name") ? 2 : 1
                    continue
                }
                throw fail("\(object.layout.name) has no key \(key)", column, key: key)
            }
            if let slot = object.layout.slot(named: key), slot < object.layout.attributeCount,
                case .transformable(let name) = object.layout.entity.attributes[slot].type
            {
                _ = try object.checkUsable(key)
                if case .data(let blob) = object.slots[slot] {
                    current = TransformedValue(blob: blob, transformer: name)
                } else {
                    current = nil
                }
            } else {
                current = try object.value(forKey: key)
            }
            i += 1
        }
        return current
    }

    func asCollection(_ v: Any?) -> [Any?]? {
        if v is TransformedValue {
            // A transformable attribute holding a collection (a `Codable` array): its elements.
            return asCollection((try? Self.decoded(v)) ?? nil)
        }
        switch v {
        case let s as Set<ManagedObject>: return s.sorted { $0.engineKey < $1.engineKey }
        case let a as [Any?]: return a
        case let a as [Any]: return a.map { $0 }
        case let s as Set<AnyHashable>: return Array(s)
        default: return nil
        }
    }

    func aggregate(_ name: String, _ items: [Any?], column: Int) throws -> Any? {
        if name == "@count" { return items.count }
        if name.hasPrefix("@distinct") || name == "@unionofobjects" {
            switch name {
            case "@distinctunionofobjects": return Self.distinct(items.compactMap { $0 })
            case "@unionofobjects": return items.compactMap { $0 }
            default: return Self.distinct(items.flatMap { asCollection($0) ?? [] }.compactMap { $0 })
            }
        }
        let numbers = try items.compactMap { item -> Double? in
            guard let item else { return nil }
            guard let d = Self.number(item) else { throw fail("\(name) needs numbers, not \(type(of: item))", column) }
            return d
        }
        switch name {
        case "@sum": return numbers.reduce(0, +)
        case "@avg": return numbers.isEmpty ? nil : numbers.reduce(0, +) / Double(numbers.count)
        case "@min": return numbers.min()
        case "@max": return numbers.max()
        default:
            throw fail(
                "unknown aggregate \(name); use @count, @sum, @avg, @min, @max, @distinctUnionOfObjects or @unionOfObjects",
                column)
        }
    }

    // MARK: Comparisons

    mutating func compare(_ c: Comparison, object: ManagedObject) throws -> Bool {
        let left = try value(c.lhs, object: object)
        let right = try value(c.rhs, object: object)
        switch c.modifier {
        case .direct:
            return try apply(c, left, right)
        case .any, .all, .none:
            guard let items = asCollection(left) else {
                throw fail("ANY, ALL and NONE need a to-many key path on the left", c.column)
            }
            switch c.modifier {
            case .any: return try items.contains { try apply(c, $0, right) }
            case .all: return try items.allSatisfy { try apply(c, $0, right) }
            default: return try !items.contains { try apply(c, $0, right) }
            }
        }
    }

    func apply(_ c: Comparison, _ a: Any?, _ b: Any?) throws -> Bool {
        switch c.op {
        case .equal: return try equal(a, b, c)
        case .notEqual: return try !equal(a, b, c)
        case .less, .lessOrEqual, .greater, .greaterOrEqual:
            guard let a, let b else { return false }
            let order = try ordering(a, b, c)
            switch c.op {
            case .less: return order < 0
            case .lessOrEqual: return order <= 0
            case .greater: return order > 0
            default: return order >= 0
            }
        case .between:
            guard let bounds = b as? [Any?], bounds.count == 2, let a, let lo = bounds[0], let hi = bounds[1] else {
                return false
            }
            return try ordering(a, lo, c) >= 0 && ordering(a, hi, c) <= 0
        case .in:
            if let items = asCollection(b) { return try items.contains { try equal(a, $0, c) } }
            if let s = b as? String, let t = a as? String { return fold(s, c).contains(fold(t, c)) }
            throw fail("IN needs a collection or a string on the right", c.column)
        case .contains:
            if let items = asCollection(a) { return try items.contains { try equal($0, b, c) } }
            guard let s = a as? String, let t = b as? String else { return false }
            return fold(s, c).contains(fold(t, c))
        case .beginsWith, .endsWith:
            guard let s = a as? String, let t = b as? String else {
                if a == nil || b == nil { return false }
                throw fail("\(c.op.rawValue) compares strings, not \(type(of: a!)) and \(type(of: b!))", c.column)
            }
            return c.op == .beginsWith ? fold(s, c).hasPrefix(fold(t, c)) : fold(s, c).hasSuffix(fold(t, c))
        case .like, .matches:
            guard let s = a as? String, let pattern = b as? String else { return false }
            let regex: String
            if c.op == .like {
                var r = ""
                for ch in pattern {
                    switch ch {
                    case "*": r += ".*"
                    case "?": r += "."
                    default: r += NSRegularExpression.escapedPattern(for: String(ch))
                    }
                }
                regex = r
            } else {
                regex = pattern
            }
            var options: NSRegularExpression.Options = [.dotMatchesLineSeparators]
            if c.caseInsensitive { options.insert(.caseInsensitive) }
            guard let re = try? NSRegularExpression(pattern: "^(?:\(regex))$", options: options) else {
                throw fail("\(pattern) is not a valid regular expression", c.column)
            }
            let subject = c.diacriticInsensitive ? s.folding(options: .diacriticInsensitive, locale: nil) : s
            return re.firstMatch(in: subject, range: NSRange(subject.startIndex..., in: subject)) != nil
        }
    }

    func fold(_ s: String, _ c: Comparison) -> String {
        var options: String.CompareOptions = []
        if c.caseInsensitive { options.insert(.caseInsensitive) }
        if c.diacriticInsensitive { options.insert(.diacriticInsensitive) }
        return options.isEmpty ? s : s.folding(options: options, locale: nil)
    }

    static func number(_ v: Any) -> Double? {
        switch v {
        case let x as Int: Double(x)
        case let x as Int64: Double(x)
        case let x as Int32: Double(x)
        case let x as Int16: Double(x)
        case let x as Int8: Double(x)
        case let x as UInt: Double(x)
        case let x as UInt64: Double(x)
        case let x as UInt32: Double(x)
        case let x as UInt16: Double(x)
        case let x as UInt8: Double(x)
        case let x as Double: x
        case let x as Float: Double(x)
        case let x as Decimal: NSDecimalNumber(decimal: x).doubleValue
        default: nil
        }
    }

    func equal(_ a: Any?, _ b: Any?, _ c: Comparison) throws -> Bool {
        switch (a, b) {
        case (nil, nil): return true
        case (nil, _), (_, nil): return false
        default: break
        }
        let a = a!
        let b = b!
        if let t = a as? TransformedValue { return try transformedEqual(t, b, c) }
        if let t = b as? TransformedValue { return try transformedEqual(t, a, c) }
        if let x = a as? String, let y = b as? String { return fold(x, c) == fold(y, c) }
        if let x = a as? String, let y = b as? EntityDescription { return x == y.name }
        if let x = a as? EntityDescription, let y = b as? String { return x.name == y }
        if let x = Self.number(a), let y = Self.number(b) { return x == y }
        if let x = a as? Bool, let y = b as? Bool { return x == y }
        if let x = a as? Bool, let y = Self.number(b) { return (x ? 1 : 0) == y }
        if let x = a as? ManagedObject {
            if let y = b as? ManagedObject { return x === y }
            if let y = b as? ObjectID { return x.objectID == y }
        }
        if let x = a as? ObjectID, let y = b as? ManagedObject { return x == y.objectID }
        if let x = a as? Date, let y = b as? Date { return x == y }
        if let x = a as? AnyHashable, let y = b as? AnyHashable { return x == y }
        throw fail("cannot compare \(type(of: a)) with \(type(of: b))", c.column)
    }

    func transformedEqual(_ t: TransformedValue, _ other: Any, _ c: Comparison) throws -> Bool {
        if let o = other as? TransformedValue { return t.blob == o.blob }
        let blob = try AttributeTransformers.registry.forward(other, transformer: t.transformer)
        return blob == t.blob
    }

    func ordering(_ a: Any, _ b: Any, _ c: Comparison) throws -> Int {
        if let x = Self.number(a), let y = Self.number(b) { return x == y ? 0 : (x < y ? -1 : 1) }
        if let x = a as? String, let y = b as? String {
            let (p, q) = (fold(x, c), fold(y, c))
            return p == q ? 0 : (p < q ? -1 : 1)
        }
        if let x = a as? Date, let y = b as? Date { return x == y ? 0 : (x < y ? -1 : 1) }
        throw fail("cannot order \(type(of: a)) and \(type(of: b))", c.column)
    }
}
