import Foundation
import LogbookEngine
import LogbookTestSupport
import Testing

@testable import LogbookGraph

/// Every item of the object-graph issue, beyond the document scenarios.
@Suite struct ModelTests {
    @Test func invalidModelsAreRefusedWithTheReason() {
        #expect {
            try ManagedObjectModel {
                EntityDescription("A")
                EntityDescription("A")
            }
        } throws: {
            ($0 as? LogbookError)?.code == .invalidModel && "\($0)".contains("two entities")
        }
        #expect {
            try ManagedObjectModel {
                EntityDescription("A") { RelationshipDescription("b", to: "B", inverse: "a") }
            }
        } throws: { "\($0)".contains("unknown entity B") }
        #expect {
            try ManagedObjectModel {
                EntityDescription("A") { RelationshipDescription("b", to: "B", inverse: "a") }
                EntityDescription("B") { RelationshipDescription("a", to: "A", inverse: "other") }
            }
        } throws: { "\($0)".contains("inverse") }
        #expect {
            try ManagedObjectModel { EntityDescription("A") { AttributeDescription("n", .int32, default: "seven") } }
        } throws: { "\($0)".contains("default value") }
    }

    static let xml = """
        <?xml version="1.0" encoding="UTF-8" standalone="yes"?>
        <model type="com.apple.IDECoreDataModeler.DataModel" documentVersion="1.0" lastSavedToolsVersion="21754" systemVersion="22F82" minimumToolsVersion="Automatic" sourceLanguage="Objective-C" userDefinedModelVersionIdentifier="">
            <entity name="Person" representedClassName="Person" syncable="YES">
                <attribute name="age" optional="YES" attributeType="Integer 32" minValueString="0" maxValueString="150" defaultValueString="0" usesScalarValueType="NO"/>
                <attribute name="firstName" attributeType="String" regularExpressionString="[A-Z].*"/>
                <attribute name="lastName" attributeType="String"/>
                <attribute name="photo" optional="YES" attributeType="Binary"/>
                <relationship name="laptops" optional="YES" toMany="YES" deletionRule="Cascade" destinationEntity="Laptop" inverseName="owner" inverseEntity="Laptop"/>
                <fetchIndex name="byLastName">
                    <fetchIndexElement property="lastName" type="Binary" order="ascending"/>
                </fetchIndex>
            </entity>
            <entity name="Laptop" representedClassName="Laptop" syncable="YES">
                <attribute name="color" optional="YES" attributeType="Transformable" valueTransformerName="ColorTransformer"/>
                <attribute name="model" attributeType="String"/>
                <relationship name="owner" optional="YES" maxCount="1" deletionRule="Nullify" destinationEntity="Person" inverseName="laptops" inverseEntity="Person"/>
            </entity>
        </model>
        """

    @Test func anXcodeModelLoads() throws {
        let model = try ManagedObjectModel(xml: Data(Self.xml.utf8), classes: ["Person": Person.self])
        let person = try #require(model[entity: "Person"])
        #expect(person.attributes.map(\.name) == ["age", "firstName", "lastName", "photo"])
        #expect(person.attributes.map(\.type) == [.int32, .string, .string, .data])
        #expect(person.attributes.map(\.isOptional) == [true, false, false, true])
        #expect(person.attributes[2].isIndexed)
        #expect(person.managedClass == Person.self)
        #expect(person.relationships.first?.deleteRule == .cascade)
        #expect(person.relationships.first?.isToMany == true)
        let laptop = try #require(model[entity: "Laptop"])
        #expect(laptop.attributes.first?.type == .transformable(transformer: "ColorTransformer"))
        #expect(laptop.relationships.first?.inverse == "laptops")
        // And it works: the range and pattern rules are enforced at save.
        let store = TemporaryStore()
        let container = try makeContainer(store, model: model)
        let context = container.newContext(concurrencyType: .confinement)
        let p = try context.insertNewObject(forEntityName: "Person")
        try p.setValue("lowercase", forKey: "firstName")
        try p.setValue("X", forKey: "lastName")
        try p.setValue(200, forKey: "age")
        #expect { try context.save() } throws: { error in
            Set((error as? LogbookError)?.validationFailures.map(\.key) ?? []) == ["firstName", "age"]
        }
        try container.close()
        // From a .xcdatamodeld directory on disk.
        let dir = URL(fileURLWithPath: store.directory).appendingPathComponent("Model.xcdatamodeld/Model.xcdatamodel")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        try Data(Self.xml.utf8).write(to: dir.appendingPathComponent("contents"))
        let fromDisk = try ManagedObjectModel(contentsOf: dir.deletingLastPathComponent())
        #expect(fromDisk.entities.map(\.name) == ["Person", "Laptop"])
        #expect { try ManagedObjectModel(xml: Data("<nothing/>".utf8)) } throws: {
            ($0 as? LogbookError)?.code == .invalidModel
        }
        #expect {
            try ManagedObjectModel(
                xml: Data(
                    "<model><entity name=\"A\"><attribute name=\"x\" attributeType=\"Integer 8\"/></entity></model>"
                        .utf8))
        } throws: {
            "\($0)".contains("Integer 8")
        }
    }
}

@Suite struct AttributeTests {
    static let allTypes = try! ManagedObjectModel {
        EntityDescription("All") {
            AttributeDescription("s", .string, optional: true)
            AttributeDescription("i16", .int16, optional: true)
            AttributeDescription("i32", .int32, optional: true)
            AttributeDescription("i64", .int64, optional: true)
            AttributeDescription("d", .double, optional: true)
            AttributeDescription("f", .float, optional: true)
            AttributeDescription("b", .bool, optional: true)
            AttributeDescription("date", .date, optional: true)
            AttributeDescription("data", .data, optional: true)
            AttributeDescription("uuid", .uuid, optional: true)
            AttributeDescription("url", .url, optional: true)
            AttributeDescription("dec", .decimal, optional: true)
            AttributeDescription("withDefault", .string, default: "fallback")
            AttributeDescription("count", .int64, default: 7, indexed: true)
        }
    }

    @Test func everyTypeRoundTripsThroughTheStore() throws {
        let store = TemporaryStore()
        let uuid = UUID()
        let date = Date(timeIntervalSince1970: 1_700_000_000.25)
        let values: [String: Any] = [
            "s": "héllo ✓", "i16": Int16(-300), "i32": Int32(70_000), "i64": Int64.max, "d": 3.25, "f": Float(1.5),
            "b": true,
            "date": date, "data": Data([0, 1, 255]), "uuid": uuid, "url": URL(string: "https://example.com/a?b=c")!,
            "dec": Decimal(string: "12345.6789")!
        ]
        let id: ObjectID
        do {
            let container = try makeContainer(store, model: Self.allTypes)
            let context = container.newContext(concurrencyType: .confinement)
            let o = try context.insertNewObject(forEntityName: "All")
            #expect(try o.value(forKey: "withDefault") as? String == "fallback", "defaults are set on insert")
            #expect(try o.value(forKey: "count") as? Int64 == 7)
            for (k, v) in values { try o.setValue(v, forKey: k) }
            try context.save()
            id = o.objectID
            try container.close()
        }
        let container = try makeContainer(store, model: Self.allTypes)
        let context = container.newContext(concurrencyType: .confinement)
        let o = try context.existingObject(with: id)
        #expect(try o.value(forKey: "s") as? String == "héllo ✓")
        #expect(try o.value(forKey: "i16") as? Int16 == -300)
        #expect(try o.value(forKey: "i32") as? Int32 == 70_000)
        #expect(try o.value(forKey: "i64") as? Int64 == .max)
        #expect(try o.value(forKey: "d") as? Double == 3.25)
        #expect(try o.value(forKey: "f") as? Float == 1.5)
        #expect(try o.value(forKey: "b") as? Bool == true)
        #expect(try o.value(forKey: "date") as? Date == date)
        #expect(try o.value(forKey: "data") as? Data == Data([0, 1, 255]))
        #expect(try o.value(forKey: "uuid") as? UUID == uuid)
        #expect(try o.value(forKey: "url") as? URL == URL(string: "https://example.com/a?b=c"))
        #expect(try o.value(forKey: "dec") as? Decimal == Decimal(string: "12345.6789"))
        try container.close()
    }

    @Test func wrongTypesAndUnknownKeysAreErrorsThatChangeNothing() throws {
        let store = TemporaryStore()
        let container = try makeContainer(store, model: Self.allTypes)
        let context = container.newContext(concurrencyType: .confinement)
        let o = try context.insertNewObject(forEntityName: "All")
        try o.setValue(5, forKey: "i16")
        #expect { try o.setValue("five", forKey: "i16") } throws: { e in
            let e = e as? LogbookError
            return e?.code == .typeMismatch && e?.key == "i16" && e?.entity == "All" && e?.objectID == o.objectID
        }
        #expect { try o.setValue(70_000, forKey: "i16") } throws: { ($0 as? LogbookError)?.code == .typeMismatch }
        #expect(try o.value(forKey: "i16") as? Int16 == 5)
        #expect { try o.setValue(1, forKey: "nope") } throws: { ($0 as? LogbookError)?.code == .unknownKey }
        #expect { try o.value(forKey: "nope") } throws: { ($0 as? LogbookError)?.code == .unknownKey }
        #expect { try o.setValue(Date(), forKey: "s") } throws: { ($0 as? LogbookError)?.code == .typeMismatch }
        try container.close()
    }
}

@Suite struct ValidationTests {
    @Test func everyFailureIsReportedAtOnceAndNothingIsWritten() throws {
        let model = try ManagedObjectModel {
            EntityDescription("Account") {
                AttributeDescription("name", .string, rules: [.length(2...10)])
                AttributeDescription("balance", .int64, rules: [.range(0...1000)])
                AttributeDescription("code", .string, optional: true, rules: [.pattern("[A-Z]{3}")])
                AttributeDescription(
                    "even", .int32, optional: true,
                    rules: [.custom { v in ((v as? Int32) ?? 0) % 2 == 0 ? nil : "must be even" }])
            }
        }
        let store = TemporaryStore()
        let container = try makeContainer(store, model: model)
        let context = container.newContext(concurrencyType: .confinement)
        let good = try context.insertNewObject(forEntityName: "Account")
        try good.setValue("ok", forKey: "name")
        try good.setValue(5, forKey: "balance")
        let bad = try context.insertNewObject(forEntityName: "Account")
        try bad.setValue("x", forKey: "name")
        try bad.setValue(5000, forKey: "balance")
        try bad.setValue("abc", forKey: "code")
        try bad.setValue(3, forKey: "even")
        let missing = try context.insertNewObject(forEntityName: "Account")
        let before = container.store.version
        do {
            try context.save()
            Issue.record("saved invalid objects")
        } catch let e as LogbookError {
            #expect(e.code == .validation)
            let byObject = Dictionary(grouping: e.validationFailures, by: \.objectID)
            #expect(Set(byObject[bad.objectID]?.map(\.key) ?? []) == ["name", "balance", "code", "even"])
            #expect(Set(byObject[missing.objectID]?.map(\.key) ?? []) == ["name", "balance"])
            #expect(byObject[good.objectID] == nil)
            #expect(e.validationFailures.contains { $0.reason == "must be even" })
            #expect(e.description.contains("Account"))
        }
        #expect(container.store.version == before, "nothing was written")
        #expect(context.hasChanges, "the changes are still there to fix")
        context.delete(bad)
        context.delete(missing)
        try context.save()
        #expect(container.store.snapshot().count(inKeyspace: container.storeLayout.keyspace[0]) == 1)
        try container.close()
    }
}

@Suite struct DeleteRuleTests {
    static func model(_ rule: DeleteRule) throws -> ManagedObjectModel {
        try ManagedObjectModel {
            EntityDescription("Folder") {
                AttributeDescription("name", .string)
                RelationshipDescription("notes", to: "Note", inverse: "folder", toMany: true, deleteRule: rule)
            }
            EntityDescription("Note") {
                AttributeDescription("text", .string)
                RelationshipDescription("folder", to: "Folder", inverse: "notes")
            }
        }
    }

    func setUp(_ rule: DeleteRule) throws -> (
        TemporaryStore, PersistentContainer, ManagedObjectContext, ManagedObject, [ManagedObject]
    ) {
        let store = TemporaryStore()
        let container = try makeContainer(store, model: try Self.model(rule))
        let context = container.newContext(concurrencyType: .confinement)
        let folder = try context.insertNewObject(forEntityName: "Folder")
        try folder.setValue("f", forKey: "name")
        var notes: [ManagedObject] = []
        for i in 0..<3 {
            let n = try context.insertNewObject(forEntityName: "Note")
            try n.setValue("note \(i)", forKey: "text")
            try n.setValue(folder, forKey: "folder")
            notes.append(n)
        }
        try context.save()
        return (store, container, context, folder, notes)
    }

    @Test func nullifyClearsTheInverse() throws {
        let (tmp, container, context, folder, notes) = try setUp(.nullify)
        context.delete(folder)
        #expect(try notes[0].value(forKey: "folder") == nil)
        try context.save()
        #expect(try context.fetch(FetchRequest<ManagedObject>(entityName: "Note")).count == 3)
        try container.close()
        withExtendedLifetime(tmp) {}
    }

    @Test func cascadeDeletesTheRelated() throws {
        let (tmp, container, context, folder, notes) = try setUp(.cascade)
        context.delete(folder)
        let allDeleted = notes.allSatisfy { $0.isDeleted }
        #expect(allDeleted)
        try context.save()
        #expect(try context.fetch(FetchRequest<ManagedObject>(entityName: "Note")).isEmpty)
        try container.close()
        withExtendedLifetime(tmp) {}
    }

    @Test func denyRefusesWhileRelated() throws {
        let (tmp, container, context, folder, notes) = try setUp(.deny)
        context.delete(folder)
        #expect { try context.save() } throws: { e in
            (e as? LogbookError)?.validationFailures.first?.key == "notes"
        }
        context.rollback()
        #expect(!folder.isDeleted)
        for n in notes { context.delete(n) }
        context.delete(folder)
        try context.save()
        try container.close()
        withExtendedLifetime(tmp) {}
    }

    @Test func noActionLeavesTheRelatedAlone() throws {
        let (tmp, container, context, folder, notes) = try setUp(.noAction)
        let folderID = folder.objectID
        context.delete(folder)
        try context.save()
        // The notes still point at the deleted folder's ID (that is what no action means).
        #expect(notes[0].changedValues().isEmpty)
        #expect(notes[0].committedValues(forKeys: ["folder"])["folder"] as? ObjectID == folderID)
        try container.close()
        withExtendedLifetime(tmp) {}
    }
}
