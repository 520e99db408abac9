import Foundation
import LogbookEngine
import LogbookTestSupport
import Testing

@testable import LogbookGraph

/// Relationship indexes, compound indexes, and what `explain` says about them.
@Suite struct IndexPlanTests {
    static func model(compound: Bool = true) throws -> ManagedObjectModel {
        try ManagedObjectModel {
            EntityDescription("Boss") {
                AttributeDescription("lastName", .string)
                RelationshipDescription("team", to: "Worker", inverse: "boss", toMany: true)
            }
            EntityDescription("Worker", compoundIndexes: compound ? [["lastName", "age"]] : []) {
                AttributeDescription("firstName", .string)
                AttributeDescription("lastName", .string)
                AttributeDescription("age", .int32, optional: true)
                RelationshipDescription("boss", to: "Boss", inverse: "team")
            }
        }
    }

    /// 20 bosses ("Boss0"…"Boss19", lastName "Smith" for the even ones) and 2,000 workers:
    /// worker i has lastName "L(i % 50)", age 20 + i / 50 and boss i % 20.
    static func populate(_ container: PersistentContainer) throws {
        let c = container.newContext(concurrencyType: .confinement)
        var bosses: [ManagedObject] = []
        for b in 0..<20 {
            let o = try c.insertNewObject(forEntityName: "Boss")
            try o.setValue(b % 2 == 0 ? "Smith" : "Boss\(b)", forKey: "lastName")
            bosses.append(o)
        }
        for i in 0..<2000 {
            let w = try c.insertNewObject(forEntityName: "Worker")
            try w.setValue("W\(i)", forKey: "firstName")
            try w.setValue("L\(i % 50)", forKey: "lastName")
            try w.setValue(Int32(20 + i / 50), forKey: "age")
            try w.setValue(bosses[i % 20], forKey: "boss")
        }
        try c.save()
    }

    @Test func aToOneRelationshipIsIndexedAndAPathThroughItUsesTheIndex() throws {
        let store = TemporaryStore()
        let container = try makeContainer(store, model: Self.model())
        try Self.populate(container)
        let c = container.newContext(concurrencyType: .confinement)
        var bossRequest = FetchRequest<ManagedObject>(entityName: "Boss")
        bossRequest.predicate = try FetchPredicate(format: "lastName == 'Boss7'")
        let boss7 = try #require(try c.fetch(bossRequest).first)

        var r = FetchRequest<ManagedObject>(entityName: "Worker")
        r.predicate = try FetchPredicate(format: "boss == %@", boss7)
        let plan = try c.explain(r)
        #expect(plan.description.contains("INDEX boss"), "\(plan)")
        let team = try c.fetch(r)
        #expect(team.count == 100)
        #expect(c.lastFetchRecordsRead == 100, "only the boss's workers are read")
        #expect(try team.allSatisfy { try ($0.value(forKey: "boss") as? ManagedObject) === boss7 })
        #expect(try c.count(for: r) == 100)

        // Through the relationship: the bosses named Smith (10 of them), then their workers.
        r.predicate = try FetchPredicate(format: "boss.lastName == 'Smith'")
        let pathPlan = try c.explain(r)
        #expect(pathPlan.access == .indexPoints(attribute: "boss", values: 10), "\(pathPlan)")
        #expect(try c.fetch(r).count == 1000)
        #expect(c.lastFetchRecordsRead == 1000)
        // Negated, and a condition no boss meets: nil destinations count as the comparison says.
        r.predicate = try FetchPredicate(format: "boss.lastName != 'Smith'")
        #expect(try c.count(for: r) == 1000)
        r.predicate = try FetchPredicate(format: "boss.lastName == 'Nobody'")
        #expect(try c.fetch(r).isEmpty)
        // A worker with no boss: `!=` holds for it (its path's value is nil), `==` does not.
        let loner = try c.insertNewObject(forEntityName: "Worker")
        try loner.setValue("Lone", forKey: "firstName")
        try loner.setValue("L0", forKey: "lastName")
        try c.save()
        r.predicate = try FetchPredicate(format: "boss.lastName != 'Smith'")
        #expect(try c.count(for: r) == 1001)
        r.predicate = try FetchPredicate(format: "boss == nil")
        #expect(try c.fetch(r).map(\.objectID) == [loner.objectID])
        try container.close()
    }

    /// An indexed Binary attribute (Threema's `Message.id`, Wire's `nonce_data`): Core Data
    /// indexes it, and a fetch by `==` or `IN` reads only the matching records; a value longer
    /// than an index entry keeps, or with zero bytes, is found exactly; sorting by it is refused
    /// by the predicate as in Core Data (data has no order).
    @Test func anIndexedBinaryAttributeAnswersEqualities() throws {
        let model = try ManagedObjectModel {
            EntityDescription("Message") {
                AttributeDescription("id", .data, indexed: true)
                AttributeDescription("text", .string, optional: true)
            }
        }
        let store = TemporaryStore()
        let container = try makeContainer(store, model: model)
        let c = container.newContext(concurrencyType: .confinement)
        func id(_ n: Int) -> Data {
            n % 10 == 0
                ? Data(repeating: UInt8(n % 256), count: 600) + Data([UInt8(n / 256)])
                : Data([0, UInt8(n % 256), UInt8(n / 256), 0])
        }
        for n in 0..<1000 {
            let m = try c.insertNewObject(forEntityName: "Message")
            try m.setValue(id(n), forKey: "id")
            try m.setValue("m\(n)", forKey: "text")
        }
        try c.save()
        let reader = container.newContext(concurrencyType: .confinement)
        var r = FetchRequest<ManagedObject>(entityName: "Message")
        r.predicate = try FetchPredicate(format: "id == %@", id(7))
        let plan = try reader.explain(r)
        #expect(plan.description.contains("INDEX id"), "\(plan)")
        #expect(try reader.fetch(r).map { try $0.value(forKey: "text") as? String } == ["m7"])
        #expect(reader.lastFetchRecordsRead == 1)
        r.predicate = try FetchPredicate(format: "id IN %@", [id(1), id(2), id(999)])
        #expect(Set(try reader.fetch(r).map { try $0.value(forKey: "text") as? String }) == ["m1", "m2", "m999"])
        #expect(reader.lastFetchRecordsRead == 3)
        // Longer than an index entry: the records tell apart what the entries cannot.
        r.predicate = try FetchPredicate(format: "id == %@", id(20))
        #expect(try reader.fetch(r).map { try $0.value(forKey: "text") as? String } == ["m20"])
        r.predicate = try FetchPredicate(format: "id == %@", Data([0, 7, 0]))
        #expect(try reader.fetch(r).isEmpty)
        try container.close()
        // Reopened: the index is read back from the store.
        let again = try makeContainer(store, model: model)
        let c2 = again.newContext(concurrencyType: .confinement)
        r.predicate = try FetchPredicate(format: "id == %@", id(513))
        #expect(try c2.fetch(r).map { try $0.value(forKey: "text") as? String } == ["m513"])
        try again.close()
    }

    @Test func aCompoundIndexAnswersAnEqualityAndARange() throws {
        let store = TemporaryStore()
        let container = try makeContainer(store, model: Self.model())
        try Self.populate(container)
        let c = container.newContext(concurrencyType: .confinement)
        var r = FetchRequest<ManagedObject>(entityName: "Worker")
        // Workers with lastName L7 are 7, 57, 107, …: ages 20…59; over 40: ages 41…59.
        r.predicate = try FetchPredicate(format: "lastName == 'L7' AND age > 40")
        let plan = try c.explain(r)
        #expect(plan.access == .compoundIndex(keys: ["lastName", "age"], equalities: 1, range: true), "\(plan)")
        let found = try c.fetch(r)
        #expect(found.count == 19)
        #expect(c.lastFetchRecordsRead == 19, "the index range holds exactly the matches")
        #expect(try found.allSatisfy { try ($0.value(forKey: "age") as! Int32) > 40 })
        // Sorted by the key after the equal one: the index's order, and a limit stops the walk.
        var top = FetchRequest<ManagedObject>(entityName: "Worker")
        top.predicate = try FetchPredicate(format: "lastName == 'L7'")
        top.sortDescriptors = [FetchSortDescriptor(key: "age", ascending: false)]
        top.fetchLimit = 3
        let topPlan = try c.explain(top)
        #expect(topPlan.orderFromIndex && topPlan.limitPushedDown, "\(topPlan)")
        #expect(try c.fetch(top).map { try $0.value(forKey: "age") as! Int32 } == [59, 58, 57])
        top.sortDescriptors = [FetchSortDescriptor(key: "age")]
        #expect(try c.fetch(top).map { try $0.value(forKey: "age") as! Int32 } == [20, 21, 22])
        for (format, count) in [
            ("lastName == 'L7'", 40), ("lastName == 'L7' AND age >= 41", 19), ("lastName == 'L7' AND age < 21", 1),
            ("lastName == 'L7' AND age <= 21", 2), ("lastName == 'L7' AND age BETWEEN {30, 32}", 3),
            ("lastName == 'L7' AND age == 22", 1), ("lastName == 'L70' AND age > 0", 0),
            ("lastName == 'L7' AND age > 40 AND age < 45", 4)
        ] {
            r.predicate = try FetchPredicate(format: format)
            let plan = try c.explain(r)
            #expect(try c.count(for: r) == count, "\(format): \(plan)")
            #expect(try c.fetch(r).count == count, "\(format)")
        }
        try container.close()
    }

    @Test func addingIndexesToAStoreBuildsThemAndAReadOnlyOpenUsesWhatTheStoreHas() throws {
        let store = TemporaryStore()
        // Written without the compound index and without the relationship's index.
        var plain = try Self.model(compound: false)
        var worker = plain[entity: "Worker"]!
        worker.relationships[0].isIndexed = false
        plain = try ManagedObjectModel(entities: [plain[entity: "Boss"]!, worker])
        var container = try makeContainer(store, model: plain)
        try Self.populate(container)
        var r = FetchRequest<ManagedObject>(entityName: "Worker")
        r.predicate = try FetchPredicate(format: "lastName == 'L7' AND age > 40")
        #expect(try container.newContext(concurrencyType: .confinement).explain(r).access == .scan)
        try container.close()
        // Read-only with the indexed model: opens as the store is (no index, same answers).
        var options = ContainerOptions()
        options.readOnly = true
        let reader = try PersistentContainer(
            name: "Test", model: Self.model(), directory: store.path, options: options)
        let rc = reader.newContext(concurrencyType: .confinement)
        #expect(try rc.explain(r).access == .scan)
        #expect(try rc.count(for: r) == 19)
        try reader.close()
        // Writable: the indexes are built at open.
        container = try makeContainer(store, model: Self.model())
        let c = container.newContext(concurrencyType: .confinement)
        #expect(try c.explain(r).access == .compoundIndex(keys: ["lastName", "age"], equalities: 1, range: true))
        #expect(try c.count(for: r) == 19)
        r.predicate = try FetchPredicate(format: "boss.lastName == 'Smith'")
        #expect(try c.explain(r).description.contains("INDEX boss"))
        #expect(try c.count(for: r) == 1000)
        try container.close()
    }

    @Test func aFetchIndexWithSeveralElementsInAModelFileIsACompoundIndex() throws {
        let xml = """
            <?xml version="1.0" encoding="UTF-8" standalone="yes"?>
            <model type="com.apple.IDECoreDataModeler.DataModel" documentVersion="1.0">
                <entity name="Song" representedClassName="Song" syncable="YES">
                    <attribute name="artist" attributeType="String"/>
                    <attribute name="year" attributeType="Integer 32" usesScalarValueType="YES"/>
                    <relationship name="album" optional="YES" maxCount="1" deletionRule="Nullify" destinationEntity="Album" inverseName="songs" inverseEntity="Album"/>
                    <fetchIndex name="byArtistAndYear">
                        <fetchIndexElement property="artist" type="Binary" order="ascending"/>
                        <fetchIndexElement property="year" type="Binary" order="ascending"/>
                    </fetchIndex>
                </entity>
                <entity name="Album" representedClassName="Album" syncable="YES">
                    <attribute name="title" attributeType="String"/>
                    <relationship name="songs" toMany="YES" deletionRule="Nullify" destinationEntity="Song" inverseName="album" inverseEntity="Song"/>
                </entity>
            </model>
            """
        let model = try ManagedObjectModel(xml: Data(xml.utf8))
        #expect(model[entity: "Song"]?.compoundIndexes == [["artist", "year"]])
        let store = TemporaryStore()
        let container = try makeContainer(store, model: model)
        let c = container.newContext(concurrencyType: .confinement)
        for i in 0..<300 {
            let s = try c.insertNewObject(forEntityName: "Song")
            try s.setValue(i % 3 == 0 ? "Nina" : "Other \(i)", forKey: "artist")
            try s.setValue(Int32(1950 + i % 40), forKey: "year")
        }
        try c.save()
        var r = FetchRequest<ManagedObject>(entityName: "Song")
        r.predicate = try FetchPredicate(format: "artist == 'Nina' AND year BETWEEN {1960, 1969}")
        #expect(try c.explain(r).description.contains("INDEX (artist, year)"))
        let want = (0..<300).filter { $0 % 3 == 0 && (1960...1969).contains(1950 + $0 % 40) }.count
        #expect(try c.fetch(r).count == want)
        try container.close()
    }
}
