import Foundation

/// Parses Core Data's predicate format strings (`NSPredicate(format:)`).
struct PredicateParser {
    let text: String
    let tokens: [PredicateToken]
    var position = 0
    var arguments: [Any?]
    var argumentIndex = 0

    init(_ text: String, arguments: [Any?]) throws {
        self.text = text
        self.tokens = try PredicateLexer.tokens(text)
        self.arguments = arguments
    }

    var current: PredicateToken { tokens[position] }

    func fail(_ message: String, _ column: Int? = nil) -> LogbookError {
        LogbookError(.invalidPredicate, "\(message) at column \(column ?? current.column) of \"\(text)\"")
    }

    func isKeyword(_ word: String, _ token: PredicateToken? = nil) -> Bool {
        if case .identifier(let w) = (token ?? current).kind { return w.uppercased() == word }
        return false
    }

    func isOp(_ op: String) -> Bool {
        if case .op(let o) = current.kind { return o == op }
        return false
    }

    mutating func expectOp(_ op: String) throws {
        guard isOp(op) else { throw fail("expected '\(op)'") }
        position += 1
    }

    mutating func parse() throws -> PredicateNode {
        let node = try parseOr()
        guard case .end = current.kind else { throw fail("unexpected \(describe(current)) after the predicate") }
        guard argumentIndex == arguments.count else {
            throw LogbookError(
                .invalidPredicate, "\(arguments.count) arguments given but the format \"\(text)\" uses \(argumentIndex)"
            )
        }
        return node
    }

    func describe(_ t: PredicateToken) -> String {
        switch t.kind {
        case .identifier(let w): "'\(w)'"
        case .string(let s): "string \"\(s)\""
        case .number(let d, _): "number \(d)"
        case .op(let o): "'\(o)'"
        case .format(let f): "'\(f)'"
        case .variable(let v): "'$\(v)'"
        case .at(let a): "'@\(a)'"
        case .end: "the end"
        }
    }

    /// Deepest nesting of parentheses, NOTs, aggregates and subqueries a predicate may have: a
    /// deeper one is refused rather than run the parser (which recurses) out of stack.
    static let maxNesting = 100
    var depth = 0

    /// Enters one level of nesting (the caller leaves it with `depth -= 1`).
    mutating func enterNesting() throws {
        depth += 1
        guard depth <= Self.maxNesting else { throw fail("the predicate nests more than \(Self.maxNesting) levels") }
    }

    mutating func parseOr() throws -> PredicateNode {
        try enterNesting()
        defer { depth -= 1 }
        var parts = [try parseAnd()]
        while isKeyword("OR") || isOp("||") {
            position += 1
            parts.append(try parseAnd())
        }
        return parts.count == 1 ? parts[0] : .or(parts)
    }

    mutating func parseAnd() throws -> PredicateNode {
        var parts = [try parseNot()]
        while isKeyword("AND") || isOp("&&") {
            position += 1
            parts.append(try parseNot())
        }
        return parts.count == 1 ? parts[0] : .and(parts)
    }

    mutating func parseNot() throws -> PredicateNode {
        if isKeyword("NOT") || isOp("!") {
            position += 1
            try enterNesting()
            defer { depth -= 1 }
            return .not(try parseNot())
        }
        return try parsePrimary()
    }

    mutating func parsePrimary() throws -> PredicateNode {
        if isKeyword("TRUEPREDICATE") {
            position += 1
            return .constant(true)
        }
        if isKeyword("FALSEPREDICATE") {
            position += 1
            return .constant(false)
        }
        // A parenthesised predicate, unless what follows the closing parenthesis continues an
        // expression or compares it (`(a + b) * 2 > c`): decided by looking ahead, not by
        // trying both (which nested parentheses would make exponential).
        if isOp("("), !parenthesisStartsExpression() {
            position += 1
            let inner = try parseOr()
            try expectOp(")")
            return inner
        }
        return try parseComparison()
    }

    mutating func parseComparison() throws -> PredicateNode {
        var modifier = Comparison.Modifier.direct
        if isKeyword("ANY") || isKeyword("SOME") {
            modifier = .any
            position += 1
        } else if isKeyword("ALL") {
            modifier = .all
            position += 1
        } else if isKeyword("NONE") {
            modifier = .none
            position += 1
        }
        let lhs = try parseExpression()
        let opColumn = current.column
        let op: Comparison.Operator
        var negate = false
        switch current.kind {
        case .op(let o):
            switch o {
            case "==", "=": op = .equal
            case "!=", "<>": op = .notEqual
            case "<": op = .less
            case "<=", "=<": op = .lessOrEqual
            case ">": op = .greater
            case ">=", "=>": op = .greaterOrEqual
            default: throw fail("expected a comparison operator, found \(describe(current))")
            }
            position += 1
        case .identifier(let w) where w.uppercased() == "NOT" && position + 1 < tokens.count:
            // `a NOT IN b`, `a NOT BETWEEN …`, `a NOT LIKE …`: the comparison, negated.
            position += 1
            negate = true
            guard case .identifier(let next) = current.kind,
                let o = Self.wordOperators[next.uppercased()]
            else {
                throw fail("expected IN, BETWEEN, LIKE, MATCHES, CONTAINS, BEGINSWITH or ENDSWITH after NOT")
            }
            op = o
            position += 1
        case .identifier(let w):
            switch w.uppercased() {
            case "BEGINSWITH": op = .beginsWith
            case "ENDSWITH": op = .endsWith
            case "CONTAINS": op = .contains
            case "LIKE": op = .like
            case "MATCHES": op = .matches
            case "IN": op = .in
            case "BETWEEN": op = .between
            default: throw fail("expected a comparison operator, found \(describe(current))")
            }
            position += 1
        default:
            throw fail("expected a comparison operator, found \(describe(current))")
        }
        var ci = false
        var di = false
        if isOp("[") {
            position += 1
            guard case .identifier(let flags) = current.kind else { throw fail("expected options such as c, d or cd") }
            for f in flags.lowercased() {
                switch f {
                case "c": ci = true
                case "d": di = true
                case "n", "l": break
                default: throw fail("unknown option '\(f)'; use c, d or cd")
                }
            }
            position += 1
            try expectOp("]")
        }
        let rhs = try parseExpression()
        if op == .between {
            guard case .list(let items) = rhs, items.count == 2 else {
                if case .value(let v) = rhs, let a = v as? [Any], a.count == 2 {
                    let c = Comparison(
                        modifier: modifier, lhs: lhs, op: op, rhs: .list([.value(a[0]), .value(a[1])]),
                        caseInsensitive: ci, diacriticInsensitive: di, column: opColumn)
                    return negate ? .not(.comparison(c)) : .comparison(c)
                }
                throw fail("BETWEEN needs two bounds, as {low, high}", opColumn)
            }
            _ = items
        }
        let c = Comparison(
            modifier: modifier, lhs: lhs, op: op, rhs: rhs, caseInsensitive: ci, diacriticInsensitive: di,
            column: opColumn)
        return negate ? .not(.comparison(c)) : .comparison(c)
    }

    /// Whether the `(` at the current position opens an expression: the token after its
    /// matching `)` is an arithmetic or comparison operator.
    func parenthesisStartsExpression() -> Bool {
        var depth = 0
        var i = position
        while i < tokens.count {
            switch tokens[i].kind {
            case .op("("): depth += 1
            case .op(")"):
                depth -= 1
                if depth == 0 {
                    guard i + 1 < tokens.count else { return false }
                    switch tokens[i + 1].kind {
                    case .op(let o):
                        return [
                            "+", "-", "*", "/", "**", "&", "|", "^", "==", "=", "!=", "<>", "<", "<=", "=<", ">", ">=",
                            "=>", "[", "."
                        ].contains(o)
                    case .identifier(let w):
                        return Self.wordOperators[w.uppercased()] != nil || w.uppercased() == "NOT"
                    default: return false
                    }
                }
            case .end: return false
            default: break
            }
            i += 1
        }
        return false
    }

    static let wordOperators: [String: Comparison.Operator] = [
        "BEGINSWITH": .beginsWith, "ENDSWITH": .endsWith, "CONTAINS": .contains, "LIKE": .like, "MATCHES": .matches,
        "IN": .in, "BETWEEN": .between
    ]

    // MARK: Expressions, by precedence: | ^ & + - * / ** unary postfix

    mutating func parseExpression() throws -> ExpressionNode { try parseBinary(level: 0) }

    static let binaryLevels: [[String]] = [["|"], ["^"], ["&"], ["+", "-"], ["*", "/"]]

    mutating func parseBinary(level: Int) throws -> ExpressionNode {
        guard level < Self.binaryLevels.count else { return try parseUnary() }
        var lhs = try parseBinary(level: level + 1)
        while case .op(let o) = current.kind, Self.binaryLevels[level].contains(o) {
            let column = current.column
            position += 1
            let rhs = try parseBinary(level: level + 1)
            lhs = .arithmetic(o, lhs, rhs, column: column)
        }
        return lhs
    }

    mutating func parseUnary() throws -> ExpressionNode {
        if case .op(let o) = current.kind, o == "-" || o == "~" {
            let column = current.column
            position += 1
            try enterNesting()
            defer { depth -= 1 }
            return .unary(o, try parseUnary(), column: column)
        }
        let base = try parsePostfix()
        if isOp("**") {
            // Right-associative: 2 ** 3 ** 2 is 2 ** 9.
            let column = current.column
            position += 1
            return .arithmetic("**", base, try parseUnary(), column: column)
        }
        return base
    }

    /// A primary expression with collection subscripts and key paths after them.
    mutating func parsePostfix() throws -> ExpressionNode {
        var e = try parsePrimaryExpression()
        while isOp("[") {
            let column = current.column
            position += 1
            let index: ElementIndex
            switch current.kind {
            case .identifier(let w) where w.uppercased() == "FIRST": index = .first
            case .identifier(let w) where w.uppercased() == "LAST": index = .last
            case .identifier(let w) where w.uppercased() == "SIZE": index = .size
            case .number(let d, true):
                guard let n = Int(exactly: d) else { throw fail("the index \(d) is too large") }
                index = .at(n)
            case .format(let spec) where ["%d", "%i", "%ld", "%lld", "%u", "%lu"].contains(spec):
                guard
                    let n = (try nextArgument(column)).flatMap({ $0 as? any BinaryInteger }).map({
                        Int(truncatingIfNeeded: $0)
                    })
                else {
                    throw fail("\(spec) needs an integer argument", column)
                }
                index = .at(n)
            default: throw fail("expected FIRST, LAST, SIZE or an index inside [ ]")
            }
            position += 1
            try expectOp("]")
            e = .element(e, index, column: column)
            if isOp(".") {
                var path: [String] = []
                while isOp(".") {
                    position += 1
                    path.append(try keyComponent())
                }
                e = .path(e, path, column: column)
            }
        }
        return e
    }

    /// `FUNCTION(receiver, 'name:', args…)`, `name:(args…)`, `name()`, `CAST(x, 'type')`.
    mutating func parseFunction(_ word: String, column: Int) throws -> ExpressionNode? {
        switch word.uppercased() {
        case "FUNCTION":
            guard position + 1 < tokens.count, case .op("(") = tokens[position + 1].kind else { return nil }
            position += 2
            let receiver = try parseExpression()
            try expectOp(",")
            guard case .string(let name) = current.kind else { throw fail("FUNCTION needs a function name string") }
            position += 1
            var args = [receiver]
            while isOp(",") {
                position += 1
                args.append(try parseExpression())
            }
            try expectOp(")")
            return .function(name, args, column: column)
        case "CAST":
            guard position + 1 < tokens.count, case .op("(") = tokens[position + 1].kind else { return nil }
            position += 2
            let value = try parseExpression()
            try expectOp(",")
            let type = try parseExpression()
            try expectOp(")")
            return .function("castObject:toType:", [value, type], column: column)
        default:
            break
        }
        // `lowercase:(name)`, `add:to:(1, 2)`: a built-in function by its NSExpression name.
        var j = position + 1
        var name = word
        while j + 1 < tokens.count, case .op(":") = tokens[j].kind {
            name += ":"
            if case .identifier(let more) = tokens[j + 1].kind, j + 2 < tokens.count, case .op(":") = tokens[j + 2].kind
            {
                name += more
                j += 2
                continue
            }
            j += 1
            break
        }
        guard j < tokens.count, case .op("(") = tokens[j].kind else { return nil }
        position = j + 1
        var args: [ExpressionNode] = []
        if !isOp(")") {
            args.append(try parseExpression())
            while isOp(",") {
                position += 1
                args.append(try parseExpression())
            }
        }
        try expectOp(")")
        return .function(name, args, column: column)
    }

    mutating func nextArgument(_ column: Int) throws -> Any? {
        guard argumentIndex < arguments.count else {
            throw LogbookError(
                .invalidPredicate,
                "the format \"\(text)\" needs more arguments than the \(arguments.count) given (column \(column))")
        }
        defer { argumentIndex += 1 }
        return arguments[argumentIndex]
    }

    mutating func parsePrimaryExpression() throws -> ExpressionNode {
        try enterNesting()
        defer { depth -= 1 }
        let t = current
        switch t.kind {
        case .string(let s):
            position += 1
            return .value(s)
        case .number(let d, let isInteger):
            position += 1
            return .value(isInteger && abs(d) < 9.0e15 ? Int(d) as Any : d as Any)
        case .format(let spec):
            position += 1
            let arg = try nextArgument(t.column)
            switch spec {
            case "%K":
                guard let key = arg as? String else { throw fail("%K needs a key name (a String) argument", t.column) }
                return try continueKeyPath(key.split(separator: ".").map(String.init), column: t.column)
            case "%d", "%i", "%ld", "%lld", "%u", "%lu":
                guard arg is any BinaryInteger else { throw fail("\(spec) needs an integer argument", t.column) }
                return .value(arg)
            case "%f", "%lf":
                guard arg is any BinaryFloatingPoint else {
                    throw fail("\(spec) needs a floating-point argument", t.column)
                }
                return .value(arg)
            default:
                return .value(arg)
            }
        case .op("{"):
            position += 1
            var items: [ExpressionNode] = []
            if !isOp("}") {
                items.append(try parseExpression())
                while isOp(",") {
                    position += 1
                    items.append(try parseExpression())
                }
            }
            try expectOp("}")
            return .list(items)
        case .variable(let name):
            position += 1
            var path: [String] = []
            while isOp(".") {
                position += 1
                path.append(try keyComponent())
            }
            return .variable(name, path, column: t.column)
        case .identifier(let w):
            switch w.uppercased() {
            case "NIL", "NULL":
                position += 1
                return .value(nil)
            case "TRUE", "YES":
                position += 1
                return .value(true)
            case "FALSE", "NO":
                position += 1
                return .value(false)
            case "SELF":
                position += 1
                return try continueKeyPath([], column: t.column)
            case "SUBQUERY":
                position += 1
                try expectOp("(")
                let collection = try parseExpression()
                try expectOp(",")
                guard case .variable(let v) = current.kind else { throw fail("SUBQUERY needs a $variable") }
                position += 1
                try expectOp(",")
                let predicate = try parseOr()
                try expectOp(")")
                var aggregate: String?
                if isOp(".") {
                    position += 1
                    guard case .at(let a) = current.kind else { throw fail("expected @count after SUBQUERY(…)") }
                    aggregate = a
                    position += 1
                }
                return .subquery(
                    collection: collection, variable: v, predicate: predicate, aggregate: aggregate, column: t.column)
            default:
                if let f = try parseFunction(w, column: t.column) { return f }
                position += 1
                return try continueKeyPath([w], column: t.column)
            }
        case .at(let a):
            position += 1
            return try continueKeyPath(["@" + a], column: t.column)
        case .op("("):
            // A parenthesised expression: `(a + b) * c`.
            position += 1
            let inner = try parseExpression()
            try expectOp(")")
            return inner
        case .end:
            throw fail("the predicate ends where a value or key was expected")
        default:
            throw fail("expected a key, a value or an argument, found \(describe(t))")
        }
    }

    mutating func keyComponent() throws -> String {
        switch current.kind {
        case .identifier(let w):
            position += 1
            return w
        case .at(let a):
            position += 1
            return "@" + a
        case .format("%K"):
            let c = current.column
            position += 1
            guard let key = try nextArgument(c) as? String else {
                throw fail("%K needs a key name (a String) argument", c)
            }
            return key
        default: throw fail("expected a key after '.'")
        }
    }

    mutating func continueKeyPath(_ start: [String], column: Int) throws -> ExpressionNode {
        var path = start
        while isOp(".") {
            position += 1
            path.append(try keyComponent())
        }
        return .keyPath(path, column: column)
    }
}
