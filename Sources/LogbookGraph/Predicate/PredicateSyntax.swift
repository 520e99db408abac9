import Foundation

/// A parsed predicate: the expression tree both format strings and (later) Swift predicates
/// become, so both get the same evaluation and planning.
// @unchecked: immutable once parsed; its `Any` values are the caller's arguments, only read.
indirect enum PredicateNode: @unchecked Sendable {
    // @unchecked: constants hold the caller's argument values (`Any`), which are only read.
    case constant(Bool)
    case not(PredicateNode)
    case and([PredicateNode])
    case or([PredicateNode])
    case comparison(Comparison)
}

struct Comparison {
    enum Operator: String {
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
    }
    enum Modifier { case direct, any, all, none }

    var modifier: Modifier
    var lhs: ExpressionNode
    var op: Operator
    var rhs: ExpressionNode
    var caseInsensitive = false
    var diacriticInsensitive = false
    /// Column (1-based) of the operator in the format string, for errors found when evaluating.
    var column: Int
}

indirect enum ExpressionNode {
    /// A key path from the evaluated object (components; aggregates like `@count` included).
    case keyPath([String], column: Int)
    /// A key path from a SUBQUERY variable (`$x.age`).
    case variable(String, [String], column: Int)
    case value(Any?)
    case list([ExpressionNode])
    /// SUBQUERY(collection, $variable, predicate), with optional trailing aggregate (`.@count`).
    case subquery(
        collection: ExpressionNode, variable: String, predicate: PredicateNode, aggregate: String?, column: Int)
    /// `a + b`, `a - b`, `a * b`, `a / b`, `a ** b`, `a & b`, `a | b`, `a ^ b`.
    case arithmetic(String, ExpressionNode, ExpressionNode, column: Int)
    /// `-a`, `~a`.
    case unary(String, ExpressionNode, column: Int)
    /// A function of NSExpression: `FUNCTION(x, 'lowercase:')`, `lowercase:(x)`, `now()`, `CAST(x, 'NSDate')`
    /// (the name as NSExpression spells it: `lowercase:`, `castObject:toType:`…).
    case function(String, [ExpressionNode], column: Int)
    /// `collection[FIRST]`, `[LAST]`, `[SIZE]`, `[n]`.
    case element(ExpressionNode, ElementIndex, column: Int)
    /// A key path from a computed value (`employees[FIRST].name`).
    case path(ExpressionNode, [String], column: Int)
}

/// Which element a collection subscript takes.
enum ElementIndex {
    case first, last, size
    case at(Int)
}
