import Foundation
import LogbookEngine
import LogbookTestSupport
import Testing

@testable import LogbookGraph

/// Every `Date` comes back bit for bit: through a save, a reopen, predicates on an indexed and
/// a plain attribute, sorting, a batch update and history. Dates used to be stored as seconds
/// since 1970, and `Date(timeIntervalSince1970:)` of that lost the last bits of most dates of
/// these years (818022387.7552129 came back as 818022387.7552128), -0.0 and subnormal
/// intervals came back as 0, and an equality fetch missed them.
@Suite struct DateRoundTripTests {
    static func model() throws -> ManagedObjectModel {
        var at = AttributeDescription("at", .date, optional: true, indexed: true)
        at.preservesValueInHistoryOnDeletion = true
        return try ManagedObjectModel(entities: [
            EntityDescription(
                "Event",
                attributes: [
                    AttributeDescription("n", .int64), at, AttributeDescription("plain", .date, optional: true)
                ])
        ])
    }

    /// The extremes, then dates of these years with random low bits, then random finite
    /// doubles of every magnitude (random bit patterns).
    static func intervals(count: Int, seed: UInt64) -> [Double] {
        var random = SeededGenerator(seed: seed)
        var out: [Double] = [
            818022387.7552129, 0, -0.0, .leastNonzeroMagnitude, -.leastNonzeroMagnitude,
            .leastNormalMagnitude, Double.leastNormalMagnitude.nextDown, .greatestFiniteMagnitude,
            -.greatestFiniteMagnitude, Date.distantPast.timeIntervalSinceReferenceDate,
            Date.distantFuture.timeIntervalSinceReferenceDate, -978_307_200, 978307200.5, 1e-300, -1e-300
        ]
        while out.count < count {
            if Bool.random(using: &random) {
                // 2020 to 2035, every bit of the mantissa random.
                let d = Double.random(in: 600_000_000..<1_100_000_000, using: &random)
                out.append(Double(bitPattern: d.bitPattern ^ (random.next() & 0xFF)))
            } else {
                let d = Double(bitPattern: random.next())
                if d.isFinite { out.append(d) }
            }
        }
        return out
    }

    func bits(_ v: Any?) -> UInt64? { (v as? Date)?.timeIntervalSinceReferenceDate.bitPattern }

    @Test func everyDateComesBackBitForBit() throws {
        let store = TemporaryStore()
        let values = Self.intervals(count: 2_000, seed: 0xDA7E)
        do {
            let container = try makeContainer(store, model: Self.model())
            let c = container.newContext(concurrencyType: .confinement)
            for (n, v) in values.enumerated() {
                let o = try c.insertNewObject(forEntityName: "Event")
                try o.setValue(Int64(n), forKey: "n")
                try o.setValue(Date(timeIntervalSinceReferenceDate: v), forKey: "at")
                try o.setValue(Date(timeIntervalSinceReferenceDate: v), forKey: "plain")
                // In memory, before the save.
                #expect(bits(try o.value(forKey: "at")) == v.bitPattern)
            }
            try c.save()
        }
        let container = try makeContainer(store, model: Self.model())
        let c = container.newContext(concurrencyType: .confinement)
        var request = FetchRequest<ManagedObject>(entityName: "Event")
        request.sortDescriptors = [FetchSortDescriptor(key: "n")]
        let objects = try c.fetch(request)
        #expect(objects.count == values.count)
        var wrong: [String] = []
        for (o, v) in zip(objects, values) {
            for key in ["at", "plain"] where bits(try o.value(forKey: key)) != v.bitPattern {
                wrong.append("\(key) \(v) came back as \((try? o.value(forKey: key)) as? Date as Any)")
            }
        }
        #expect(wrong.isEmpty, "\(wrong.count) of \(values.count * 2) values differ: \(wrong.prefix(5))")

        // Equality on the index and on a scan finds each value (as many as equal it: -0.0 == 0).
        for v in values.prefix(60) + values.suffix(40) {
            let expected = values.filter { $0 == v }.count
            for key in ["at", "plain"] {
                var r = FetchRequest<ManagedObject>(entityName: "Event")
                r.predicate = try FetchPredicate(format: "\(key) == %@", Date(timeIntervalSinceReferenceDate: v))
                #expect(try c.count(for: r) == expected, "\(key) == \(v)")
            }
        }
        // Sorted by the date, on the index and by a sort of the records: the values in order.
        for key in ["at", "plain"] {
            var r = FetchRequest<ManagedObject>(entityName: "Event")
            r.sortDescriptors = [FetchSortDescriptor(key: key)]
            let sorted = try c.fetch(r).map { try ($0.value(forKey: key) as! Date).timeIntervalSinceReferenceDate }
            #expect(sorted == values.sorted(), "sorted by \(key)")
        }
        // A range on the index: exactly the values within it.
        let (lo, hi) = (values[20], values[21])
        var range = FetchRequest<ManagedObject>(entityName: "Event")
        range.predicate = try FetchPredicate(
            format: "at >= %@ AND at <= %@", Date(timeIntervalSinceReferenceDate: min(lo, hi)),
            Date(timeIntervalSinceReferenceDate: max(lo, hi)))
        #expect(try c.count(for: range) == values.filter { $0 >= min(lo, hi) && $0 <= max(lo, hi) }.count)
    }

    @Test func aBatchUpdateAndHistoryKeepEveryBit() throws {
        let store = TemporaryStore()
        try FileManager.default.createDirectory(atPath: store.directory, withIntermediateDirectories: true)
        var options = ContainerOptions()
        options.persistentHistoryTracking = true
        let container = try PersistentContainer(
            name: "Test", model: Self.model(), directory: store.path, options: options)
        let c = container.newContext(concurrencyType: .confinement)
        let values = Self.intervals(count: 200, seed: 7)
        for (n, _) in values.enumerated() {
            try c.insertNewObject(forEntityName: "Event").setValue(Int64(n), forKey: "n")
        }
        try c.save()
        for (n, v) in values.enumerated() {
            var update = BatchUpdateRequest(entityName: "Event")
            update.predicate = try FetchPredicate(format: "n == %@", NSNumber(value: n))
            update.propertiesToUpdate = ["at": Date(timeIntervalSinceReferenceDate: v)]
            _ = try c.execute(update)
        }
        c.reset()
        var request = FetchRequest<ManagedObject>(entityName: "Event")
        request.sortDescriptors = [FetchSortDescriptor(key: "n")]
        let objects = try c.fetch(request)
        #expect(objects.map { bits(try? $0.value(forKey: "at")) } == values.map(\.bitPattern))
        // The values deleted objects leave in history (tombstones).
        let after = try c.execute(HistoryRequest.fetchHistory(after: nil)).transactions.last?.token
        for o in objects { c.delete(o) }
        try c.save()
        let tombstones = try c.execute(HistoryRequest.fetchHistory(after: after)).transactions
            .flatMap(\.changes).compactMap(\.tombstone)
        #expect(Set(tombstones.compactMap { bits($0["at"]) }) == Set(values.map(\.bitPattern)))
    }

    /// A store written with dates as seconds since 1970 (record format 1) is converted at its
    /// first writable open: its dates read as they did before (their lost bits stay lost), its
    /// index finds them, and a read-only open before that says what to do.
    @Test func aStoreOfTheFirstFormatIsConverted() throws {
        let store = TemporaryStore()
        let since1970: [Double] = [1_700_000_000.25, 0, -1_000.5, 1_785_000_000.123456]
        do {
            let container = try makeContainer(store, model: Self.model())
            let c = container.newContext(concurrencyType: .confinement)
            for (n, v) in since1970.enumerated() {
                let o = try c.insertNewObject(forEntityName: "Event")
                try o.setValue(Int64(n), forKey: "n")
                try o.setValue(Date(timeIntervalSince1970: v), forKey: "at")
            }
            try c.save()
            // Make it what the first format wrote: the values as seconds since 1970, and the
            // schema's format 1 (the writer of format 1 is gone; its bytes are these).
            try container.rewriteForTesting { schema in schema.format = 1 }
        }
        var readOnly = ContainerOptions()
        readOnly.readOnly = true
        #expect(throws: LogbookError.self) {
            _ = try PersistentContainer(name: "Test", model: Self.model(), directory: store.path, options: readOnly)
        }
        let container = try makeContainer(store, model: Self.model())
        let c = container.newContext(concurrencyType: .confinement)
        var request = FetchRequest<ManagedObject>(entityName: "Event")
        request.sortDescriptors = [FetchSortDescriptor(key: "n")]
        let read = try c.fetch(request).map { try $0.value(forKey: "at") as! Date }
        // What format 1 read back: the date from its seconds since 1970.
        #expect(
            read == since1970.map { Date(timeIntervalSince1970: Date(timeIntervalSince1970: $0).timeIntervalSince1970) }
        )
        for d in read {
            var r = FetchRequest<ManagedObject>(entityName: "Event")
            r.predicate = try FetchPredicate(format: "at == %@", d)
            #expect(try c.count(for: r) == 1)
        }
    }
}

extension PersistentContainer {
    /// Writes the store again as the first record format wrote it: every date attribute as
    /// seconds since 1970 (its index too), and the schema as `change` makes it.
    func rewriteForTesting(_ change: (inout StoredSchema) -> Void) throws {
        let snapshot = store.snapshot()
        var t = Transaction()
        var buffer: [UInt8] = []
        for layout in model.layouts {
            let keyspace = storeLayout.keyspace[layout.index]
            var keys: [UInt64] = []
            snapshot.forEachKey(inKeyspace: keyspace) {
                keys.append($0)
                return true
            }
            for key in keys {
                guard
                    var slots = try snapshot.withValue(
                        forKey: key,
                        { raw in
                            try RecordCodec.decode(raw, layout: layout) { _ in 0 }
                        })
                else { continue }
                for (j, a) in layout.entity.attributes.enumerated() where a.type == .date {
                    if case .double(let d) = slots[j] {
                        slots[j] = .double(Date(timeIntervalSinceReferenceDate: d).timeIntervalSince1970)
                    }
                }
                RecordCodec.encode(slots, layout: layout, into: &buffer)
                t.put(key, value: buffer, indexKeys: storeLayout.indexKeys(slots, entity: layout))
            }
        }
        var schema = try StoredSchema.decode(Array(snapshot.value(forKey: StoredSchema.schemaKey)!))
        change(&schema)
        t.put(StoredSchema.schemaKey, value: schema.encoded())
        try StoreWriter.commit(t, to: store)
    }
}
