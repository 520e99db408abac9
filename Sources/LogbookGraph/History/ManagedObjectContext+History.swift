import Foundation
import LogbookEngine

extension ManagedObjectContext {
    /// Runs a history request against the context's store (Core Data's
    /// `execute(_:)` with an `NSPersistentHistoryChangeRequest`).
    @discardableResult
    public func execute(_ request: HistoryRequest) throws -> HistoryResult {
        switch request.kind {
        case .fetch(let token):
            return HistoryResult(transactions: try container.history(after: token), deletedCount: 0)
        case .fetchAfterDate(let date):
            return HistoryResult(transactions: try container.history(after: date), deletedCount: 0)
        case .delete(let token):
            return HistoryResult(transactions: [], deletedCount: try container.deleteHistory(before: token))
        case .deleteBeforeDate(let date):
            return HistoryResult(transactions: [], deletedCount: try container.deleteHistory(before: date))
        }
    }
}

extension ManagedObjectContext {
    /// The history record of the save being made (under the save lock, before its commit):
    /// the inserted objects, the updated ones with the names of what changed, the deleted
    /// ones with their preserved values.
    func historyRecord() throws -> [UInt8] {
        var record = historyWriter(changes: inserted.count + updated.count + deleted.count)
        for object in inserted.values { record.insert(object.engineKey) }
        // To-many changes name the relationship on the owner.
        var toMany: [UInt64: Set<String>] = [:]
        for setKey in Set(setAdds.keys).union(setRemoves.keys) {
            for (owner, e, r) in storeLayout.owners(ofSet: setKey) where updated[owner] != nil {
                toMany[owner, default: []].insert(container.model.entities[e].relationships[r].name)
            }
        }
        for key in updated.keys.sorted() {
            let object = updated[key].unsafelyUnwrapped
            var names = toMany[key] ?? []
            if let before = object.committed {
                for (i, slot) in object.slots.enumerated() where before[i] != slot {
                    names.insert(object.name(ofSlot: i))
                }
            }
            record.update(key, names.sorted())
        }
        let snapshot = deleted.isEmpty ? nil : container.store.snapshot()
        for object in deleted.values {
            let attributes = object.layout.entity.attributes
            let preserved = attributes.indices.filter { attributes[$0].preservesValueInHistoryOnDeletion }
            var values: [(String, FieldValue, AttributeType)] = []
            if !preserved.isEmpty {
                // The values as stored (a delete drops unsaved changes).
                let stored: [FieldValue]? =
                    object.flags.contains(.fault) || object.flags.contains(.inserted)
                    ? try decode(snapshot!, key: object.engineKey, layout: object.layout)
                    : (object.committed ?? object.slots)
                if let stored { values = preserved.map { (attributes[$0].name, stored[$0], attributes[$0].type) } }
            }
            record.delete(object.engineKey, values)
        }
        if container.writer.memberChanges { record.members(memberChanges()) }
        return record.bytes
    }

    /// The to-many changes of the save being made, by owner: the members added and removed, and
    /// whether an ordered relationship's order was set.
    func memberChanges() -> [(owner: UInt64, name: String, added: [UInt64], removed: [UInt64], reordered: Bool)] {
        var out: [(owner: UInt64, name: String, added: [UInt64], removed: [UInt64], reordered: Bool)] = []
        let sets = Set(setAdds.keys).union(setRemoves.keys).union(orderOverrides.keys)
        guard !sets.isEmpty else { return out }
        let snapshot = container.store.snapshot()
        for set in sets.sorted() {
            // Sub-entities share set keyspaces: the owner is the candidate that exists.
            let candidates = storeLayout.owners(ofSet: set)
            guard
                let (owner, e, r) = candidates.count == 1
                    ? candidates.first
                    : candidates.first(where: { c in
                        registered(c.owner) != nil || inserted.lookup(c.owner) != nil || snapshot.contains(c.owner)
                    })
            else { continue }
            // An owner deleted by this save takes its sets with it.
            if deleted[owner] != nil { continue }
            let added = (setAdds[set].map { Array($0) } ?? []).sorted()
            let removed = (setRemoves[set].map { Array($0) } ?? []).sorted()
            let reordered = orderOverrides[set] != nil
            if added.isEmpty && removed.isEmpty && !reordered { continue }
            out.append((owner, container.model.entities[e].relationships[r].name, added, removed, reordered))
        }
        return out.sorted { $0.owner < $1.owner }
    }
}

extension ManagedObjectContext {
    /// The history record of a batch request: its changes, made by this context.
    func batchHistoryRecord(
        inserted: [UInt64] = [], updated: [UInt64] = [], names: [String] = [], deleted: [UInt64] = []
    )
        -> [UInt8]
    {
        var record = historyWriter(changes: inserted.count + updated.count + deleted.count)
        for k in inserted { record.insert(k) }
        for k in updated { record.update(k, names) }
        for k in deleted { record.delete(k, []) }
        if container.writer.memberChanges { record.members([]) }
        return record.bytes
    }

    /// A history record of `changes` changes made by this context now.
    func historyWriter(changes: Int) -> HistoryRecord.Writer {
        HistoryRecord.Writer(
            timestamp: Date(), author: transactionAuthor, contextName: name, changes: changes,
            memberChanges: container.writer.memberChanges)
    }
}
