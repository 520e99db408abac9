import Foundation
import LogbookEngine

// Foundation's `#Predicate` and `SortDescriptor` over typed classes, translated into the same
// expression tree as format strings (so both get the same evaluation and planning).

extension FetchPredicate {
    /// A predicate written with Foundation's `#Predicate` over a typed class.
    ///
    /// ```swift
    /// let adults = try FetchPredicate(#Predicate<Person> { $0.age >= 18 && $0.lastName.starts(with: "R") })
    /// let managed = try FetchPredicate(#Predicate<Employee> { $0.manager?.lastName == "Smith" })
    /// ```
    ///
    /// Translated: `== != < <= > >=`, `&& || !`, key paths of typed properties (through to-one
    /// relationships with `?.` or `!`), `nil`, captured values, `contains` (of a string, of a
    /// list of values, of a to-many relationship), `contains { … }` and `allSatisfy { … }` over
    /// a to-many relationship, `starts(with:)`, `a...b` and `a..<b` ranges, `count` and `isEmpty`
    /// of a to-many relationship, `??`, key paths into stored values (`$0.address?.city` of a
    /// `Codable` struct, an enum's `rawValue`), arithmetic, conditionals between conditions (or
    /// decided by captured values), `flatMap { } ?? Bool`, `filter { }.count`,
    /// `localizedStandardContains`. Anything else (a conditional choosing between values by a
    /// condition on the object) throws `.invalidPredicate` naming the construct.
    public init<T: ManagedObject>(_ predicate: Predicate<T>) throws {
        var translator = SwiftPredicateTranslator()
        translator.variables[predicate.variable.key] = .keyPath([], column: 0)
        let node = try translator.node(predicate.expression).simplified()
        self.init(node: node, format: node.formatDescription)
    }
}

extension FetchRequest {
    /// A request filtered by a `#Predicate` and ordered by key-path `SortDescriptor`s.
    ///
    /// ```swift
    /// let request = try FetchRequest<Person>(predicate: #Predicate { $0.age >= 100 && $0.age <= 200 },
    ///                                        sortBy: [SortDescriptor(\.age), SortDescriptor(\.firstName, order: .reverse)])
    /// ```
    public init(predicate: Predicate<Result>? = nil, sortBy: [SortDescriptor<Result>] = []) throws {
        self.init()
        if let predicate { self.predicate = try FetchPredicate(predicate) }
        sortDescriptors = try sortBy.map(FetchSortDescriptor.init)
    }
}

extension FetchSortDescriptor {
    /// The same order as a key-path `SortDescriptor` of a typed class (`order: .reverse` is
    /// descending).
    public init<T: ManagedObject>(_ descriptor: SortDescriptor<T>) throws {
        guard let keyPath = descriptor.keyPath, let key = KeyProbe.key(of: keyPath, in: T.self) else {
            throw LogbookError(
                .invalidPredicate,
                "the sort descriptor \(descriptor) does not name a property of \(T.self) declared with @Managed, @ToOne or @Transformable"
            )
        }
        self.init(key: key, ascending: descriptor.order == .forward)
    }
}

/// Finds which key a typed property reads, by reading it on a stand-in object that records
/// the key its property wrapper asks for (key paths of computed properties carry no names).
enum KeyProbe {
    private static let recorded = Locked<[ObjectIdentifier: String]>([:])
    private static let layout: EntityLayout = {
        // An entity without properties: every key lookup on the stand-in fails and is recorded.
        try! EntityLayout(entity: EntityDescription("_KeyProbe"), index: 0, entityIndex: [:], entities: [])
    }()
    private static let identity = StoreIdentity(
        uuid: UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)), keyspaces: [:])

    static func record(_ key: String, for object: ManagedObject) {
        recorded.withLock { $0[ObjectIdentifier(object)] = key }
    }

    /// The key that `keyPath` reads on objects of `type`, or nil when it reads none.
    static func key<T: ManagedObject>(of keyPath: PartialKeyPath<T>, in type: T.Type) -> String? {
        let binding = ObjectBinding(layout: layout, token: ManagedObjectContext.Token(identity: identity))
        // The bootstrap holds the binding unretained: kept alive until the object holds it.
        let probe = withExtendedLifetime(binding) {
            type.init(ManagedObject.Bootstrap(binding: binding, key: 0, slots: [], fault: false))
        }
        probe.flags = [.invalid, .probe]
        _ = probe[keyPath: keyPath]
        return recorded.withLock { $0.removeValue(forKey: ObjectIdentifier(probe)) }
    }
}

/// What a part of a Swift predicate becomes.
enum TranslatedPart {
    case node(PredicateNode)
    case expression(ExpressionNode)
    /// `a...b` or `a..<b`.
    case range(lower: ExpressionNode, upper: ExpressionNode, closed: Bool)
}

protocol SwiftPredicateTranslatable {
    func translate(_ t: inout SwiftPredicateTranslator) throws -> TranslatedPart
}

struct SwiftPredicateTranslator {
    var variables: [PredicateExpressions.VariableID: ExpressionNode] = [:]
    var subqueries = 0
    /// A captured value as the store compares it, for values of the SwiftData layer (a model
    /// object compares as its managed object, an identifier as the object ID it names); nil
    /// for the others, which stay as they are.
    var resolveValue: ((Any) -> Any??)?
    /// The SwiftData layer's `@Model` classes, for key paths and type tests.
    var models: (any PredicateModelSupport)?

    func unsupported(_ part: Any) -> LogbookError {
        var name = String(describing: type(of: part))
        if let angle = name.firstIndex(of: "<") { name = String(name[..<angle]) }
        return LogbookError(
            .invalidPredicate,
            "a #Predicate using \(name) cannot be translated; Logbook translates comparisons, &&, ||, !, key paths of typed properties and into stored values, optional chaining, ??, nil, contains, starts(with:), allSatisfy, filter, ranges, count, isEmpty, arithmetic, conditionals, is and as?"
        )
    }

    mutating func part(_ e: Any) throws -> TranslatedPart {
        guard let t = e as? any SwiftPredicateTranslatable else { throw unsupported(e) }
        return try t.translate(&self)
    }

    mutating func node(_ e: Any) throws -> PredicateNode {
        switch try part(e) {
        case .node(let n): return n
        case .expression(let x):
            // A Boolean key path used as a condition.
            return .comparison(Comparison(modifier: .direct, lhs: x, op: .equal, rhs: .value(true), column: 0))
        case .range: throw unsupported(e)
        }
    }

    mutating func expression(_ e: Any) throws -> ExpressionNode {
        switch try part(e) {
        case .expression(let x): return x
        case .node, .range:
            throw LogbookError(
                .invalidPredicate, "a #Predicate uses a condition or a range where Logbook needs a value")
        }
    }

    /// `lhs && rhs` or `lhs || rhs`, nested ones flattened.
    mutating func joined(_ lhs: Any, _ rhs: Any, and: Bool) throws -> PredicateNode {
        var parts: [PredicateNode] = []
        for side in [try node(lhs), try node(rhs)] {
            switch side {
            case .and(let inner) where and: parts += inner
            case .or(let inner) where !and: parts += inner
            default: parts.append(side)
            }
        }
        return and ? .and(parts) : .or(parts)
    }

    /// `sequence.contains { test }` (some member passes) or `allSatisfy` (none fails), as a
    /// SUBQUERY count.
    mutating func subquery(_ sequence: Any, _ variable: PredicateExpressions.VariableID, _ test: Any, all: Bool) throws
        -> TranslatedPart
    {
        let collection = try expression(sequence)
        subqueries += 1
        let name = "item\(subqueries)"
        variables[variable] = .variable(name, [], column: 0)
        let condition = try node(test)
        let counted = ExpressionNode.subquery(
            collection: collection, variable: name, predicate: all ? .not(condition) : condition,
            aggregate: "count", column: 0)
        return all ? compare(counted, .equal, .value(0)) : compare(counted, .greater, .value(0))
    }

    func compare(_ lhs: ExpressionNode, _ op: Comparison.Operator, _ rhs: ExpressionNode) -> TranslatedPart {
        .node(.comparison(Comparison(modifier: .direct, lhs: lhs, op: op, rhs: rhs, column: 0)))
    }

    /// A value as the tree holds it: optionals unwrapped (nil for none).
    static func plain(_ value: Any) -> Any? {
        let mirror = Mirror(reflecting: value)
        guard mirror.displayStyle == .optional else {
            return value
        }
        guard let wrapped = mirror.children.first?.value else { return nil }
        return plain(wrapped)
    }
}

extension FetchPredicate {
    /// A `#Predicate` translated with what the SwiftData layer knows: its `@Model` classes
    /// (`models`), and how a captured value of its own compares (`resolveValue`: a model
    /// object as its managed object, an identifier as the object ID it names; nil for a value
    /// that stays as it is).
    package init<T>(
        translating predicate: Predicate<T>, models: (any PredicateModelSupport)?, resolveValue: ((Any) -> Any??)?
    ) throws {
        var translator = SwiftPredicateTranslator()
        translator.models = models
        translator.resolveValue = resolveValue
        translator.variables[predicate.variable.key] = .keyPath([], column: 0)
        let node = try translator.node(predicate.expression).simplified()
        self.init(node: node, format: node.formatDescription)
    }
}

/// What the translator knows of the SwiftData layer's `@Model` classes.
package protocol PredicateModelSupport {
    /// Whether `type` is a `@Model` class.
    func isModel(_ type: Any.Type) -> Bool
    /// The persisted property a key path of the `@Model` class `root` reads ("" for the
    /// object's identity), nil when it reads none.
    func key(of keyPath: AnyKeyPath, root: Any.Type) throws -> String?
    /// The entity names of the `@Model` class `type` and its subclasses.
    func entityNames(of type: Any.Type) -> [String]
}

extension SwiftPredicateTranslator {
    /// The persisted property a key path of a `@Model` class reads ("" for the object's
    /// identity, `persistentModelID` or `id`), nil when the root is not a `@Model` class.
    func modelKey(_ keyPath: AnyKeyPath, of root: Any.Type) throws -> String? {
        guard let models, models.isModel(root) else { return nil }
        guard let key = try models.key(of: keyPath, root: root) else {
            throw LogbookError(.invalidPredicate, "\(keyPath) is not a persisted property of \(root)")
        }
        return key
    }
}

/// Collections whose `count` and `isEmpty` key paths a predicate may use.
protocol CountedCollectionKeyPaths {
    static func aggregate(of keyPath: AnyKeyPath) -> String?
}
extension Set: CountedCollectionKeyPaths {
    static func aggregate(of keyPath: AnyKeyPath) -> String? {
        keyPath == \Set.count ? "@count" : keyPath == \Set.isEmpty ? "isEmpty" : nil
    }
}
extension Array: CountedCollectionKeyPaths {
    static func aggregate(of keyPath: AnyKeyPath) -> String? {
        keyPath == \Array.count ? "@count" : keyPath == \Array.isEmpty ? "isEmpty" : nil
    }
}
extension String: CountedCollectionKeyPaths {
    static func aggregate(of keyPath: AnyKeyPath) -> String? { nil }
}

/// Range values captured in a predicate (`let r = 1...5; #Predicate { r.contains($0.age) }`).
protocol RangeValue { var bounds: (Any, Any, closed: Bool) { get } }
extension ClosedRange: RangeValue { var bounds: (Any, Any, closed: Bool) { (lowerBound, upperBound, true) } }
extension Range: RangeValue { var bounds: (Any, Any, closed: Bool) { (lowerBound, upperBound, false) } }

extension PredicateExpressions.Variable: SwiftPredicateTranslatable {
    func translate(_ t: inout SwiftPredicateTranslator) throws -> TranslatedPart {
        guard let bound = t.variables[key] else { throw t.unsupported(self) }
        return .expression(bound)
    }
}

extension PredicateExpressions.KeyPath: SwiftPredicateTranslatable {
    func translate(_ t: inout SwiftPredicateTranslator) throws -> TranslatedPart {
        let base = try t.expression(root)
        let component: String
        if let objectType = Root.Output.self as? ManagedObject.Type {
            guard let key = objectType.probeKey(keyPath) else {
                throw LogbookError(
                    .invalidPredicate,
                    "\(keyPath) is not a property declared with @Managed, @ToOne, @ToMany or @Transformable")
            }
            component = key
        } else if let key = try t.modelKey(keyPath, of: Root.Output.self) {
            if key.isEmpty { return .expression(base) }
            component = key
        } else if Root.Output.self == String.self, keyPath == \String.isEmpty {
            // `text.isEmpty`: the empty string (a missing value is not empty, as in Swift).
            return t.compare(try t.expression(root), .equal, .value(""))
        } else if let collection = Root.Output.self as? any CountedCollectionKeyPaths.Type,
            let aggregate = collection.aggregate(of: keyPath)
        {
            component = aggregate
        } else {
            // A property of a value (a `Codable` struct stored through a transformer, an enum's
            // `rawValue`, a string's `count`): Swift's own key path, applied to the value when
            // the predicate is evaluated.
            return .expression(.function(PredicateEvaluator.swiftKeyPath, [base, .value(keyPath)], column: 0))
        }
        // `filter { }.count` and `.isEmpty`: the subquery's count.
        if case .subquery(let collection, let variable, let predicate, nil, let column) = base,
            component == "@count" || component == "isEmpty"
        {
            let counted = ExpressionNode.subquery(
                collection: collection, variable: variable, predicate: predicate, aggregate: "count", column: column)
            return component == "isEmpty" ? t.compare(counted, .equal, .value(0)) : .expression(counted)
        }
        func extended(_ path: [String]) -> [String] { path + [component == "isEmpty" ? "@count" : component] }
        let expression: ExpressionNode
        switch base {
        case .keyPath(let path, let column): expression = .keyPath(extended(path), column: column)
        case .variable(let name, let path, let column): expression = .variable(name, extended(path), column: column)
        case .path(let inner, let path, let column): expression = .path(inner, extended(path), column: column)
        default: expression = .path(base, extended([]), column: 0)
        }
        return component == "isEmpty" ? t.compare(expression, .equal, .value(0)) : .expression(expression)
    }
}

extension ManagedObject {
    /// The key a key path of this class reads (see `KeyProbe`).
    static func probeKey(_ keyPath: AnyKeyPath) -> String? {
        guard let typed = keyPath as? PartialKeyPath<Self> else { return nil }
        return KeyProbe.key(of: typed, in: Self.self)
    }
}

extension PredicateExpressions.Value: SwiftPredicateTranslatable {
    func translate(_ t: inout SwiftPredicateTranslator) throws -> TranslatedPart {
        var v = SwiftPredicateTranslator.plain(value)
        // A model identifier compares as the object it names (see `resolveValue`).
        if let v0 = v, let resolved = t.resolveValue?(v0) { v = resolved }
        if let range = v as? any RangeValue {
            let (lo, hi, closed) = range.bounds
            return .range(lower: .value(lo), upper: .value(hi), closed: closed)
        }
        return .expression(.value(v))
    }
}

extension PredicateExpressions.NilLiteral: SwiftPredicateTranslatable {
    func translate(_ t: inout SwiftPredicateTranslator) throws -> TranslatedPart { .expression(.value(nil)) }
}

extension SwiftPredicateTranslator {
    /// `a == b` or `a != b`; a condition compared with `true` or `false`
    /// (`$0.address?.street.starts(with: "2") == true`) is that condition or its negation.
    mutating func equality(_ lhs: Any, _ rhs: Any, equal: Bool) throws -> TranslatedPart {
        let (l, r) = (try part(lhs), try part(rhs))
        switch (l, r) {
        case (.node(let n), .expression(.value(let b as Bool))), (.expression(.value(let b as Bool)), .node(let n)):
            return .node(b == equal ? n : .not(n))
        case (.expression(let a), .expression(let b)):
            return compare(a, equal ? .equal : .notEqual, b)
        default:
            throw LogbookError(
                .invalidPredicate,
                "a #Predicate compares a condition or a range with something other than true or false")
        }
    }
}

extension PredicateExpressions.Equal: SwiftPredicateTranslatable {
    func translate(_ t: inout SwiftPredicateTranslator) throws -> TranslatedPart {
        try t.equality(lhs, rhs, equal: true)
    }
}

extension PredicateExpressions.NotEqual: SwiftPredicateTranslatable {
    func translate(_ t: inout SwiftPredicateTranslator) throws -> TranslatedPart {
        try t.equality(lhs, rhs, equal: false)
    }
}

extension PredicateExpressions.Comparison: SwiftPredicateTranslatable {
    func translate(_ t: inout SwiftPredicateTranslator) throws -> TranslatedPart {
        let op: Comparison.Operator
        switch self.op {
        case .lessThan: op = .less
        case .lessThanOrEqual: op = .lessOrEqual
        case .greaterThan: op = .greater
        case .greaterThanOrEqual: op = .greaterOrEqual
        @unknown default: throw t.unsupported(self)
        }
        return t.compare(try t.expression(lhs), op, try t.expression(rhs))
    }
}

extension PredicateExpressions.Conjunction: SwiftPredicateTranslatable {
    func translate(_ t: inout SwiftPredicateTranslator) throws -> TranslatedPart {
        .node(try t.joined(lhs, rhs, and: true))
    }
}

extension PredicateExpressions.Disjunction: SwiftPredicateTranslatable {
    func translate(_ t: inout SwiftPredicateTranslator) throws -> TranslatedPart {
        .node(try t.joined(lhs, rhs, and: false))
    }
}

extension PredicateExpressions.Negation: SwiftPredicateTranslatable {
    func translate(_ t: inout SwiftPredicateTranslator) throws -> TranslatedPart { .node(.not(try t.node(wrapped))) }
}

extension PredicateExpressions.ForcedUnwrap: SwiftPredicateTranslatable {
    func translate(_ t: inout SwiftPredicateTranslator) throws -> TranslatedPart { try t.part(inner) }
}

extension PredicateExpressions.OptionalFlatMap: SwiftPredicateTranslatable {
    func translate(_ t: inout SwiftPredicateTranslator) throws -> TranslatedPart {
        // `a?.b`: a key path that gives nil when `a` is nil, which is how key paths evaluate.
        t.variables[variable.key] = try t.expression(wrapped)
        return try t.part(transform)
    }
}

extension SwiftPredicateTranslator {
    /// The entity names objects of `type` have: its own and its subclasses'.
    func entityNames(of type: Any.Type, _ part: Any) throws -> [String] {
        guard let models, models.isModel(type) else {
            throw LogbookError(
                .invalidPredicate, "a #Predicate tests whether an object is a \(type), which is not a @Model class")
        }
        return models.entityNames(of: type)
    }
}

extension PredicateExpressions.TypeCheck: SwiftPredicateTranslatable {
    /// `$0 is BusinessTrip`: the object's entity is the class's or a subclass's.
    func translate(_ t: inout SwiftPredicateTranslator) throws -> TranslatedPart {
        let names = try t.entityNames(of: Desired.self, self)
        return .node(
            .comparison(
                Comparison(
                    modifier: .direct,
                    lhs: .function(PredicateEvaluator.entityOf, [try t.expression(input)], column: 0),
                    op: .in, rhs: .value(names), column: 0)))
    }
}

extension PredicateExpressions.ConditionalCast: SwiftPredicateTranslatable {
    /// `($0 as? BusinessTrip)?.perDiem`: the object when it is one, else nil.
    func translate(_ t: inout SwiftPredicateTranslator) throws -> TranslatedPart {
        let names = try t.entityNames(of: Desired.self, self)
        return .expression(
            .function(PredicateEvaluator.ifEntity, [try t.expression(input), .value(names)], column: 0))
    }
}

extension PredicateExpressions.ForceCast: SwiftPredicateTranslatable {
    /// `($0 as! BusinessTrip).perDiem`: as `as?` (an object of another class has no value
    /// there, where Swift would stop the program).
    func translate(_ t: inout SwiftPredicateTranslator) throws -> TranslatedPart {
        let names = try t.entityNames(of: Desired.self, self)
        return .expression(
            .function(PredicateEvaluator.ifEntity, [try t.expression(input), .value(names)], column: 0))
    }
}

extension PredicateExpressions.NilCoalesce: SwiftPredicateTranslatable {
    /// `a ?? b`: `a`'s value, `b`'s when `a` has none.
    func translate(_ t: inout SwiftPredicateTranslator) throws -> TranslatedPart {
        if let condition = try t.coalescedCondition(lhs, rhs) { return .node(condition) }
        return .expression(
            .function(PredicateEvaluator.coalesce, [try t.expression(lhs), try t.expression(rhs)], column: 0))
    }
}

extension PredicateExpressions.ClosedRange: SwiftPredicateTranslatable {
    func translate(_ t: inout SwiftPredicateTranslator) throws -> TranslatedPart {
        .range(lower: try t.expression(lower), upper: try t.expression(upper), closed: true)
    }
}

extension PredicateExpressions.Range: SwiftPredicateTranslatable {
    func translate(_ t: inout SwiftPredicateTranslator) throws -> TranslatedPart {
        .range(lower: try t.expression(lower), upper: try t.expression(upper), closed: false)
    }
}

extension PredicateExpressions.RangeExpressionContains: SwiftPredicateTranslatable {
    func translate(_ t: inout SwiftPredicateTranslator) throws -> TranslatedPart {
        guard case .range(let lo, let hi, let closed) = try t.part(range) else { throw t.unsupported(self) }
        let element = try t.expression(element)
        if closed, case .value(let l) = lo, case .value(let h) = hi {
            return t.compare(element, .between, .value([l, h] as [Any?]))
        }
        guard case .node(let lower) = t.compare(element, .greaterOrEqual, lo),
            case .node(let upper) = t.compare(element, closed ? .lessOrEqual : .less, hi)
        else { throw t.unsupported(self) }
        return .node(.and([lower, upper]))
    }
}

extension PredicateExpressions.SequenceContains: SwiftPredicateTranslatable {
    func translate(_ t: inout SwiftPredicateTranslator) throws -> TranslatedPart {
        let collection = try t.expression(sequence)
        let item = try t.expression(element)
        if case .keyPath = collection { return t.compare(collection, .contains, item) }
        return t.compare(item, .in, collection)
    }
}

extension PredicateExpressions.SequenceContainsWhere: SwiftPredicateTranslatable {
    func translate(_ t: inout SwiftPredicateTranslator) throws -> TranslatedPart {
        try t.subquery(sequence, variable.key, self.test, all: false)
    }
}

extension PredicateExpressions.SequenceAllSatisfy: SwiftPredicateTranslatable {
    func translate(_ t: inout SwiftPredicateTranslator) throws -> TranslatedPart {
        try t.subquery(sequence, variable.key, self.test, all: true)
    }
}

extension PredicateExpressions.CollectionContainsCollection: SwiftPredicateTranslatable {
    func translate(_ t: inout SwiftPredicateTranslator) throws -> TranslatedPart {
        t.compare(try t.expression(base), .contains, try t.expression(other))
    }
}

extension PredicateExpressions.SequenceStartsWith: SwiftPredicateTranslatable {
    func translate(_ t: inout SwiftPredicateTranslator) throws -> TranslatedPart {
        t.compare(try t.expression(base), .beginsWith, try t.expression(prefix))
    }
}

// MARK: Printing

extension PredicateNode {
    /// The node in the format language (how `explain` and `description` show a translated
    /// `#Predicate`).
    var formatDescription: String {
        switch self {
        case .constant(let b): return b ? "TRUEPREDICATE" : "FALSEPREDICATE"
        case .not(let n): return "NOT (\(n.formatDescription))"
        case .and(let parts): return parts.map { "(\($0.formatDescription))" }.joined(separator: " AND ")
        case .or(let parts): return parts.map { "(\($0.formatDescription))" }.joined(separator: " OR ")
        case .comparison(let c):
            var s = ""
            switch c.modifier {
            case .direct: break
            case .any: s = "ANY "
            case .all: s = "ALL "
            case .none: s = "NONE "
            }
            var options = ""
            if c.caseInsensitive { options += "c" }
            if c.diacriticInsensitive { options += "d" }
            s +=
                "\(c.lhs.formatDescription) \(c.op.rawValue)\(options.isEmpty ? "" : "[\(options)]") \(c.rhs.formatDescription)"
            return s
        }
    }
}

extension ExpressionNode {
    var formatDescription: String {
        switch self {
        case .keyPath(let path, _): return path.isEmpty ? "SELF" : path.joined(separator: ".")
        case .variable(let name, let path, _): return (["$" + name] + path).joined(separator: ".")
        case .value(let v): return Self.literal(v)
        case .list(let items): return "{" + items.map(\.formatDescription).joined(separator: ", ") + "}"
        case .subquery(let collection, let variable, let predicate, let aggregate, _):
            return "SUBQUERY(\(collection.formatDescription), $\(variable), \(predicate.formatDescription))"
                + (aggregate.map { ".@\($0)" } ?? "")
        case .arithmetic(let op, let a, let b, _): return "(\(a.formatDescription) \(op) \(b.formatDescription))"
        case .unary(let op, let a, _): return op + a.formatDescription
        case .function(let name, let args, _):
            if name == PredicateEvaluator.swiftKeyPath, args.count == 2, case .value(let keyPath?) = args[1] {
                // `\Address.city` prints as such for stored properties.
                let text = "\(keyPath)"
                let member = text.firstIndex(of: ".").map { String(text[text.index(after: $0)...]) } ?? text
                return args[0].formatDescription + "." + member
            }
            if name == PredicateEvaluator.coalesce, args.count == 2 {
                return "(\(args[0].formatDescription) ?? \(args[1].formatDescription))"
            }
            if name == "castObject:toType:", args.count == 2 {
                return "CAST(\(args[0].formatDescription), \(args[1].formatDescription))"
            }
            return "FUNCTION("
                + ([args.first?.formatDescription ?? "nil", Self.literal(name)]
                + args.dropFirst().map(\.formatDescription))
                .joined(separator: ", ") + ")"
        case .element(let base, let index, _):
            let i: String
            switch index {
            case .first: i = "FIRST"
            case .last: i = "LAST"
            case .size: i = "SIZE"
            case .at(let n): i = "\(n)"
            }
            return base.formatDescription + "[\(i)]"
        case .path(let base, let path, _): return ([base.formatDescription] + path).joined(separator: ".")
        }
    }

    static func literal(_ v: Any?) -> String {
        switch v {
        case nil: return "nil"
        case let s as String:
            return "\"" + s.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
                + "\""
        case let b as Bool: return b ? "YES" : "NO"
        case let list as [Any?]: return "{" + list.map(literal).joined(separator: ", ") + "}"
        case let list as [Any]: return "{" + list.map { literal($0) }.joined(separator: ", ") + "}"
        case let o as ManagedObject: return o.objectID.uriRepresentation.absoluteString
        case let d as Date: return "CAST(\(d.timeIntervalSinceReferenceDate), \"NSDate\")"
        default: return "\(v!)"
        }
    }
}
