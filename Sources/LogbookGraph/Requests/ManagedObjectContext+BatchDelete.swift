import Foundation
import LogbookEngine

extension ManagedObjectContext {
    /// Runs a batch delete in one transaction; see `BatchDeleteRequest`. `BatchResult.count` is
    /// the number of objects deleted (cascades included) and `objectIDs` their IDs.
    public func execute(_ request: BatchDeleteRequest) throws -> BatchResult {
        var roots: [(EntityLayout, ExecutionPlan)] = []
        var given: [UInt64] = []
        if let name = request.entityName {
            let layout = try model.layout(named: name)
            var fetch = FetchRequest<ManagedObject>(entityName: name)
            fetch.predicate = request.predicate
            for l in spans(fetch, layout) {
                var f = fetch
                f.entityName = l.name
                roots.append((l, try plan(f, layout: l)))
            }
        } else {
            for id in request.objectIDs {
                guard id.store == storeLayout.identity else {
                    throw LogbookError(.invalidRelationship, "the object ID \(id) is from another store", objectID: id)
                }
                given.append(id.key)
            }
        }
        let store = storeLayout
        let (version, deletedKeys, rewritten) = try container.writer.withSaveLock {
            log -> (UInt64, [UInt64], [UInt64]) in
            let snapshot = container.store.snapshot()
            let doomed = try selectForDeletion(
                request, roots: roots, given: given, snapshot: snapshot)
            let order = doomed.order
            let records = doomed.records
            guard !order.isEmpty else { return (0, [], []) }
            var transaction = Transaction()
            let changed = try putDeletions(doomed, snapshot: snapshot, into: &transaction)
            let version = try container.writer.commit(&transaction) {
                var record = historyWriter(changes: changed.count + order.count)
                for key in changed.keys.sorted() { record.update(key, []) }
                for key in order {
                    let (layout, slots) = records[key]!
                    let attributes = layout.entity.attributes
                    record.delete(
                        key,
                        attributes.indices.filter { attributes[$0].preservesValueInHistoryOnDeletion }.map {
                            (attributes[$0].name, slots[$0], attributes[$0].type)
                        })
                }
                return record.bytes
            }
            log.record(order + changed.keys, version: version)
            return (version, order, Array(changed.keys))
        }
        let ids = deletedKeys.map { ObjectID(store: store.identity, key: $0) }
        if !ids.isEmpty {
            let changes = ContextChanges(
                updated: Set(rewritten.map { ObjectID(store: store.identity, key: $0) }), deleted: Set(ids),
                version: version)
            let merged = refreshObjects(changes)
            passToChildren(changes)
            container.didSave(changes, from: self)
            if !merged.isEmpty { post(.objectsDidChange(merged)) }
        }
        return BatchResult(count: ids.count, objectIDs: ids)
    }

    /// The objects a batch delete removes, with their records as stored: those it selects,
    /// then their cascades, breadth first (every record read once); a `.deny` rule with
    /// related objects left stops it.
    struct BatchDeletion {
        var doomed = Set<UInt64>()
        var records: [UInt64: (EntityLayout, [FieldValue])] = [:]
        /// The keys, in the order they were reached.
        var order: [UInt64] = []
    }

    /// The selection and cascades of a batch delete (under the save lock).
    private func selectForDeletion(
        _ request: BatchDeleteRequest, roots: [(EntityLayout, ExecutionPlan)], given: [UInt64], snapshot: Snapshot
    ) throws -> BatchDeletion {
        let store = storeLayout
        var evaluator = PredicateEvaluator(format: request.predicate?.format ?? "")
        // The objects selected.
        var queue: [UInt64] = given.filter { snapshot.contains($0) }
        for (layout, plan) in roots {
            let keys = try candidateKeys(plan, layout: layout, snapshot: snapshot, stopAfter: nil)
            guard let residual = plan.residual else {
                queue += keys
                continue
            }
            for o in try materialize(keys, layout: layout, snapshot: snapshot, register: false)
            where try evaluator.test(residual, object: o) {
                queue.append(o.engineKey)
            }
        }
        // Cascades, breadth first; every deleted object's record is read once.
        var deletion = BatchDeletion()
        while let key = queue.popLast() {
            guard deletion.doomed.insert(key).inserted, let layout = layout(forKey: key),
                let slots = try decode(snapshot, key: key, layout: layout)
            else { continue }
            deletion.records[key] = (layout, slots)
            deletion.order.append(key)
            for (r, rel) in layout.entity.relationships.enumerated() {
                let related = relatedKeys(inStore: snapshot, key, layout, r, slots)
                switch rel.deleteRule {
                case .cascade: queue += related
                case .deny where !related.isEmpty:
                    throw LogbookError(
                        .deleteDenied,
                        "the delete rule of \(rel.name) is deny and \(related.count) related object\(related.count == 1 ? " is" : "s are") still there",
                        entity: layout.name, key: rel.name, objectID: ObjectID(store: store.identity, key: key))
                default: break
                }
            }
        }
        return deletion
    }

    /// The deletions written into `t`: the other side of each inverse forgets the deleted
    /// objects (set removals, or to-one values cleared in records written again), then the
    /// records, their sets and orders go. Returns the records written again.
    private func putDeletions(
        _ deletion: BatchDeletion, snapshot: Snapshot, into t: inout Transaction
    ) throws -> [UInt64: (EntityLayout, [FieldValue])] {
        let store = storeLayout
        let (doomed, records, order) = (deletion.doomed, deletion.records, deletion.order)
        // The other side of each inverse forgets the deleted objects.
        var changed: [UInt64: (EntityLayout, [FieldValue])] = [:]
        for key in order {
            let (layout, slots) = records[key]!
            for (r, rel) in layout.entity.relationships.enumerated() {
                guard rel.deleteRule != .noAction, let inv = layout.relationshipInverse[r] else { continue }
                for other in relatedKeys(inStore: snapshot, key, layout, r, slots) where !doomed.contains(other) {
                    guard let otherLayout = self.layout(forKey: other) else { continue }
                    if otherLayout.entity.relationships[inv].isToMany {
                        t.removeMembers(
                            [key], fromSet: store.setKey(entity: otherLayout.index, relationship: inv, owner: other)
                        )
                    } else {
                        if changed[other] == nil {
                            guard let s = try decode(snapshot, key: other, layout: otherLayout) else { continue }
                            changed[other] = (otherLayout, s)
                        }
                        let slot = otherLayout.slot(ofToOne: inv)
                        if changed[other]!.1[slot] == .object(key) { changed[other]!.1[slot] = .null }
                    }
                }
            }
        }
        var buffer: [UInt8] = []
        for (key, (layout, slots)) in changed.sorted(by: { $0.key < $1.key }) {
            RecordWriter.put(slots, key: key, entity: layout, store: store, into: &t, buffer: &buffer)
        }
        for key in order {
            let layout = records[key]!.0
            t.delete(key)
            for r in layout.toMany {
                t.replaceMembers(
                    EmptyCollection(), ofSet: store.setKey(entity: layout.index, relationship: r, owner: key))
                if let k = store.orderKey(entity: layout.index, relationship: r, owner: key) {
                    try deleteOrder(k, snapshot: snapshot, into: &t)
                }
            }
        }
        return changed
    }

    /// The objects related to `key` through relationship `r`, as the store holds them.
    func relatedKeys(inStore snapshot: Snapshot, _ key: UInt64, _ layout: EntityLayout, _ r: Int, _ slots: [FieldValue])
        -> [UInt64]
    {
        if layout.entity.relationships[r].isToMany {
            return snapshot.members(ofSet: storeLayout.setKey(entity: layout.index, relationship: r, owner: key))
        }
        if case .object(let k) = slots[layout.slot(ofToOne: r)] { return [k] }
        return []
    }
}
