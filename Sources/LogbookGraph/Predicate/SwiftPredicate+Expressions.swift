import Foundation

// The rest of what apps write in `#Predicate`: conditionals, `flatMap` through an optional,
// `filter { }.count`, arithmetic, and `localizedStandardContains` (which Foundation on Linux
// cannot build: supplied below).

extension PredicateExpressions.Conditional: SwiftPredicateTranslatable {
    /// `test ? a : b`. Between conditions: `(test AND a) OR (NOT test AND b)`. Between values:
    /// the branch a test of captured values alone chooses (`searchText.isEmpty ? … : …`); a
    /// choice of values that depends on the object cannot be translated.
    func translate(_ t: inout SwiftPredicateTranslator) throws -> TranslatedPart {
        let condition = try t.node(test).simplified()
        if case .constant(let b) = condition { return try t.part(b ? trueBranch : falseBranch) }
        func asNode(_ part: TranslatedPart) -> PredicateNode? {
            switch part {
            case .node(let n): n
            case .expression(.value(let b as Bool)): .constant(b)
            default: nil
            }
        }
        guard let yes = asNode(try t.part(trueBranch)), let no = asNode(try t.part(falseBranch)) else {
            throw LogbookError(
                .invalidPredicate,
                "a #Predicate chooses between values with a condition on the object (a ? b : c); Logbook translates conditionals between conditions, or whose condition reads only captured values"
            )
        }
        return .node(PredicateNode.or([.and([condition, yes]), .and([.not(condition), no])]).simplified())
    }
}

/// An `Optional.flatMap` whose parts a `??` after it needs.
protocol OptionalFlatMapParts {
    func wrappedExpression(_ t: inout SwiftPredicateTranslator) throws -> ExpressionNode
}
extension PredicateExpressions.OptionalFlatMap: OptionalFlatMapParts {
    func wrappedExpression(_ t: inout SwiftPredicateTranslator) throws -> ExpressionNode { try t.expression(wrapped) }
}

extension SwiftPredicateTranslator {
    /// `a.flatMap { condition } ?? b` (b a Boolean): the condition where `a` has a value, `b`
    /// where it has none. Nil when `lhs ?? rhs` is not of that form.
    mutating func coalescedCondition(_ lhs: Any, _ rhs: Any) throws -> PredicateNode? {
        guard let flatMap = lhs as? any OptionalFlatMapParts, case .node(let condition) = try part(lhs),
            case .expression(.value(let fallback as Bool)) = try part(rhs)
        else { return nil }
        let wrapped = try flatMap.wrappedExpression(&self)
        let isNil = PredicateNode.comparison(
            Comparison(modifier: .direct, lhs: wrapped, op: .equal, rhs: .value(nil), column: 0))
        return fallback ? .or([isNil, condition]) : .and([.not(isNil), condition])
    }
}

extension PredicateExpressions.Filter: SwiftPredicateTranslatable {
    /// `sequence.filter { test }`: the members that pass, as a SUBQUERY (its `count` and
    /// `isEmpty` are the subquery's count).
    func translate(_ t: inout SwiftPredicateTranslator) throws -> TranslatedPart {
        let collection = try t.expression(sequence)
        t.subqueries += 1
        let name = "item\(t.subqueries)"
        t.variables[variable.key] = .variable(name, [], column: 0)
        let condition = try t.node(filter)
        return .expression(
            .subquery(collection: collection, variable: name, predicate: condition, aggregate: nil, column: 0))
    }
}

extension PredicateExpressions.Arithmetic: SwiftPredicateTranslatable {
    func translate(_ t: inout SwiftPredicateTranslator) throws -> TranslatedPart {
        let symbol: String
        switch op {
        case .add: symbol = "+"
        case .subtract: symbol = "-"
        case .multiply: symbol = "*"
        @unknown default: throw t.unsupported(self)
        }
        return .expression(.arithmetic(symbol, try t.expression(lhs), try t.expression(rhs), column: 0))
    }
}

extension PredicateExpressions.FloatDivision: SwiftPredicateTranslatable {
    func translate(_ t: inout SwiftPredicateTranslator) throws -> TranslatedPart {
        .expression(.arithmetic("/", try t.expression(lhs), try t.expression(rhs), column: 0))
    }
}

extension PredicateExpressions.IntDivision: SwiftPredicateTranslatable {
    /// Swift's integer division: the quotient truncated toward zero.
    func translate(_ t: inout SwiftPredicateTranslator) throws -> TranslatedPart {
        let quotient = ExpressionNode.arithmetic("/", try t.expression(lhs), try t.expression(rhs), column: 0)
        return .expression(.function("trunc:", [quotient], column: 0))
    }
}

extension PredicateExpressions.IntRemainder: SwiftPredicateTranslatable {
    func translate(_ t: inout SwiftPredicateTranslator) throws -> TranslatedPart {
        .expression(.function("modulus:by:", [try t.expression(lhs), try t.expression(rhs)], column: 0))
    }
}

extension PredicateExpressions.UnaryMinus: SwiftPredicateTranslatable {
    func translate(_ t: inout SwiftPredicateTranslator) throws -> TranslatedPart {
        .expression(.arithmetic("-", .value(0), try t.expression(wrapped), column: 0))
    }
}

#if !canImport(Darwin)
    extension PredicateExpressions {
        /// `a.localizedStandardContains(b)` in a `#Predicate` (case- and diacritic-insensitive
        /// containment): Foundation on Linux does not have it, so that `#Predicate` cannot
        /// expand there without this.
        public struct StringLocalizedStandardContains<Root: PredicateExpression, Other: PredicateExpression>:
            PredicateExpression
        where Root.Output: StringProtocol, Other.Output: StringProtocol {
            public typealias Output = Bool
            public let root: Root
            public let other: Other
            public init(root: Root, other: Other) {
                self.root = root
                self.other = other
            }
            public func evaluate(_ bindings: PredicateBindings) throws -> Bool {
                String(try root.evaluate(bindings)).localizedStandardContains(String(try other.evaluate(bindings)))
            }
        }

        /// What `#Predicate` expands `a.localizedStandardContains(b)` to (Foundation's name).
        // swift-format-ignore: AlwaysUseLowerCamelCase
        public static func build_localizedStandardContains<Root, Other>(_ root: Root, _ other: Other)
            -> StringLocalizedStandardContains<Root, Other>
        {
            StringLocalizedStandardContains(root: root, other: other)
        }
    }

    extension PredicateExpressions.StringLocalizedStandardContains: Sendable where Root: Sendable, Other: Sendable {}

    extension PredicateExpressions.StringLocalizedStandardContains: Codable where Root: Codable, Other: Codable {
        public func encode(to encoder: any Encoder) throws {
            var container = encoder.unkeyedContainer()
            try container.encode(root)
            try container.encode(other)
        }
        public init(from decoder: any Decoder) throws {
            var container = try decoder.unkeyedContainer()
            root = try container.decode(Root.self)
            other = try container.decode(Other.self)
        }
    }

    extension PredicateExpressions.StringLocalizedStandardContains: StandardPredicateExpression
    where Root: StandardPredicateExpression, Other: StandardPredicateExpression {}
#endif

extension PredicateExpressions.StringLocalizedStandardContains: SwiftPredicateTranslatable {
    /// `CONTAINS[cd]`.
    func translate(_ t: inout SwiftPredicateTranslator) throws -> TranslatedPart {
        var c = Comparison(
            modifier: .direct, lhs: try t.expression(root), op: .contains, rhs: try t.expression(other), column: 0)
        c.caseInsensitive = true
        c.diacriticInsensitive = true
        return .node(.comparison(c))
    }
}

extension PredicateNode {
    /// Comparisons of constants evaluated, and `TRUE`/`FALSE` folded out of `AND`, `OR`, `NOT`.
    func simplified() -> PredicateNode {
        switch self {
        case .constant: return self
        case .comparison(let c):
            if c.modifier == .direct, case .value(let a) = c.lhs, case .value(let b) = c.rhs,
                let result = try? PredicateEvaluator(format: "").apply(c, a, b)
            {
                return .constant(result)
            }
            return self
        case .not(let inner):
            let s = inner.simplified()
            if case .constant(let b) = s { return .constant(!b) }
            return .not(s)
        case .and(let parts), .or(let parts):
            let isAnd: Bool
            if case .and = self { isAnd = true } else { isAnd = false }
            var kept: [PredicateNode] = []
            for p in parts {
                let s = p.simplified()
                if case .constant(let b) = s {
                    if b != isAnd { return .constant(b) }
                    continue
                }
                kept.append(s)
            }
            if kept.isEmpty { return .constant(isAnd) }
            return kept.count == 1 ? kept[0] : (isAnd ? .and(kept) : .or(kept))
        }
    }
}
