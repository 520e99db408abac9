import Foundation
import LogbookEngine
import LogbookTestSupport
import Testing

@testable import LogbookGraph

/// Persistent history: what a save records, tokens, purging, batch requests, reopen and
/// compaction.
@Suite struct HistoryTests {
    /// Note (title, uuid preserved after deletion) ↔ Tag (to-many `tags`).
    static func model() throws -> ManagedObjectModel {
        var uuid = AttributeDescription("uuid", .uuid, optional: true)
        uuid.preservesValueInHistoryOnDeletion = true
        return try ManagedObjectModel {
            EntityDescription("Note") {
                AttributeDescription("title", .string)
                AttributeDescription("body", .string, optional: true)
                uuid
                RelationshipDescription("tags", to: "Tag", inverse: "notes", toMany: true)
            }
            EntityDescription("Tag") {
                AttributeDescription("name", .string)
                RelationshipDescription("notes", to: "Note", inverse: "tags", toMany: true)
            }
        }
    }

    func open(_ store: TemporaryStore, tracking: Bool = true) throws -> PersistentContainer {
        try FileManager.default.createDirectory(atPath: store.directory, withIntermediateDirectories: true)
        var options = ContainerOptions()
        options.persistentHistoryTracking = tracking
        return try PersistentContainer(name: "Notes", model: Self.model(), directory: store.path, options: options)
    }

    func note(_ c: ManagedObjectContext, _ title: String, uuid: UUID = UUID()) throws -> ManagedObject {
        let n = try c.insertNewObject(forEntityName: "Note")
        try n.setValue(title, forKey: "title")
        try n.setValue(uuid, forKey: "uuid")
        return n
    }

    @Test func aSaveRecordsExactlyItsChangesWithAuthorAndContextName() throws {
        let store = TemporaryStore()
        let container = try open(store)
        let c = container.newContext(concurrencyType: .confinement)
        c.name = "editor"
        c.transactionAuthor = "app"
        let a = try note(c, "a")
        let b = try note(c, "b")
        let gone = UUID()
        let doomed = try note(c, "doomed", uuid: gone)
        try c.save()
        let first = container.currentHistoryToken

        try a.setValue("a2", forKey: "title")
        let tag = try c.insertNewObject(forEntityName: "Tag")
        try tag.setValue("t", forKey: "name")
        try b.add(tag, toRelationship: "tags")
        c.delete(doomed)
        c.transactionAuthor = "importer"
        let before = Date()
        try c.save()

        let all = try container.history(after: nil)
        #expect(all.count == 2)
        #expect(all[0].token == first && all[0].author == "app" && all[0].contextName == "editor")
        #expect(Set(all[0].changes.map(\.changeType)) == [.insert] && all[0].changes.count == 3)
        #expect(all[0].changes.allSatisfy { $0.entityName == "Note" })

        let second = all[1]
        #expect(second.token > first && second.author == "importer")
        #expect(second.timestamp >= before.addingTimeInterval(-0.001))
        let byID = Dictionary(uniqueKeysWithValues: second.changes.map { ($0.changedObjectID, $0) })
        #expect(second.changes.count == 4)
        #expect(byID[tag.objectID]?.changeType == .insert && byID[tag.objectID]?.entityName == "Tag")
        #expect(byID[a.objectID]?.changeType == .update)
        #expect(byID[a.objectID]?.updatedProperties == ["title"])
        #expect(byID[b.objectID]?.updatedProperties == ["tags"])
        #expect(byID[tag.objectID]?.updatedProperties == nil)
        let deleted = byID[doomed.objectID]
        #expect(deleted?.changeType == .delete)
        #expect(deleted?.tombstone?["uuid"] as? UUID == gone)
        #expect(deleted?.tombstone?["title"] == nil, "only attributes marked to be preserved")
        #expect(try container.history(after: first).map(\.token) == [second.token])
        #expect(try container.history(after: second.token).isEmpty)
        try container.close()
    }

    @Test func withTrackingOffASaveRecordsNothing() throws {
        let store = TemporaryStore()
        let container = try open(store, tracking: false)
        let c = container.newContext(concurrencyType: .confinement)
        _ = try note(c, "x")
        try c.save()
        #expect(try container.history(after: nil).isEmpty)
        #expect(container.store.statistics().keysPerKeyspace[HistoryRecord.keyspace] == nil)
        try container.close()
    }

    @Test func tokensAreCodableAndSurviveReopenAndCompaction() throws {
        let store = TemporaryStore()
        var container = try open(store)
        var c = container.newContext(concurrencyType: .confinement)
        var tokens: [PersistentHistoryToken] = []
        for i in 0..<5 {
            let n = try note(c, "n\(i)")
            try c.save()
            try n.setValue("n\(i)!", forKey: "title")
            try c.save()
            tokens.append(container.currentHistoryToken)
        }
        let encoded = try JSONEncoder().encode(tokens[1])
        #expect(try JSONDecoder().decode(PersistentHistoryToken.self, from: encoded) == tokens[1])
        _ = try container.store.compact()
        try container.close()

        container = try open(store)
        c = container.newContext(concurrencyType: .confinement)
        let after = try container.history(after: JSONDecoder().decode(PersistentHistoryToken.self, from: encoded))
        #expect(after.count == 6)
        #expect(after.map(\.token) == after.map(\.token).sorted())
        #expect(after.last?.token == tokens[4])
        #expect(after.last?.changes.first?.updatedProperties == ["title"])
        _ = c
        try container.close()
    }

    @Test func purgingRemovesExactlyTheTransactionsBeforeTheToken() throws {
        let store = TemporaryStore()
        let container = try open(store)
        let c = container.newContext(concurrencyType: .confinement)
        for i in 0..<6 {
            _ = try note(c, "n\(i)")
            try c.save()
        }
        let all = try container.history(after: nil)
        #expect(all.count == 6)
        #expect(try c.execute(HistoryRequest.deleteHistory(before: all[3].token)).deletedCount == 3)
        #expect(try container.history(after: nil).map(\.token) == all[3...].map(\.token))
        // The purge itself is not history, and the store keeps the purge across reopen.
        #expect(try c.execute(HistoryRequest.fetchHistory(after: nil)).transactions.count == 3)
        #expect(
            try c.execute(HistoryRequest.changes(after: all[3].token)).transactions.map(\.token) == [
                all[4].token, all[5].token
            ])
        #expect(try c.execute(HistoryRequest.changes(after: all[5].timestamp)).transactions.last?.token == all[5].token)
        // A token of a purged transaction has expired: what came after it may be gone too.
        func expired(_ body: () throws -> Any) -> Bool {
            do {
                _ = try body()
                return false
            } catch { return (error as? LogbookError)?.code == .historyTokenExpired }
        }
        #expect(expired { try container.history(after: all[1].token) })
        #expect(expired { try c.execute(HistoryRequest.fetchHistory(after: all[2].token)) })
        #expect(!expired { try container.history(after: all[3].token) })
        #expect(try container.deleteHistory(before: Date().addingTimeInterval(60)) == 3)
        #expect(expired { try container.history(after: all[4].token) })
        #expect(try container.history(after: nil).isEmpty)
        try container.close()
        let again = try open(store)
        #expect(try again.history(after: nil).isEmpty)
        #expect((try? again.history(after: all[5].token)) == nil)
        // Objects are untouched by a purge.
        #expect(
            try again.newContext(concurrencyType: .confinement).count(
                for: FetchRequest<ManagedObject>(entityName: "Note")) == 6)
        try again.close()
    }

    @Test func batchRequestsRecordTheirChanges() throws {
        let store = TemporaryStore()
        let container = try open(store)
        let c = container.newContext(concurrencyType: .confinement)
        c.transactionAuthor = "batch"
        let inserted = try c.execute(
            BatchInsertRequest(entityName: "Note", count: 4) { i, row in
                row.set("b\(i)", forKey: "title")
                row.set(UUID(), forKey: "uuid")
            })
        #expect(inserted.count == 4)
        var update = BatchUpdateRequest(entityName: "Note")
        update.propertiesToUpdate = ["body": "x"]
        _ = try c.execute(update)
        let target = try c.fetch(FetchRequest<ManagedObject>(entityName: "Note")).first!
        let uuid = try target.value(forKey: "uuid") as? UUID
        _ = try c.execute(BatchDeleteRequest(objectIDs: [target.objectID]))

        let history = try container.history(after: nil)
        #expect(history.count == 3)
        #expect(history.allSatisfy { $0.author == "batch" })
        #expect(history[0].changes.count == 4 && history[0].changes.allSatisfy { $0.changeType == .insert })
        #expect(history[1].changes.count == 4)
        #expect(history[1].changes.allSatisfy { $0.changeType == .update && $0.updatedProperties == ["body"] })
        #expect(history[2].changes.map(\.changeType) == [.delete])
        #expect(history[2].changes[0].changedObjectID == target.objectID)
        #expect(history[2].changes[0].tombstone?["uuid"] as? UUID == uuid)
        #expect(history[2].counts()["Note"]?.deleted == 1)
        try container.close()
    }

    @Test func aCommitWithAnotherVersionThanExpectedWritesNothing() throws {
        let store = TemporaryStore()
        let container = try open(store)
        var t = Transaction()
        t.put(EngineKey(keyspace: 9, id: 1).rawValue, value: [1, 2, 3])
        let version = container.store.version
        let error = #expect(throws: EngineError.self) {
            try container.store.commit(t, expectingVersion: version + 2)
        }
        #expect(error?.code == .versionMismatch)
        #expect(container.store.version == version)
        #expect(try container.store.snapshot().value(forKey: EngineKey(keyspace: 9, id: 1).rawValue) == nil)
        #expect(try container.store.commit(t, expectingVersion: version + 1) == version + 1)
        try container.close()
    }

    @Test func aModelFilesPreserveAfterDeletionMarksTheAttribute() throws {
        let xml = """
            <?xml version="1.0" encoding="UTF-8" standalone="yes"?>
            <model type="com.apple.IDECoreDataModeler.DataModel" documentVersion="1.0">
                <entity name="Car" representedClassName="Car" syncable="YES">
                    <attribute name="id" attributeType="UUID" usesScalarValueType="NO" preserveAfterDeletion="YES"/>
                    <attribute name="plate" optional="YES" attributeType="String"/>
                </entity>
            </model>
            """
        let model = try ManagedObjectModel(xml: Data(xml.utf8))
        let car = model[entity: "Car"]!
        #expect(car.attributes.first { $0.name == "id" }?.preservesValueInHistoryOnDeletion == true)
        #expect(car.attributes.first { $0.name == "plate" }?.preservesValueInHistoryOnDeletion == false)
    }
}

/// Time travel: a read-only context as of a past version.
extension HistoryTests {
    @Test func aSnapshotAsOfAnOldVersionAnswersAsTheStoreDidThenAfterManyLaterSaves() throws {
        let store = TemporaryStore()
        var container = try open(store, tracking: false)
        let c = container.newContext(concurrencyType: .confinement)
        let notes = try (0..<10).map { try note(c, "n\($0)") }
        try c.save()
        let inserted = container.currentHistoryToken
        for n in notes.prefix(4) { try n.setValue("edited", forKey: "title") }
        try c.save()
        let edited = container.currentHistoryToken
        for n in notes.suffix(3) { c.delete(n) }
        try c.save()
        // Many later saves, over every object left.
        for round in 0..<30 {
            for n in notes.prefix(7) { try n.setValue("round \(round)", forKey: "title") }
            _ = try note(c, "later \(round)")
            try c.save()
        }
        let ids = notes.map(\.objectID)
        func noteRequest(_ predicate: String? = nil) throws -> FetchRequest<ManagedObject> {
            var request = FetchRequest<ManagedObject>(entityName: "Note")
            if let predicate { request.predicate = try FetchPredicate(format: predicate) }
            return request
        }
        func check(_ container: PersistentContainer) throws {
            let then = try container.snapshot(asOf: inserted)
            #expect(then.isHistorical)
            #expect(try then.count(for: noteRequest()) == 10)
            #expect(
                try then.count(for: noteRequest("title == 'edited'"))
                    == 0)
            // A fault fills from that version too.
            let first = try then.existingObject(with: ids[0])
            #expect(try first.value(forKey: "title") as? String == "n0")
            let later = try container.snapshot(asOf: edited)
            let titles = try later.fetch(
                noteRequest()
            ).map { try $0.value(forKey: "title") as? String }
            #expect(titles.count == 10 && titles.filter { $0 == "edited" }.count == 4)
            // The present is untouched: 7 notes left of the ten, 30 later ones.
            let now = container.newContext(concurrencyType: .confinement)
            #expect(try now.count(for: noteRequest()) == 37)
        }
        try check(container)

        // Read-only, and deaf to later saves.
        let then = try container.snapshot(asOf: inserted)
        let n0 = try then.existingObject(with: ids[0])
        try n0.setValue("changed in the past", forKey: "title")
        #expect(throws: LogbookError.self) { try then.save() }
        then.rollback()
        try notes[0].setValue("after", forKey: "title")
        try c.save()
        #expect(try then.existingObject(with: ids[0]).value(forKey: "title") as? String == "n0")
        #expect(throws: LogbookError.self) { try then.setQueryGeneration(.current) }

        // Versions after the last commit do not exist yet.
        #expect(throws: LogbookError.self) {
            try container.snapshot(asOf: PersistentHistoryToken(version: container.currentHistoryToken.version + 1))
        }
        #expect(try container.oldestReadableToken == PersistentHistoryToken(version: 0))

        // A reopened store (from its checkpoint) reads the past the same way.
        try container.close()
        container = try open(store, tracking: false)
        try check(container)

        // Compaction folds the versions before it into one: they are gone, later ones stay.
        _ = try container.store.compact()
        let compactedAt = container.currentHistoryToken
        #expect(try container.oldestReadableToken == compactedAt)
        do {
            _ = try container.snapshot(asOf: inserted)
            Issue.record("a version before the compaction should be unavailable")
        } catch let error as LogbookError {
            #expect(error.underlying?.code == .versionUnavailable)
        }
        let c2 = container.newContext(concurrencyType: .confinement)
        try c2.existingObject(with: ids[1]).setValue("after compaction", forKey: "title")
        try c2.save()
        let atCompaction = try container.snapshot(asOf: compactedAt)
        #expect(try atCompaction.existingObject(with: ids[1]).value(forKey: "title") as? String == "round 29")
        #expect(try atCompaction.count(for: noteRequest()) == 37)
        try container.close()
    }

    @Test func aSnapshotAsOfADateUsesTheRecordedTransactionTimes() throws {
        let store = TemporaryStore()
        let container = try open(store)
        let c = container.newContext(concurrencyType: .confinement)
        _ = try note(c, "first")
        try c.save()
        Thread.sleep(forTimeInterval: 0.02)
        let between = Date()
        Thread.sleep(forTimeInterval: 0.02)
        _ = try note(c, "second")
        try c.save()
        let then = try container.snapshot(asOf: between)
        #expect(try then.count(for: FetchRequest<ManagedObject>(entityName: "Note")) == 1)
        #expect(throws: LogbookError.self) { try container.snapshot(asOf: Date(timeIntervalSince1970: 0)) }
        try container.close()
    }
}

/// Retention: what a compaction keeps of the history.
extension HistoryTests {
    func open(_ store: TemporaryStore, retention: HistoryRetention) throws -> PersistentContainer {
        try FileManager.default.createDirectory(atPath: store.directory, withIntermediateDirectories: true)
        var options = ContainerOptions()
        options.persistentHistoryTracking = true
        options.historyRetention = retention
        return try PersistentContainer(name: "Notes", model: Self.model(), directory: store.path, options: options)
    }

    func saveNotes(_ container: PersistentContainer, _ count: Int) throws -> [PersistentHistoryToken] {
        let c = container.newContext(concurrencyType: .confinement)
        return try (0..<count).map { i in
            _ = try note(c, "n\(i)")
            try c.save()
            return container.currentHistoryToken
        }
    }

    @Test func aCompactionKeepsTheHistoryTheRetentionSays() throws {
        // By token: the transactions after it.
        let a = TemporaryStore()
        var tokens: [PersistentHistoryToken] = []
        do {
            let probe = try open(a, retention: .all)
            tokens = try saveNotes(probe, 5)
            try probe.close()
        }
        let byToken = try open(a, retention: .after(tokens[1]))
        #expect(try byToken.history(after: nil).count == 5)  // nothing is purged before a compaction
        _ = try byToken.store.compact()
        #expect(try byToken.history(after: nil).map(\.token) == Array(tokens[2...]))
        try byToken.close()

        // None: a compaction purges it all; saves after it are recorded again.
        let b = TemporaryStore()
        let none = try open(b, retention: .none)
        _ = try saveNotes(none, 3)
        _ = try none.store.compact()
        #expect(try none.history(after: nil).isEmpty)
        let later = try saveNotes(none, 2)
        #expect(try none.history(after: nil).map(\.token) == later)
        #expect(
            try none.newContext(concurrencyType: .confinement).count(
                for: FetchRequest<ManagedObject>(entityName: "Note")) == 5)
        try none.close()

        // Age: the transactions of the last so many seconds.
        let c = TemporaryStore()
        let aged = try open(c, retention: .age(0.2))
        _ = try saveNotes(aged, 2)
        Thread.sleep(forTimeInterval: 0.4)
        let recent = try saveNotes(aged, 2)
        _ = try aged.store.compact()
        #expect(try aged.history(after: nil).map(\.token) == recent)
        try aged.close()
    }
}

/// Time travel and compaction: the versions of the history kept stay readable.
extension HistoryTests {
    @Test func aCompactionFoldsOnlyTheVersionsBeforeTheHistoryItKeeps() throws {
        func open(_ store: TemporaryStore, _ retention: HistoryRetention) throws -> PersistentContainer {
            try FileManager.default.createDirectory(atPath: store.directory, withIntermediateDirectories: true)
            var options = ContainerOptions()
            options.persistentHistoryTracking = true
            options.historyRetention = retention
            options.segmentSize = 4 << 10
            options.allowsTinySegments = true
            options.compaction = .manual
            return try PersistentContainer(name: "Notes", model: Self.model(), directory: store.path, options: options)
        }
        // 40 saves, each inserting a note and retitling every note before it: dead bytes.
        func fill(_ container: PersistentContainer) throws -> [PersistentHistoryToken] {
            let c = container.newContext(concurrencyType: .confinement)
            var notes: [ManagedObject] = []
            return try (0..<40).map { i in
                for n in notes { try n.setValue("seen \(i)", forKey: "title") }
                notes.append(try note(c, "n\(i)"))
                try c.save()
                return container.currentHistoryToken
            }
        }
        func count(_ c: ManagedObjectContext, _ predicate: String? = nil) throws -> Int {
            var request = FetchRequest<ManagedObject>(entityName: "Note")
            if let predicate { request.predicate = try FetchPredicate(format: predicate) }
            return try c.count(for: request)
        }

        // Kept after token 19: the segments before it are folded, every version from it on reads.
        let a = TemporaryStore()
        let kept = try open(a, .after(PersistentHistoryToken(version: 0)))
        let tokens = try fill(kept)
        try kept.close()
        let partly = try open(a, .after(tokens[19]))
        let sizeBefore = partly.store.statistics().fileBytes
        let report = try partly.store.compact()
        #expect(report.segmentsRemoved > 0)
        #expect(partly.store.statistics().fileBytes < sizeBefore)
        #expect(try partly.history(after: nil).map(\.token) == Array(tokens[20...]))
        let oldest = try partly.oldestReadableToken
        #expect(oldest > PersistentHistoryToken(version: 0) && oldest < tokens[20])
        for i in [20, 25, 39] {
            let then = try partly.snapshot(asOf: tokens[i])
            #expect(try count(then) == i + 1)
            #expect(try count(then, "title == 'seen \(i)'") == i)
        }
        #expect(throws: LogbookError.self) { try partly.snapshot(asOf: tokens[0]) }
        try partly.close()

        // Kept all: a compaction folds nothing the history reaches, every version reads.
        let b = TemporaryStore()
        let all = try open(b, .all)
        let allTokens = try fill(all)
        _ = try all.store.compact()
        #expect(try all.history(after: nil).count == 40)
        #expect(try count(all.snapshot(asOf: allTokens[0])) == 1)
        #expect(try count(all.snapshot(asOf: allTokens[10]), "title == 'seen 10'") == 10)
        try all.close()
    }
}
