import Foundation
import LogbookTestSupport
import Testing

@testable import LogbookGraph

/// A batch update of constant values rewrites each record's stored bytes without decoding the
/// others (`RecordCodec.splice`): every other value, present or absent, of every kind, stays
/// as it was; the indexes follow the new values; all of it survives a reopen.
@Suite struct BatchUpdateSpliceTests {
    /// `Note` has two indexes (its index keys are made from the whole record); `Memo` one (its
    /// key is read from the spliced bytes alone).
    static func model() throws -> ManagedObjectModel {
        try ManagedObjectModel {
            EntityDescription("Folder") {
                AttributeDescription("name", .string)
                RelationshipDescription("notes", to: "Note", inverse: "folder", toMany: true)
            }
            EntityDescription("Note") {
                AttributeDescription("title", .string, indexed: true)
                AttributeDescription("body", .string, optional: true)
                AttributeDescription("count", .int64)
                AttributeDescription("score", .double)
                AttributeDescription("ratio", .float, optional: true)
                AttributeDescription("flag", .bool, indexed: true)
                AttributeDescription("stamp", .date, optional: true)
                AttributeDescription("blob", .data, optional: true)
                AttributeDescription("ident", .uuid, optional: true)
                RelationshipDescription("folder", to: "Folder", inverse: "notes")
            }
            EntityDescription("Memo") {
                AttributeDescription("title", .string, indexed: true)
                AttributeDescription("body", .string, optional: true)
                AttributeDescription("count", .int64)
            }
        }
    }

    /// Every stored value of an object, as text (absent values as "nil").
    func values(_ o: ManagedObject, _ keys: [String]) throws -> [String] {
        try keys.map { key in
            guard let v = try o.value(forKey: key) else { return "nil" }
            if let related = v as? ManagedObject { return related.objectID.description }
            return "\(v)"
        }
    }

    static let noteKeys = ["title", "body", "count", "score", "ratio", "flag", "stamp", "blob", "ident", "folder"]

    func populate(_ context: ManagedObjectContext) throws {
        let folders = try (0..<3).map { f -> ManagedObject in
            let o = try context.insertNewObject(forEntityName: "Folder")
            try o.setValue("F\(f)", forKey: "name")
            return o
        }
        for i in 0..<400 {
            let n = try context.insertNewObject(forEntityName: "Note")
            try n.setValue("T\(i)", forKey: "title")
            // Values present and absent in turn, so that the spliced runs differ record by record.
            if i % 3 != 0 { try n.setValue(String(repeating: "b", count: i % 17), forKey: "body") }
            try n.setValue(Int64(i) * 1_000_003 - 200_000_000, forKey: "count")
            try n.setValue(Double(i) / 7, forKey: "score")
            if i % 4 != 0 { try n.setValue(Float(i) / 3, forKey: "ratio") }
            try n.setValue(i % 2 == 0, forKey: "flag")
            if i % 5 != 0 { try n.setValue(Date(timeIntervalSince1970: Double(i) * 86_400), forKey: "stamp") }
            if i % 6 == 0 { try n.setValue(Data([UInt8(i % 256), 1, 2]), forKey: "blob") }
            if i % 8 != 0 { try n.setValue(UUID(), forKey: "ident") }
            if i % 7 != 0 { try n.setValue(folders[i % 3], forKey: "folder") }
            let m = try context.insertNewObject(forEntityName: "Memo")
            try m.setValue("M\(i)", forKey: "title")
            if i % 2 == 0 { try m.setValue("memo", forKey: "body") }
            try m.setValue(Int64(i), forKey: "count")
        }
        try context.save()
    }

    func snapshot(_ context: ManagedObjectContext, _ entity: String, _ keys: [String]) throws -> [String: [String]] {
        var r = FetchRequest<ManagedObject>(entityName: entity)
        r.sortDescriptors = [FetchSortDescriptor(key: "title")]
        var out: [String: [String]] = [:]
        for o in try context.fetch(r) { out[try o.value(forKey: "title") as! String] = try values(o, keys) }
        return out
    }

    @Test func constantValuesChangeOnlyTheirAttributesAndTheIndexesFollow() throws {
        let store = TemporaryStore()
        var container = try makeContainer(store, model: Self.model())
        var context = container.newContext(concurrencyType: .confinement)
        try populate(context)
        let notesBefore = try snapshot(context, "Note", Self.noteKeys)
        let memosBefore = try snapshot(context, "Memo", ["title", "body", "count"])
        #expect(notesBefore.count == 400 && memosBefore.count == 400)

        // Every Note: a longer body where there was none or a shorter one, no ratio, a new
        // flag (an indexed attribute); every Memo: no body, a new count (its one index, on the
        // title, keeps its keys).
        var notes = BatchUpdateRequest(entityName: "Note")
        notes.propertiesToUpdate = ["body": "a body longer than any before it", "ratio": Float?.none, "flag": true]
        #expect(try context.execute(notes).count == 400)
        var memos = BatchUpdateRequest(entityName: "Memo")
        memos.propertiesToUpdate = ["body": String?.none, "count": Int64(-5)]
        #expect(try context.execute(memos).count == 400)

        func check(_ context: ManagedObjectContext) throws {
            let notesAfter = try snapshot(context, "Note", Self.noteKeys)
            #expect(notesAfter.count == 400)
            for (title, before) in notesBefore {
                var expected = before
                expected[1] = "a body longer than any before it"
                expected[4] = "nil"
                expected[5] = "true"
                #expect(notesAfter[title] == expected, "\(title)")
            }
            let memosAfter = try snapshot(context, "Memo", ["title", "body", "count"])
            for (title, before) in memosBefore {
                #expect(memosAfter[title] == [before[0], "nil", "-5"], "\(title)")
            }
            // The flag's index holds the new values only; the titles' indexes still find each record.
            var flagged = FetchRequest<ManagedObject>(entityName: "Note")
            flagged.predicate = try FetchPredicate(format: "flag == NO")
            #expect(try context.count(for: flagged) == 0)
            flagged.predicate = try FetchPredicate(format: "flag == YES")
            #expect(try context.count(for: flagged) == 400)
            var one = FetchRequest<ManagedObject>(entityName: "Memo")
            one.predicate = try FetchPredicate(format: "title == 'M123'")
            #expect(try context.fetch(one).map { try $0.value(forKey: "count") as? Int64 } == [-5])
            var note = FetchRequest<ManagedObject>(entityName: "Note")
            note.predicate = try FetchPredicate(format: "title == 'T8'")
            #expect(try context.fetch(note).count == 1)
            // The to-one relationship kept its objects: each folder still has its notes.
            var folders = FetchRequest<ManagedObject>(entityName: "Folder")
            folders.sortDescriptors = [FetchSortDescriptor(key: "name")]
            let counts = try context.fetch(folders).map { try $0.count(forKey: "notes") }
            #expect(counts == [114, 114, 114])
        }
        try check(container.newContext(concurrencyType: .confinement))
        try container.close()
        container = try makeContainer(store, model: Self.model())
        context = container.newContext(concurrencyType: .confinement)
        try check(context)
        try container.close()
    }

    /// A batch update of attributes no index covers, on more records than one thread rewrites
    /// (`Snapshot.rewriteValues`): each record keeps its index entries as they were, the new
    /// values are read through the index and a scan, a context holding an object sees them,
    /// and all of it survives a reopen.
    @Test func aLargeUpdateOfUnindexedAttributesKeepsTheIndexes() throws {
        let store = TemporaryStore()
        var container = try makeContainer(store, model: Self.model())
        let count = 70_000
        var context = container.newContext(concurrencyType: .confinement)
        _ = try context.execute(
            BatchInsertRequest(entityName: "Memo", count: count) { i, row in
                row.set("M\(i)", forKey: "title")
                row.set(Int64(i), forKey: "count")
                if i % 2 == 0 { row.set("body \(i)", forKey: "body") }
            })
        var byTitle = FetchRequest<ManagedObject>(entityName: "Memo")
        byTitle.predicate = try FetchPredicate(format: "title == 'M69999'")
        let held = try #require(try context.fetch(byTitle).first)
        #expect(try held.value(forKey: "count") as? Int64 == 69_999)

        var update = BatchUpdateRequest(entityName: "Memo")
        update.propertiesToUpdate = ["count": Int64(7), "body": String?.none]
        #expect(try context.execute(update).count == count)

        func check(_ context: ManagedObjectContext) throws {
            for title in ["M0", "M34999", "M35000", "M69999"] {
                byTitle.predicate = try FetchPredicate(format: "title == %@", title)
                let found = try context.fetch(byTitle)
                #expect(found.count == 1, "\(title)")
                #expect(try found.first?.value(forKey: "count") as? Int64 == 7, "\(title)")
                #expect(try found.first?.value(forKey: "body") == nil, "\(title)")
            }
            var seven = FetchRequest<ManagedObject>(entityName: "Memo")
            seven.predicate = try FetchPredicate(format: "count == 7 AND body == nil")
            #expect(try context.count(for: seven) == count)
            var range = FetchRequest<ManagedObject>(entityName: "Memo")
            range.predicate = try FetchPredicate(format: "title BEGINSWITH 'M6999'")
            #expect(try context.count(for: range) == 11)
        }
        #expect(try held.value(forKey: "count") as? Int64 == 7, "the context that ran it refreshed its object")
        try check(container.newContext(concurrencyType: .confinement))
        try container.close()
        container = try makeContainer(store, model: Self.model())
        context = container.newContext(concurrencyType: .confinement)
        try check(context)
        try container.close()
    }

    /// A record the update leaves as it was is not written again, in each of the batch update's
    /// three ways of writing (constant values of attributes no index covers, on two workers;
    /// of an indexed attribute; computed values). The result still counts every object the
    /// request matched, as Core Data's does; the journal grows by the records changed only;
    /// an update that changes nothing commits nothing.
    @Test func recordsTheUpdateLeavesAsTheyWereAreNotWritten() throws {
        let store = TemporaryStore()
        var container = try makeContainer(store, model: Self.model())
        var context = container.newContext(concurrencyType: .confinement)
        let count = 70_000
        _ = try context.execute(
            BatchInsertRequest(entityName: "Memo", count: count) { i, row in
                row.set("M\(i)", forKey: "title")
                row.set(Int64(i % 2), forKey: "count")
            })
        /// Runs `properties` on every Memo: the count the result gives, the dead bytes it made,
        /// whether it committed a version.
        func update(_ properties: [String: Any?]) throws -> (count: Int, dead: Int, committed: Bool) {
            let before = container.store.statistics()
            var request = BatchUpdateRequest(entityName: "Memo")
            request.propertiesToUpdate = properties
            let n = try context.execute(request).count
            let after = container.store.statistics()
            return (n, after.deadBytes - before.deadBytes, after.version != before.version)
        }
        // Half the records change (count 0 → 1): half the bytes of an update of all of them.
        let half = try update(["count": Int64(1)])
        let all = try update(["count": Int64(2)])
        #expect(half.count == count && all.count == count && half.committed && all.committed)
        #expect(half.dead > 0 && abs(2 * half.dead - all.dead) <= all.dead / 50, "\(half.dead) vs \(all.dead)")
        // Nothing changes: every object counted, nothing written.
        let same = try update(["count": Int64(2)])
        #expect(same.count == count && same.dead == 0 && !same.committed)
        let computed = try update(["count": try FetchExpression(format: "count * 1")])
        #expect(computed.count == count && computed.dead == 0 && !computed.committed)
        var two = FetchRequest<ManagedObject>(entityName: "Memo")
        two.predicate = try FetchPredicate(format: "count == 2")
        #expect(try context.count(for: two) == count)
        try container.close()
        container = try makeContainer(store, model: Self.model())
        context = container.newContext(concurrencyType: .confinement)
        #expect(try context.count(for: two) == count)

        // An indexed attribute (Note.flag, true on every other note): the same.
        try populate(context)
        var flag = BatchUpdateRequest(entityName: "Note")
        flag.propertiesToUpdate = ["flag": true]
        var before = container.store.statistics()
        #expect(try context.execute(flag).count == 400)
        var after = container.store.statistics()
        #expect(after.version == before.version + 1 && after.deadBytes > before.deadBytes)
        before = after
        #expect(try context.execute(flag).count == 400)
        after = container.store.statistics()
        #expect(after.version == before.version && after.totalBytes == before.totalBytes)
        var flagged = FetchRequest<ManagedObject>(entityName: "Note")
        flagged.predicate = try FetchPredicate(format: "flag == YES")
        #expect(try context.count(for: flagged) == 400)

        // Decoded records (a predicate no index settles): a value equal under `==` but stored
        // in other bytes — "é" decomposed over "é" precomposed — is written; the same bytes
        // again are not.
        for i in 0..<10 {
            let m = try context.insertNewObject(forEntityName: "Memo")
            try m.setValue("U\(i)", forKey: "title")
            try m.setValue("caf\u{E9}", forKey: "body")
            try m.setValue(Int64(-7), forKey: "count")
        }
        try context.save()
        var accent = BatchUpdateRequest(entityName: "Memo")
        accent.predicate = try FetchPredicate(format: "count == -7")
        accent.propertiesToUpdate = ["body": "cafe\u{301}"]
        #expect("cafe\u{301}" == "caf\u{E9}", "equal strings, other bytes")
        before = container.store.statistics()
        #expect(try context.execute(accent).count == 10)
        after = container.store.statistics()
        #expect(after.version == before.version + 1)
        var accented = FetchRequest<ManagedObject>(entityName: "Memo")
        accented.predicate = accent.predicate
        let reader = container.newContext(concurrencyType: .confinement)
        let bodies = try reader.fetch(accented).map { try $0.value(forKey: "body") as? String }
        #expect(bodies.count == 10 && bodies.allSatisfy { $0.map { Array($0.utf8) } == Array("cafe\u{301}".utf8) })
        before = after
        #expect(try context.execute(accent).count == 10)
        #expect(container.store.statistics().version == before.version)
        try container.close()
    }

    /// A batch update of more keys than the write log lists one by one still makes a context's
    /// save of an object it read before the batch a conflict, and a save of one read after it
    /// not.
    @Test func aLargeBatchUpdateIsSeenByTheConflictCheck() throws {
        let store = TemporaryStore()
        let container = try makeContainer(store, model: todoModel())
        let writer = container.newContext(concurrencyType: .confinement)
        let count = RecentWrites.largeWrite + 100
        _ = try writer.execute(
            BatchInsertRequest(entityName: "TodoItem", count: count) { i, row in
                row.set("Item \(i)", forKey: "name")
                row.set(Date(timeIntervalSince1970: Double(i)), forKey: "createdAt")
            })
        func first(_ context: ManagedObjectContext) throws -> TodoItem {
            var r = FetchRequest<TodoItem>()
            r.predicate = try FetchPredicate(format: "name == 'Item 7'")
            return try #require(try context.fetch(r).first)
        }
        let before = container.newContext(concurrencyType: .confinement)
        let early = try first(before)
        var update = BatchUpdateRequest(entityName: "TodoItem")
        update.propertiesToUpdate = ["done": true]
        #expect(try writer.execute(update).count == count)

        early.name = "Renamed before"
        #expect {
            try before.save()
        } throws: { ($0 as? LogbookError)?.code == .mergeConflict }

        let after = container.newContext(concurrencyType: .confinement)
        let late = try first(after)
        #expect(late.done)
        late.name = "Renamed after"
        try after.save()
        let check = container.newContext(concurrencyType: .confinement)
        var r = FetchRequest<TodoItem>()
        r.predicate = try FetchPredicate(format: "name == 'Renamed after' AND done == YES")
        #expect(try check.count(for: r) == 1)
        try container.close()
    }

    /// The write log after a write too large to list: only what was read before it is in doubt
    /// (a save compares those objects' values with the store's; the others are not read again).
    @Test func aLargeWriteMovesTheRecentWritessHorizonToItsVersion() {
        var log = RecentWrites()
        log.record([1, 2, 3], version: 4)
        #expect(log.mayHaveChanged(2, since: 3) && !log.mayHaveChanged(2, since: 4) && !log.mayHaveChanged(9, since: 3))
        log.record(Array(100..<UInt64(100 + RecentWrites.largeWrite + 1)), version: 10)
        #expect(log.mayHaveChanged(9, since: 9), "read before the large write: compared")
        #expect(!log.mayHaveChanged(150, since: 10), "read at its version: it saw the write")
        #expect(!log.mayHaveChanged(2, since: 12))
        log.record([7], version: 11)
        #expect(log.mayHaveChanged(7, since: 10) && !log.mayHaveChanged(8, since: 10))
    }
}
