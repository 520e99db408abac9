import Foundation

extension FetchPredicate {
    /// The predicate with its `$variables` replaced by values (Core Data's
    /// `withSubstitutionVariables(_:)`). A variable followed by a key path (`$source.city`) is
    /// resolved on its value now. Variables a `SUBQUERY` binds are left alone; a variable with
    /// no value given stays, and evaluating it is an error that names it.
    ///
    /// ```swift
    /// let template = try FetchPredicate(format: "lastName == $name AND age > $age")
    /// let p = try template.substituting(["name": "Ro", "age": 30])
    /// ```
    public func substituting(_ variables: [String: Any?]) throws -> FetchPredicate {
        let evaluator = PredicateEvaluator(format: format)
        func expression(_ e: ExpressionNode, bound: Set<String>) throws -> ExpressionNode {
            switch e {
            case .variable(let name, let path, let column) where !bound.contains(name):
                guard let value = variables[name] else { return e }
                return .value(path.isEmpty ? value : try evaluator.resolve(path, from: value, column: column))
            case .list(let items): return .list(try items.map { try expression($0, bound: bound) })
            case .subquery(let collection, let variable, let predicate, let aggregate, let column):
                return .subquery(
                    collection: try expression(collection, bound: bound), variable: variable,
                    predicate: try rewrite(predicate, bound: bound.union([variable])), aggregate: aggregate,
                    column: column)
            default: return e
            }
        }
        func rewrite(_ n: PredicateNode, bound: Set<String>) throws -> PredicateNode {
            switch n {
            case .constant: return n
            case .not(let inner): return .not(try rewrite(inner, bound: bound))
            case .and(let parts): return .and(try parts.map { try rewrite($0, bound: bound) })
            case .or(let parts): return .or(try parts.map { try rewrite($0, bound: bound) })
            case .comparison(var c):
                c.lhs = try expression(c.lhs, bound: bound)
                c.rhs = try expression(c.rhs, bound: bound)
                return .comparison(c)
            }
        }
        return FetchPredicate(node: try rewrite(node, bound: []), format: format)
    }
}

extension ManagedObjectModel {
    /// A fetch request made from one of the model file's named fetch requests, with its
    /// `$variables` replaced (Core Data's `fetchRequestFromTemplate(withName:substitutionVariables:)`).
    /// An unknown name is an `.invalidFetch` error.
    ///
    /// ```swift
    /// let request = try model.fetchRequestFromTemplate(named: "byHumanName", substitutionVariables: ["humanName": "Ada"])
    /// let found = try context.fetch(request)
    /// ```
    public func fetchRequestFromTemplate(named name: String, substitutionVariables: [String: Any?] = [:]) throws
        -> FetchRequest<ManagedObject>
    {
        guard let template = fetchRequestTemplates[name] else {
            throw LogbookError(.invalidFetch, "the model has no fetch request named \(name)")
        }
        var request = FetchRequest<ManagedObject>(entityName: template.entityName)
        if let format = template.predicateFormat {
            request.predicate = try FetchPredicate(format: format).substituting(substitutionVariables)
        }
        return request
    }
}
