import LogbookEngine

/// Writes one entity's records into engine transactions: the record's bytes and its index
/// keys. Made once for a run of records of one entity (a save's inserted objects come in such
/// runs, a batch request's rows are all of one), so that the store layout's per-entity tables
/// are looked up once, not per record.
///
/// ```swift
/// let writer = RecordWriter(entity: layout, store: storeLayout)
/// var buffer: [UInt8] = []
/// for (key, slots) in rows { writer.put(slots, key: key, into: &transaction, buffer: &buffer) }
/// ```
struct RecordWriter {
    let entity: EntityLayout
    let store: StoreLayout
    /// At most one index, on one attribute, and no constraint or compound index: the record is
    /// written straight into the transaction, with no intermediate buffer.
    private let direct: Bool
    private let index: (slot: Int, id: IndexID, type: AttributeType)?

    init(entity: EntityLayout, store: StoreLayout) {
        self.entity = entity
        self.store = store
        let indexed = store.indexedSlots[entity.index]
        direct =
            indexed.count <= 1 && store.constraintIndexes[entity.index].isEmpty
            && store.compoundIndexes[entity.index].isEmpty
        index = indexed.first.map {
            ($0.slot, $0.index, $0.slot < entity.attributeCount ? entity.entity.attributes[$0.slot].type : .int64)
        }
    }

    /// Puts the record of `given` (transient attributes are never stored) and its index keys
    /// under `key`; `buffer` is scratch space reused from record to record.
    func put(_ given: [FieldValue], key: UInt64, into t: inout Transaction, buffer: inout [UInt8]) {
        var slots = given
        // Transient attributes are never stored.
        for i in entity.transientSlots { slots[i] = .null }
        if direct, let size = RecordCodec.encodedSize(slots, layout: entity) {
            // The common case: the record written straight into the transaction.
            let indexKey = index.map { RecordCodec.indexKey(slots[$0.slot], type: $0.type, index: $0.id) }
            let entity = self.entity
            t.put(key, valueCount: size, indexKey: indexKey) { out in
                RecordCodec.write(slots, layout: entity, to: out)
            }
            return
        }
        RecordCodec.encode(slots, layout: entity, into: &buffer)
        t.put(key, value: buffer, indexKeys: store.indexKeys(slots, entity: entity))
    }

    /// Puts one record with a writer made for it (for records of many entities, one by one).
    static func put(
        _ slots: [FieldValue], key: UInt64, entity: EntityLayout, store: StoreLayout, into t: inout Transaction,
        buffer: inout [UInt8]
    ) {
        RecordWriter(entity: entity, store: store).put(slots, key: key, into: &t, buffer: &buffer)
    }
}

/// What a save writes: its engine transaction, and what the save settles once it commits.
struct SaveTransaction {
    var transaction = Transaction()
    /// The keys of the records it replaces or deletes (for `RecentWrites`).
    var written: [UInt64] = []
    /// The changed objects whose records it writes, unretained (the context's `updated` holds
    /// them until the save ends): their base version becomes the commit's.
    var savedUpdates: [Unmanaged<ManagedObject>] = []
    /// Records this save writes for objects it did not change itself (another save had linked
    /// them to an object this one deletes): the other contexts hear they were updated.
    var unlinked: [UInt64] = []
}
