import Foundation

/// An expression of the predicate language on its own (Core Data's `NSExpression`): a key
/// path, a constant, arithmetic, a function. Batch updates set attributes to expressions
/// (`counter + 1`), and derived attributes are expressions.
///
/// ```swift
/// var update = BatchUpdateRequest(entityName: "Item")
/// update.propertiesToUpdate = ["views": try FetchExpression(format: "views + 1"),
///                              "slug": try FetchExpression(format: "lowercase:(name)")]
/// ```
public struct FetchExpression: @unchecked Sendable, CustomStringConvertible {
    // @unchecked: the tree holds the argument values given at creation, which are only read.
    let expression: ExpressionNode
    /// The format the expression was made from.
    public let format: String

    /// An expression from a format with `%@`, `%K`, `%d`… arguments. A malformed one is an
    /// `.invalidPredicate` error with its column.
    public init(format: String, _ arguments: Any?...) throws {
        var parser = try PredicateParser(format, arguments: arguments)
        expression = try parser.parseExpression()
        guard case .end = parser.current.kind else {
            throw parser.fail("unexpected \(parser.describe(parser.current)) after the expression")
        }
        self.format = format
    }

    public var description: String { format }

    /// The expression's value for an object.
    public func evaluate(with object: ManagedObject) throws -> Any? {
        var evaluator = PredicateEvaluator(format: format)
        return try evaluator.value(expression, object: object)
    }
}

extension FieldValue {
    /// A computed value as a slot of `type`: numbers convert between integer and floating
    /// point types when the value fits.
    init(computed value: Any?, type: AttributeType) throws {
        var v = value
        switch type {
        case .int16, .int32, .int64:
            if let d = v as? Double, d.rounded() == d, abs(d) < 9.2e18 { v = Int64(d) }
        case .double, .float:
            if let n = v.flatMap({ PredicateEvaluator.integer($0) }) { v = Double(n) }
        default: break
        }
        try self.init(v ?? nil, type: type, transformers: AttributeTransformers.registry)
    }
}
