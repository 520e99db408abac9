import Foundation
import LogbookEngine

extension RecordFilter {
    /// Turns predicate nodes into tests over one layout; nil for what does not compile.
    struct Compiler {
        let layout: EntityLayout
        let destinationKeyspace: (Int) -> UInt16
        var maxSlot = 0

        init(layout: EntityLayout, destinationKeyspace: @escaping (Int) -> UInt16) {
            self.layout = layout
            self.destinationKeyspace = destinationKeyspace
        }

        mutating func compile(_ node: PredicateNode) -> Test? {
            switch node {
            case .constant(let b): return .constant(b)
            case .not(let n): return compile(n).map { .not($0) }
            case .and(let parts), .or(let parts):
                var tests: [Test] = []
                for p in parts {
                    guard let t = compile(p) else { return nil }
                    tests.append(t)
                }
                if case .and = node { return .and(tests) }
                return .or(tests)
            case .comparison(let c): return comparison(c)
            }
        }

        /// The constant an expression stands for (lists of constants included); nil when it is not one.
        static func constant(_ e: ExpressionNode) -> Any?? {
            switch e {
            case .value(let v): return .some(v)
            case .list(let items):
                var values: [Any?] = []
                for item in items {
                    guard case .value(let v) = item else { return nil }
                    values.append(v)
                }
                return .some(values)
            default: return nil
            }
        }

        private mutating func comparison(_ c: Comparison) -> Test? {
            guard c.modifier == .direct else { return nil }
            // One side a key of this entity's records, the other a constant.
            var path: [String]
            var constant: Any?
            var constantFirst = false
            if case .keyPath(let p, _) = c.lhs, let v = Self.constant(c.rhs) {
                path = p
                constant = v
            } else if case .keyPath(let p, _) = c.rhs, let v = Self.constant(c.lhs) {
                path = p
                constant = v
                constantFirst = true
            } else {
                return nil
            }
            guard path.count == 1, let slot = layout.slotByName[path[0]] else { return nil }
            if slot >= layout.attributeCount {
                return object(c, slot: slot, constant: constant)
            }
            let attribute = layout.entity.attributes[slot]
            guard !attribute.isTransient else { return nil }
            maxSlot = max(maxSlot, slot)
            let fallback = Fallback(
                slot: slot, comparison: c, constant: constant, constantFirst: constantFirst, type: attribute.type)
            if let fast = typed(c, slot: slot, type: attribute.type, constant: constant, constantFirst: constantFirst) {
                return fast
            }
            return .generic(fallback)
        }

        /// A mirror of an order operator, for `constant op key` read as `key op' constant`.
        static func mirrored(_ op: Comparison.Operator) -> Comparison.Operator {
            switch op {
            case .less: .greater
            case .lessOrEqual: .greaterOrEqual
            case .greater: .less
            case .greaterOrEqual: .lessOrEqual
            default: op
            }
        }

        static func plainNumber(_ v: Any?) -> Double? {
            guard let v, !(v is Bool) else { return nil }
            return PredicateEvaluator.number(v)
        }

        /// The fast test for common shapes; nil to fall back to the evaluator.
        private func typed(
            _ c: Comparison, slot: Int, type: AttributeType, constant: Any?, constantFirst: Bool
        ) -> Test? {
            let symmetric: Set<Comparison.Operator> = [
                .equal, .notEqual, .less, .lessOrEqual, .greater, .greaterOrEqual
            ]
            // Nil tests work for every type.
            if constant == nil, c.op == .equal || c.op == .notEqual {
                return c.op == .equal ? .isNull(slot) : .not(.isNull(slot))
            }
            guard !c.caseInsensitive, !c.diacriticInsensitive else { return nil }
            let op = constantFirst ? Self.mirrored(c.op) : c.op
            let kind: NumberKind?
            switch type {
            case .int16, .int32, .int64: kind = .int
            case .double: kind = .double
            case .float: kind = .float
            case .date: kind = .date
            default: kind = nil
            }
            if let kind {
                func value(_ v: Any?) -> Double? {
                    kind == .date ? (v as? Date)?.timeIntervalSinceReferenceDate : Self.plainNumber(v)
                }
                if symmetric.contains(op), let d = value(constant) { return .number(slot, kind, op, d) }
                if !constantFirst, op == .between, let bounds = constant as? [Any?], bounds.count == 2,
                    let lo = value(bounds[0]), let hi = value(bounds[1])
                {
                    return .and([.number(slot, kind, .greaterOrEqual, lo), .number(slot, kind, .lessOrEqual, hi)])
                }
                if !constantFirst, op == .in, let items = constant as? [Any?] {
                    var set = Set<Double>()
                    for item in items {
                        guard let d = value(item) else { return nil }
                        set.insert(d)
                    }
                    return .numberIn(slot, kind, set)
                }
                return nil
            }
            if type == .bool, op == .equal || op == .notEqual, let b = constant as? Bool {
                return op == .equal ? .bool(slot, b) : .not(.bool(slot, b))
            }
            guard type == .string else { return nil }
            let fallback = Fallback(
                slot: slot, comparison: c, constant: constant, constantFirst: constantFirst, type: type)
            if !constantFirst, op == .in, let items = constant as? [Any?] {
                var set = Set<[UInt8]>()
                for item in items {
                    guard let s = item as? String, case let b = Array(s.utf8), RecordFilter.isPlain(b) else {
                        return nil
                    }
                    set.insert(b)
                }
                return .string(slot, .oneOf(set), fallback: fallback)
            }
            guard let s = constant as? String else { return nil }
            let bytes = Array(s.utf8)
            guard RecordFilter.isPlain(bytes) else { return nil }
            let test: StringTest
            switch op {
            case .equal: test = .equal(bytes)
            case .notEqual: return .not(.string(slot, .equal(bytes), fallback: fallback.negated()))
            case .less, .lessOrEqual, .greater, .greaterOrEqual: test = .order(op, bytes)
            case .beginsWith where !constantFirst: test = .beginsWith(bytes)
            case .endsWith where !constantFirst: test = .endsWith(bytes)
            case .contains where !constantFirst && !bytes.isEmpty: test = .contains(bytes)
            case .like where !constantFirst:
                // `abc*`, `*abc*` and `*abc` are prefix, substring and suffix tests.
                let star = UInt8(ascii: "*")
                let inner = bytes.drop { $0 == star }.reversed().drop { $0 == star }.reversed()
                let literal = Array(inner)
                if !literal.isEmpty, !literal.contains(star), !literal.contains(UInt8(ascii: "?")) {
                    let leading = bytes.first == star
                    let trailing = bytes.last == star
                    let stars = bytes.count - literal.count
                    if leading && trailing && stars == 2 {
                        test = .contains(literal)
                    } else if !leading && trailing && stars == 1 {
                        test = .beginsWith(literal)
                    } else if leading && !trailing && stars == 1 {
                        test = .endsWith(literal)
                    } else {
                        test = .like(bytes)
                    }
                } else {
                    test = .like(bytes)
                }
            default: return nil
            }
            return .string(slot, test, fallback: fallback)
        }

        /// A to-one relationship compared with objects, object IDs or nil.
        private mutating func object(_ c: Comparison, slot: Int, constant: Any?) -> Test? {
            let kind = layout.slotKinds[slot]
            func key(_ v: Any?) -> UInt64?? {
                // .some(nil): an object no stored record can point to (not saved yet).
                let raw: UInt64
                switch v {
                case let o as ManagedObject:
                    if o.flags.contains(.inserted) { return .some(nil) }
                    raw = o.engineKey
                case let id as ObjectID: raw = id.key
                default: return nil
                }
                if kind == .anyObject { return .some(raw) }
                // A plain destination's records hold the serial alone: an object of another
                // entity is never the destination.
                let k = EngineKey(rawValue: raw)
                return .some(k.keyspace == destinationKeyspace(slot) ? k.id : nil)
            }
            var keys = Set<UInt64>()
            var whenNull = false
            switch c.op {
            case .equal, .notEqual:
                if constant == nil {
                    maxSlot = max(maxSlot, slot)
                    return c.op == .equal ? .isNull(slot) : .not(.isNull(slot))
                }
                guard let k = key(constant) else { return nil }
                if let k { keys.insert(k) }
            case .in:
                guard let items = constant as? [Any?] else { return nil }
                for item in items {
                    if item == nil {
                        whenNull = true
                        continue
                    }
                    guard let k = key(item) else { return nil }
                    if let k { keys.insert(k) }
                }
            default: return nil
            }
            maxSlot = max(maxSlot, slot)
            let test = Test.object(slot, keys, whenNull: whenNull)
            return c.op == .notEqual ? .not(test) : test
        }
    }
}

extension RecordFilter.Fallback {
    /// The same comparison with `==` for `!=` (the caller negates the result).
    func negated() -> Self {
        var copy = self
        copy.comparison.op = .equal
        return copy
    }
}
