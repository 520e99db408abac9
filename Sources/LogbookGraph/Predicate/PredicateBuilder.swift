import Foundation

/// Predicates built without format strings, and the tree of any predicate, for code that
/// composes or inspects conditions at run time (Core Data's `NSCompoundPredicate` and
/// `NSComparisonPredicate`).
///
/// ```swift
/// let adults = FetchPredicate.compare("age", .greaterOrEqual, 18)
/// let named = FetchPredicate.compare("lastName", .beginsWith, "Ro", options: .caseInsensitive)
/// request.predicate = .and([adults, .not(named)])
/// print(request.predicate!)          // (age >= 18) AND (NOT (lastName BEGINSWITH[c] "Ro"))
/// ```
extension FetchPredicate {
    /// How a comparison compares (Core Data's `NSComparisonPredicate.Operator`).
    public enum Operator: String, Sendable, CaseIterable {
        case equal = "=="
        case notEqual = "!="
        case less = "<"
        case lessOrEqual = "<="
        case greater = ">"
        case greaterOrEqual = ">="
        case beginsWith = "BEGINSWITH"
        case endsWith = "ENDSWITH"
        case contains = "CONTAINS"
        case like = "LIKE"
        case matches = "MATCHES"
        case `in` = "IN"
        case between = "BETWEEN"

        var internalOperator: Comparison.Operator { Comparison.Operator(rawValue: rawValue)! }
    }

    /// How strings compare: `[c]`, `[d]`, `[cd]`.
    public struct Options: OptionSet, Sendable {
        public let rawValue: Int
        public init(rawValue: Int) { self.rawValue = rawValue }
        /// `[c]`.
        public static let caseInsensitive = Options(rawValue: 1)
        /// `[d]`.
        public static let diacriticInsensitive = Options(rawValue: 2)
    }

    /// Over a to-many key path: `ANY`, `ALL`, `NONE` (Core Data's `NSComparisonPredicate.Modifier`).
    public enum Quantifier: Sendable {
        case any, all, none
    }

    /// Every one of the predicates (`AND`); `TRUEPREDICATE` for none.
    public static func and(_ predicates: [FetchPredicate]) -> FetchPredicate {
        guard predicates.count != 1 else { return predicates[0] }
        let node: PredicateNode = predicates.isEmpty ? .constant(true) : .and(predicates.map(\.node))
        return FetchPredicate(node: node, format: node.formatDescription)
    }

    /// Any one of the predicates (`OR`); `FALSEPREDICATE` for none.
    public static func or(_ predicates: [FetchPredicate]) -> FetchPredicate {
        guard predicates.count != 1 else { return predicates[0] }
        let node: PredicateNode = predicates.isEmpty ? .constant(false) : .or(predicates.map(\.node))
        return FetchPredicate(node: node, format: node.formatDescription)
    }

    /// The opposite of a predicate (`NOT`).
    public static func not(_ predicate: FetchPredicate) -> FetchPredicate {
        let node = PredicateNode.not(predicate.node)
        return FetchPredicate(node: node, format: node.formatDescription)
    }

    /// A key path (`"manager.lastName"`, `"employees.@count"`) compared with a value (for
    /// `.between`, an array of two bounds; for `.in`, an array or set).
    public static func compare(
        _ keyPath: String, _ op: Operator, _ value: Any?, options: Options = [], quantifier: Quantifier? = nil
    ) -> FetchPredicate {
        let path = keyPath == "SELF" ? [] : keyPath.split(separator: ".").map(String.init)
        var rhs = ExpressionNode.value(value)
        if op == .between, let bounds = value as? [Any], bounds.count == 2 {
            rhs = .list([.value(bounds[0]), .value(bounds[1])])
        }
        let modifier: Comparison.Modifier =
            switch quantifier {
            case nil: .direct
            case .some(.any): .any
            case .some(.all): .all
            case .some(.none): .none
            }
        let c = Comparison(
            modifier: modifier, lhs: .keyPath(path, column: 0), op: op.internalOperator, rhs: rhs,
            caseInsensitive: options.contains(.caseInsensitive),
            diacriticInsensitive: options.contains(.diacriticInsensitive),
            column: 0)
        let node = PredicateNode.comparison(c)
        return FetchPredicate(node: node, format: node.formatDescription)
    }

    /// A predicate's structure: what `and`, `or`, `not` and comparisons it is made of.
    public indirect enum Tree: CustomStringConvertible {
        /// `TRUEPREDICATE` or `FALSEPREDICATE`.
        case constant(Bool)
        /// All of these.
        case and([Tree])
        /// Any of these.
        case or([Tree])
        /// Not this.
        case not(Tree)
        /// A comparison.
        case comparison(ComparisonTree)

        public var description: String {
            switch self {
            case .constant(let b): return b ? "TRUEPREDICATE" : "FALSEPREDICATE"
            case .and(let parts): return "AND(" + parts.map(\.description).joined(separator: ", ") + ")"
            case .or(let parts): return "OR(" + parts.map(\.description).joined(separator: ", ") + ")"
            case .not(let t): return "NOT(\(t))"
            case .comparison(let c): return "\(c.left) \(c.operator.rawValue) \(c.right)"
            }
        }
    }

    /// One comparison of a tree.
    public struct ComparisonTree {
        /// `ANY`, `ALL` or `NONE`, if any.
        public var quantifier: Quantifier?
        /// The left side.
        public var left: Expression
        /// The operator.
        public var `operator`: Operator
        /// The right side.
        public var right: Expression
        /// `[c]`, `[d]`.
        public var options: Options
    }

    /// One side of a comparison.
    public enum Expression: CustomStringConvertible {
        /// A key path from the object (`[]` is `SELF`).
        case keyPath([String])
        /// A constant (or an argument given to the format).
        case value(Any?)
        /// Anything else (a variable, a function, arithmetic…), in the format language.
        case expression(String)

        public var description: String {
            switch self {
            case .keyPath(let p): return p.isEmpty ? "SELF" : p.joined(separator: ".")
            case .value(let v): return ExpressionNode.literal(v)
            case .expression(let s): return s
            }
        }

        init(_ e: ExpressionNode) {
            switch e {
            case .keyPath(let p, _): self = .keyPath(p)
            case .value(let v): self = .value(v)
            default: self = .expression(e.formatDescription)
            }
        }
    }

    /// The predicate's tree.
    public var tree: Tree {
        func convert(_ n: PredicateNode) -> Tree {
            switch n {
            case .constant(let b): return .constant(b)
            case .and(let parts): return .and(parts.map(convert))
            case .or(let parts): return .or(parts.map(convert))
            case .not(let inner): return .not(convert(inner))
            case .comparison(let c):
                var options: Options = []
                if c.caseInsensitive { options.insert(.caseInsensitive) }
                if c.diacriticInsensitive { options.insert(.diacriticInsensitive) }
                let quantifier: Quantifier? =
                    switch c.modifier {
                    case .direct: nil
                    case .any: .any
                    case .all: .all
                    case .none: Quantifier.none
                    }
                return .comparison(
                    ComparisonTree(
                        quantifier: quantifier, left: Expression(c.lhs), operator: Operator(rawValue: c.op.rawValue)!,
                        right: Expression(c.rhs), options: options))
            }
        }
        return convert(node)
    }
}
