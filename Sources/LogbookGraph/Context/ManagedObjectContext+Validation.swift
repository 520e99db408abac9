import Dispatch
import Foundation
import LogbookEngine

// What a save checks before writing: derived attributes computed, every rule validated.
extension ManagedObjectContext {
    /// Computes the derived attributes of what the save writes.
    func deriveAttributes() throws {
        guard model.layouts.contains(where: { !$0.derivedSlots.isEmpty }) else { return }
        let objects = Array(inserted.values) + updated.values.filter { !$0.flags.contains(.fault) }
        for o in objects where !o.layout.derivedSlots.isEmpty {
            for (slot, expression) in o.layout.derivedSlots {
                let type = o.layout.entity.attributes[slot].type
                let value: FieldValue
                do { value = try FieldValue(computed: try expression.evaluate(with: o), type: type) } catch let m
                    as FieldValue.Mismatch
                {
                    throw LogbookError(
                        .typeMismatch, "the derivation \(expression) gives \(m.got), not \(m.expected)",
                        entity: o.layout.name, key: o.layout.slotNames[slot], objectID: o.objectID)
                }
                if o.slots[slot] != value { setSlot(o, slot, value) }
            }
        }
    }

    /// Every reason the changed objects cannot be saved.
    func validate() -> [ValidationFailure] {
        var failures: [ValidationFailure] = []
        func fail(_ o: ManagedObject, _ key: String, _ reason: String) {
            failures.append(ValidationFailure(objectID: o.objectID, entity: o.layout.name, key: key, reason: reason))
        }
        for object in inserted.values { check(object) }
        for object in updated.values where !object.flags.contains(.fault) { check(object) }
        func check(_ object: ManagedObject) {
            object.withLayout { layout in
                for i in layout.requiredSlots where object.slots[i].isNull {
                    fail(object, layout.slotNames[i], "a value is required")
                }
                if !layout.ruleSlots.isEmpty { layout.checkRules(object.slots) { fail(object, $0, $1) } }
                if layout.hasRelationshipRules { checkRelationships(object) }
            }
        }
        func checkRelationships(_ object: ManagedObject) {
            for (r, rel) in object.layout.entity.relationships.enumerated() {
                if rel.isToMany {
                    if rel.minCount > 0 || rel.maxCount < .max {
                        let n = relatedKeys(object.engineKey, object.layout, r).count
                        if n < rel.minCount || n > rel.maxCount {
                            fail(object, rel.name, "\(n) related objects; \(rel.minCount)...\(rel.maxCount) allowed")
                        }
                    }
                } else if !rel.isOptional, object.slots[object.layout.slot(ofToOne: r)].isNull {
                    fail(object, rel.name, "a related object is required")
                }
            }
        }
        for object in deleted.values {
            for (r, rel) in object.layout.entity.relationships.enumerated() where rel.deleteRule == .deny {
                let related: Int
                if rel.isToMany {
                    related = relatedKeys(object.engineKey, object.layout, r).count
                } else {
                    related = object.slots[object.layout.slot(ofToOne: r)].isNull ? 0 : 1
                }
                if related > 0 {
                    fail(
                        object, rel.name,
                        "the delete rule is deny and \(related) related object\(related == 1 ? " is" : "s are") still there"
                    )
                }
            }
        }
        return failures
    }
}

extension EntityLayout {
    /// Calls `fail(key, reason)` for each validation rule an attribute's value breaks.
    func checkRules(_ slots: [FieldValue], _ fail: (String, String) -> Void) {
        for i in ruleSlots {
            let a = entity.attributes[i]
            let slot = slots[i]
            if slot.isNull { continue }
            for rule in a.rules {
                switch rule {
                case .range(let range):
                    if let n = slot.number, !range.contains(n) {
                        fail(a.name, "\(n) is outside \(range.lowerBound)...\(range.upperBound)")
                    }
                    if case .double(let d) = slot, a.type == .date, !range.contains(d) {
                        fail(a.name, "the date is outside the allowed range")
                    }
                case .length(let range):
                    var n: Int?
                    if case .string(let s) = slot { n = s.count }
                    if case .data(let d) = slot { n = d.count }
                    if let n, !range.contains(n) {
                        fail(a.name, "length \(n) is outside \(range.lowerBound)...\(range.upperBound)")
                    }
                case .pattern(let pattern):
                    if case .string(let s) = slot {
                        let ok =
                            (try? NSRegularExpression(pattern: "^(?:\(pattern))$"))
                            .map { $0.firstMatch(in: s, range: NSRange(s.startIndex..., in: s)) != nil } ?? false
                        if !ok { fail(a.name, "\"\(s)\" does not match \(pattern)") }
                    }
                case .custom(let check):
                    if let reason = check(slot.value(type: a.type)) { fail(a.name, reason) }
                }
            }
        }
    }
}
