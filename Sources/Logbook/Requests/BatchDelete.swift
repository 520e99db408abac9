import Foundation
import LogbookEngine

/// Deletes the objects a predicate selects (or the objects of a list of IDs) straight in the
/// store, without loading them into a context (Core Data's `NSBatchDeleteRequest`): one
/// transaction. Unlike Core Data's, it applies the delete rules: cascades follow (through any
/// number of levels), nullify removes the deleted objects from the other side of each inverse,
/// deny refuses the whole request with a `.deleteDenied` error, and indexes stay exact. The
/// deleted objects' IDs come back, and the container's contexts merge the deletion (and the
/// nullified objects) automatically — Core Data leaves that merge to the caller.
///
/// ```swift
/// var request = BatchDeleteRequest(entityName: "Item")
/// request.predicate = try FetchPredicate(format: "done == YES")
/// let result = try context.execute(request)        // result.objectIDs: what went
/// ```
public struct BatchDeleteRequest {
    /// The entity whose objects are deleted (with its sub-entities); nil for a list of IDs.
    public let entityName: String?
    /// Only the objects that satisfy it (all when nil).
    public var predicate: FetchPredicate?
    /// The objects to delete, when the request was made from IDs.
    public let objectIDs: [ObjectID]

    /// A request that deletes objects of the entity named `entityName`.
    public init(entityName: String, predicate: FetchPredicate? = nil) {
        self.entityName = entityName
        self.predicate = predicate
        self.objectIDs = []
    }

    /// A request that deletes the objects with these IDs (any entities).
    public init(objectIDs: [ObjectID]) {
        self.entityName = nil
        self.objectIDs = objectIDs
    }
}

extension ManagedObjectContext {
    /// Runs a batch delete in one transaction; see `BatchDeleteRequest`. `BatchResult.count` is
    /// the number of objects deleted (cascades included) and `objectIDs` their IDs.
    public func execute(_ request: BatchDeleteRequest) throws -> BatchResult {
        var roots: [(EntityLayout, FetchPlan)] = []
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
        let (version, deletedKeys, rewritten) = try container.withSaveLock {
            log -> (UInt64, [UInt64], [UInt64]) in
            let snapshot = container.store.snapshot()
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
            var doomed = Set<UInt64>()
            var records: [UInt64: (EntityLayout, [Slot])] = [:]
            var order: [UInt64] = []
            while let key = queue.popLast() {
                guard doomed.insert(key).inserted, let layout = layout(forKey: key),
                    let slots = try decode(snapshot, key: key, layout: layout)
                else { continue }
                records[key] = (layout, slots)
                order.append(key)
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
            guard !order.isEmpty else { return (0, [], []) }
            // The other side of each inverse forgets the deleted objects.
            var transaction = Transaction()
            var changed: [UInt64: (EntityLayout, [Slot])] = [:]
            for key in order {
                let (layout, slots) = records[key]!
                for (r, rel) in layout.entity.relationships.enumerated() {
                    guard rel.deleteRule != .noAction, let inv = layout.relationshipInverse[r] else { continue }
                    for other in relatedKeys(inStore: snapshot, key, layout, r, slots) where !doomed.contains(other) {
                        guard let otherLayout = self.layout(forKey: other) else { continue }
                        if otherLayout.entity.relationships[inv].isToMany {
                            transaction.removeMembers(
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
                Self.encode(slots, key: key, entity: layout, into: &transaction, buffer: &buffer, layout: store)
            }
            for key in order {
                let layout = records[key]!.0
                transaction.delete(key)
                for r in layout.toMany {
                    transaction.replaceMembers(
                        EmptyCollection(), ofSet: store.setKey(entity: layout.index, relationship: r, owner: key))
                    if let k = store.orderKey(entity: layout.index, relationship: r, owner: key) {
                        try deleteOrder(k, snapshot: snapshot, into: &transaction)
                    }
                }
            }
            let version = try commitUnderSaveLock(&transaction) {
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
            container.didSave(changes, from: self)
            if !merged.isEmpty { post(.objectsDidChange(merged)) }
        }
        return BatchResult(count: ids.count, objectIDs: ids)
    }

    /// The objects related to `key` through relationship `r`, as the store holds them.
    func relatedKeys(inStore snapshot: Snapshot, _ key: UInt64, _ layout: EntityLayout, _ r: Int, _ slots: [Slot])
        -> [UInt64]
    {
        if layout.entity.relationships[r].isToMany {
            return snapshot.members(ofSet: storeLayout.setKey(entity: layout.index, relationship: r, owner: key))
        }
        if case .object(let k) = slots[layout.slot(ofToOne: r)] { return [k] }
        return []
    }
}
