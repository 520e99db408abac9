import Foundation

/// Tokens of the predicate format language.
struct PredicateToken: Equatable {
    enum Kind: Equatable {
        case identifier(String)  // keys, keywords (case-insensitive keywords are recognised by the parser)
        case string(String)
        case number(Double, isInteger: Bool)
        case op(String)  // == = != <> < <= =< > >= => && || ! ( ) { } , . [ ] + - * / ** & | ^ ~ :
        case format(String)  // %@ %K %d %i %ld %lld %f %lf %u
        case variable(String)  // $name
        case at(String)  // @count @sum @avg @min @max
        case end
    }
    var kind: Kind
    var column: Int
}

enum PredicateLexer {
    static func tokens(_ text: String) throws -> [PredicateToken] {
        let chars = Array(text.unicodeScalars)
        var i = 0
        var out: [PredicateToken] = []
        func fail(_ message: String, _ at: Int) -> LogbookError {
            LogbookError(.invalidPredicate, "\(message) at column \(at + 1) of \"\(text)\"")
        }
        while i < chars.count {
            let c = chars[i]
            let start = i
            if CharacterSet.whitespacesAndNewlines.contains(c) {
                i += 1
                continue
            }
            if c == "\"" || c == "'" {
                var s = String.UnicodeScalarView()
                i += 1
                var closed = false
                while i < chars.count {
                    if chars[i] == "\\" && i + 1 < chars.count {
                        let n = chars[i + 1]
                        switch n {
                        case "n": s.append("\n")
                        case "t": s.append("\t")
                        default: s.append(n)
                        }
                        i += 2
                        continue
                    }
                    if chars[i] == c {
                        closed = true
                        i += 1
                        break
                    }
                    s.append(chars[i])
                    i += 1
                }
                guard closed else { throw fail("unterminated string", start) }
                out.append(.init(kind: .string(String(s)), column: start + 1))
                continue
            }
            if CharacterSet.decimalDigits.contains(c)
                || (c == "-" && i + 1 < chars.count && CharacterSet.decimalDigits.contains(chars[i + 1])
                    && (out.last.map {
                        if case .op(let o) = $0.kind { return o != ")" && o != "]" } else { return false }
                    } ?? true))
            {
                var j = i + 1
                var isInteger = true
                while j < chars.count,
                    CharacterSet.decimalDigits.contains(chars[j]) || chars[j] == "." || chars[j] == "e"
                        || chars[j] == "E"
                        || ((chars[j] == "-" || chars[j] == "+") && (chars[j - 1] == "e" || chars[j - 1] == "E"))
                {
                    if chars[j] == "." || chars[j] == "e" || chars[j] == "E" { isInteger = false }
                    j += 1
                }
                let s = String(String.UnicodeScalarView(chars[i..<j]))
                guard let d = Double(s) else { throw fail("malformed number \(s)", start) }
                out.append(.init(kind: .number(d, isInteger: isInteger), column: start + 1))
                i = j
                continue
            }
            if c == "%" {
                var j = i + 1
                while j < chars.count, CharacterSet.letters.contains(chars[j]) || chars[j] == "@" {
                    j += 1
                    if chars[j - 1] == "@" || chars[j - 1] == "K" || chars[j - 1] == "d" || chars[j - 1] == "i"
                        || chars[j - 1] == "f" || chars[j - 1] == "u"
                    {
                        break
                    }
                }
                let spec = String(String.UnicodeScalarView(chars[i..<j]))
                guard ["%@", "%K", "%d", "%i", "%ld", "%lld", "%f", "%lf", "%u", "%lu"].contains(spec) else {
                    throw fail("unknown format specifier \(spec)", start)
                }
                out.append(.init(kind: .format(spec), column: start + 1))
                i = j
                continue
            }
            if c == "$" || c == "@" || CharacterSet.letters.contains(c) || c == "_" || c == "#" {
                var j = i + 1
                while j < chars.count, CharacterSet.alphanumerics.contains(chars[j]) || chars[j] == "_" { j += 1 }
                let word = String(String.UnicodeScalarView(chars[(c == "#" || c == "@" ? i + 1 : i)..<j]))
                if c == "$" {
                    guard word.count > 1 else { throw fail("a variable needs a name", start) }
                    out.append(.init(kind: .variable(String(word.dropFirst())), column: start + 1))
                } else if c == "@" && word.isEmpty {
                    throw fail("'@' needs an aggregate name such as count", start)
                } else if c == "@" {
                    out.append(.init(kind: .at(word.lowercased()), column: start + 1))
                } else {
                    out.append(.init(kind: .identifier(word), column: start + 1))
                }
                i = j
                continue
            }
            let two = i + 1 < chars.count ? String(String.UnicodeScalarView([c, chars[i + 1]])) : ""
            if ["==", "!=", "<>", "<=", "=<", ">=", "=>", "&&", "||", "**"].contains(two) {
                out.append(.init(kind: .op(two), column: start + 1))
                i += 2
                continue
            }
            if "=<>!(){},.[]+-*/&|^~:".unicodeScalars.contains(c) {
                out.append(.init(kind: .op(String(c)), column: start + 1))
                i += 1
                continue
            }
            throw fail("unexpected character '\(c)'", start)
        }
        out.append(.init(kind: .end, column: chars.count + 1))
        return out
    }
}
