import Foundation

/// The arithmetic, bitwise and function expressions of the predicate language, as NSExpression
/// computes them: integers stay integers for `+ - *` and bitwise operators, `/` and `**` give
/// doubles, a missing value gives no value.
extension PredicateEvaluator {
    static func distinct(_ items: [Any]) -> [Any] {
        var seen: [AnyHashable] = []
        var out: [Any] = []
        for item in items {
            let key: AnyHashable =
                (item as? ManagedObject).map { AnyHashable(ObjectIdentifier($0)) } ?? (item as? AnyHashable)
                ?? AnyHashable("\(item)")
            if !seen.contains(key) {
                seen.append(key)
                out.append(item)
            }
        }
        return out
    }

    static func integer(_ v: Any) -> Int64? {
        switch v {
        case let x as Int: Int64(x)
        case let x as Int64: x
        case let x as Int32: Int64(x)
        case let x as Int16: Int64(x)
        case let x as Int8: Int64(x)
        case let x as UInt8: Int64(x)
        case let x as UInt16: Int64(x)
        case let x as UInt32: Int64(x)
        case let x as Bool: x ? 1 : 0
        default: nil
        }
    }

    func arithmetic(_ op: String, _ a: Any?, _ b: Any?, column: Int) throws -> Any? {
        guard let a, let b else { return nil }
        if ["&", "|", "^"].contains(op) {
            guard let x = Self.integer(a), let y = Self.integer(b) else {
                throw fail("\(op) needs integers, not \(type(of: a)) and \(type(of: b))", column)
            }
            switch op {
            case "&": return Int(x & y)
            case "|": return Int(x | y)
            default: return Int(x ^ y)
            }
        }
        if op == "+" || op == "-", let d = a as? Date, let n = Self.number(b) {
            return d.addingTimeInterval(op == "+" ? n : -n)
        }
        if let x = Self.integer(a), let y = Self.integer(b), op == "+" || op == "-" || op == "*" {
            let (r, overflow): (Int64, Bool) =
                switch op {
                case "+": x.addingReportingOverflow(y)
                case "-": x.subtractingReportingOverflow(y)
                default: x.multipliedReportingOverflow(by: y)
                }
            if !overflow { return Int(r) }
        }
        guard let x = Self.number(a), let y = Self.number(b) else {
            throw fail("\(op) needs numbers, not \(type(of: a)) and \(type(of: b))", column)
        }
        switch op {
        case "+": return x + y
        case "-": return x - y
        case "*": return x * y
        case "/":
            guard y != 0 else { throw fail("division by zero", column) }
            return x / y
        default: return Foundation.pow(x, y)
        }
    }

    func unary(_ op: String, _ a: Any?, column: Int) throws -> Any? {
        guard let a else { return nil }
        if op == "~" {
            guard let x = Self.integer(a) else { throw fail("~ needs an integer, not \(type(of: a))", column) }
            return Int(~x)
        }
        if let x = Self.integer(a), x != .min { return Int(-x) }
        guard let x = Self.number(a) else { throw fail("- needs a number, not \(type(of: a))", column) }
        return -x
    }

    /// The built-in functions of NSExpression, by name.
    /// The function a `#Predicate` key path into a value becomes (arguments: the value, the
    /// `AnyKeyPath`).
    static let swiftKeyPath = "logbook.swiftKeyPath:"
    /// The first argument, or the second when the first has no value (`a ?? b`).
    static let coalesce = "logbook.coalesce:"
    /// The entity name of an object (`$0 is T`).
    static let entityOf = "logbook.entityOf:"
    /// The object when its entity is one of a list, else nil (`$0 as? T`).
    static let ifEntity = "logbook.ifEntity:in:"

    /// A transformable attribute's value as its transformer gives it back; any other value as is.
    static func decoded(_ value: Any?) throws -> Any? {
        guard let t = value as? TransformedValue else { return value }
        return try AttributeTransformers.registry.reverse(t.blob, transformer: t.transformer)
    }

    func function(_ name: String, _ args: [Any?], column: Int) throws -> Any? {
        func argument(_ i: Int) throws -> Any? {
            guard i < args.count else { throw fail("\(name) needs \(i + 1) argument\(i == 0 ? "" : "s")", column) }
            return args[i]
        }
        func number(_ i: Int) throws -> Double? {
            guard let v = try argument(i) else { return nil }
            guard let d = Self.number(v) else { throw fail("\(name) needs a number, not \(type(of: v))", column) }
            return d
        }
        func string(_ i: Int) throws -> String? {
            guard let v = try argument(i) else { return nil }
            guard let s = v as? String else { throw fail("\(name) needs a string, not \(type(of: v))", column) }
            return s
        }
        func numbers(_ i: Int) throws -> [Double] {
            let v = try argument(i)
            let items = asCollection(v) ?? (v.map { [$0] } ?? [])
            return try items.compactMap { item in
                guard let item else { return nil }
                guard let d = Self.number(item) else {
                    throw fail("\(name) needs numbers, not \(type(of: item))", column)
                }
                return d
            }
        }
        func integers() throws -> (Int64, Int64)? {
            guard let a = try argument(0), let b = try argument(1) else { return nil }
            guard let x = Self.integer(a), let y = Self.integer(b) else { throw fail("\(name) needs integers", column) }
            return (x, y)
        }
        switch name {
        case Self.swiftKeyPath:
            // A Swift key path into a value, a transformable attribute's decoded first.
            guard let keyPath = try argument(1) as? AnyKeyPath else { throw fail("\(name) needs a key path", column) }
            guard let value = try Self.decoded(try argument(0)) else { return nil }
            guard let result = value[keyPath: keyPath] else {
                throw fail("\(keyPath) does not apply to \(type(of: value))", column)
            }
            return SwiftPredicateTranslator.plain(result)
        case Self.coalesce: return try argument(0) ?? argument(1)
        case Self.entityOf:
            return (try argument(0) as? ManagedObject)?.layout.name
        case Self.ifEntity:
            guard let object = try argument(0) as? ManagedObject, let names = try argument(1) as? [String] else {
                return nil
            }
            return names.contains(object.layout.name) ? object : nil
        case "now", "now()": return Date()
        case "random": return Double.random(in: 0..<1)
        case "lowercase:": return try string(0)?.lowercased()
        case "uppercase:": return try string(0)?.uppercased()
        case "canonical:":
            return try string(0)?.folding(options: [.caseInsensitive, .diacriticInsensitive], locale: nil)
        case "length:": return try string(0)?.count
        case "noindex:": return try argument(0)
        case "count:": return asCollection(try argument(0))?.count ?? 0
        case "sum:": return try numbers(0).reduce(0, +)
        case "min:": return try numbers(0).min()
        case "max:": return try numbers(0).max()
        case "average:":
            let n = try numbers(0)
            return n.isEmpty ? nil : n.reduce(0, +) / Double(n.count)
        case "median:":
            let n = try numbers(0).sorted()
            guard !n.isEmpty else { return nil }
            return n.count % 2 == 1 ? n[n.count / 2] : (n[n.count / 2 - 1] + n[n.count / 2]) / 2
        case "abs:":
            if let v = try argument(0), let i = Self.integer(v), i != .min { return Int(abs(i)) }
            return try number(0).map(abs)
        case "sqrt:": return try number(0).map { $0.squareRoot() }
        case "floor:": return try number(0).map { $0.rounded(.down) }
        case "ceiling:": return try number(0).map { $0.rounded(.up) }
        case "trunc:": return try number(0).map { $0.rounded(.towardZero) }
        case "exp:": return try number(0).map(Foundation.exp)
        case "ln:": return try number(0).map(Foundation.log)
        case "log:": return try number(0).map(Foundation.log10)
        case "add:to:": return try arithmetic("+", argument(0), argument(1), column: column)
        case "from:subtract:": return try arithmetic("-", argument(0), argument(1), column: column)
        case "multiply:by:": return try arithmetic("*", argument(0), argument(1), column: column)
        case "divide:by:": return try arithmetic("/", argument(0), argument(1), column: column)
        case "raise:toPower:": return try arithmetic("**", argument(0), argument(1), column: column)
        case "modulus:by:":
            guard let (x, y) = try integers() else { return nil }
            guard y != 0 else { throw fail("modulus by zero", column) }
            return Int(x.remainderReportingOverflow(dividingBy: y).partialValue)
        case "bitwiseAnd:with:": return try arithmetic("&", argument(0), argument(1), column: column)
        case "bitwiseOr:with:": return try arithmetic("|", argument(0), argument(1), column: column)
        case "bitwiseXor:with:": return try arithmetic("^", argument(0), argument(1), column: column)
        case "leftshift:by:":
            guard let (x, y) = try integers() else { return nil }
            return Int(x << y)
        case "rightshift:by:":
            guard let (x, y) = try integers() else { return nil }
            return Int(x >> y)
        case "onesComplement:": return try unary("~", argument(0), column: column)
        case "castObject:toType:": return try cast(argument(0), to: string(1) ?? "", column: column)
        default:
            throw fail("unknown function \(name)", column)
        }
    }

    /// `CAST(x, 'NSDate')`: a number of seconds since 2001-01-01 (Core Data's reference date)
    /// as a date; `'NSNumber'`: a string or date as a number; `'NSString'`: a value as text.
    func cast(_ v: Any?, to type: String, column: Int) throws -> Any? {
        guard let v else { return nil }
        switch type {
        case "NSDate", "Date":
            if let d = v as? Date { return d }
            if let n = Self.number(v) { return Date(timeIntervalSinceReferenceDate: n) }
            if let s = v as? String, let n = Double(s) { return Date(timeIntervalSinceReferenceDate: n) }
        case "NSNumber", "NSDecimalNumber":
            if let d = v as? Date { return d.timeIntervalSinceReferenceDate }
            if let b = v as? Bool { return b ? 1 : 0 }
            if Self.number(v) != nil { return v }
            if let s = v as? String { return Int(s).map { $0 as Any } ?? Double(s) }
        case "NSString", "String":
            if let s = v as? String { return s }
            if let d = v as? Date { return "\(d.timeIntervalSinceReferenceDate)" }
            return "\(v)"
        default:
            throw fail("CAST to \(type) is not supported; use NSDate, NSNumber or NSString", column)
        }
        throw fail("cannot CAST \(Swift.type(of: v)) to \(type)", column)
    }
}
