import Foundation
import LogbookEngine
import LogbookTestSupport
import Testing

@testable import LogbookGraph

/// Derived attributes, batch updates with expressions, and testing the entity in a predicate.
@Suite struct DerivedAttributeTests {
    static func model() throws -> ManagedObjectModel {
        var slug = AttributeDescription("slug", .string, optional: true, indexed: true)
        slug.derivationExpression = "canonical:(title)"
        var count = AttributeDescription("itemCount", .int32, optional: true)
        count.derivationExpression = "items.@count"
        var owner = AttributeDescription("ownerName", .string, optional: true)
        owner.derivationExpression = "owner.name"
        return try ManagedObjectModel {
            EntityDescription("List") {
                AttributeDescription("title", .string)
                AttributeDescription("views", .int32, default: 0)
                slug
                count
                owner
                RelationshipDescription("items", to: "Entry", inverse: "list", toMany: true)
                RelationshipDescription("owner", to: "User", inverse: nil)
            }
            EntityDescription("Entry") {
                AttributeDescription("text", .string)
                RelationshipDescription("list", to: "List", inverse: "items")
            }
            EntityDescription("Pinned", parent: "Entry") {}
            EntityDescription("User") { AttributeDescription("name", .string) }
        }
    }

    @Test func derivedAttributesAreComputedAtSaveStoredAndIndexed() throws {
        let store = TemporaryStore()
        let container = try makeContainer(store, model: Self.model())
        let c = container.newContext(concurrencyType: .confinement)
        let list = try c.insertNewObject(forEntityName: "List")
        try list.setValue("Éclairs à la Crème", forKey: "title")
        let user = try c.insertNewObject(forEntityName: "User")
        try user.setValue("Ada", forKey: "name")
        try list.setValue(user, forKey: "owner")
        for text in ["a", "b"] {
            let e = try c.insertNewObject(forEntityName: "Entry")
            try e.setValue(text, forKey: "text")
            try e.setValue(list, forKey: "list")
        }
        try c.save()
        #expect(try list.value(forKey: "slug") as? String == "eclairs a la creme")
        #expect(try list.value(forKey: "itemCount") as? Int32 == 2)
        #expect(try list.value(forKey: "ownerName") as? String == "Ada")
        // Stored: another context fetches by it, through its index.
        let other = container.newContext(concurrencyType: .confinement)
        var r = FetchRequest<ManagedObject>(entityName: "List")
        r.predicate = try FetchPredicate(format: "slug == 'eclairs a la creme'")
        #expect(try other.fetch(r).count == 1)
        #expect(try other.explain(r).description.contains("INDEX"))
        // A change of the relationship alone recomputes at the next save.
        let e = try c.insertNewObject(forEntityName: "Pinned")
        try e.setValue("c", forKey: "text")
        try list.add(e, toRelationship: "items")
        try c.save()
        #expect(try list.value(forKey: "itemCount") as? Int32 == 3)
        try container.close()
    }

    @Test func batchUpdatesSetExpressions() throws {
        let store = TemporaryStore()
        let container = try makeContainer(store, model: Self.model())
        let c = container.newContext(concurrencyType: .confinement)
        for (title, views) in [("One", 1), ("Two", 10)] {
            let l = try c.insertNewObject(forEntityName: "List")
            try l.setValue(title, forKey: "title")
            try l.setValue(Int32(views), forKey: "views")
        }
        try c.save()
        var update = BatchUpdateRequest(entityName: "List")
        update.propertiesToUpdate = [
            "views": try FetchExpression(format: "views * 2 + 1"),
            "title": try FetchExpression(format: "uppercase:(title)")
        ]
        #expect(try c.execute(update).count == 2)
        let check = container.newContext(concurrencyType: .confinement)
        var r = FetchRequest<ManagedObject>(entityName: "List")
        r.sortDescriptors = [FetchSortDescriptor(key: "views")]
        let found = try check.fetch(r)
        #expect(try found.map { try $0.value(forKey: "views") as! Int32 } == [3, 21])
        #expect(try found.map { try $0.value(forKey: "title") as! String } == ["ONE", "TWO"])
        // An expression that leaves a required attribute empty refuses the whole update.
        update.propertiesToUpdate = ["title": try FetchExpression(format: "nil")]
        #expect(throws: LogbookError.self) { try c.execute(update) }
        #expect(throws: LogbookError.self) { try FetchExpression(format: "views +") }
        var broken = AttributeDescription("x", .string)
        broken.derivationExpression = "lowercase:("
        #expect(throws: LogbookError.self) {
            try ManagedObjectModel(entities: [EntityDescription("Bad", attributes: [broken])])
        }
        try container.close()
    }

    @Test func aPredicateCanTestTheEntity() throws {
        let store = TemporaryStore()
        let container = try makeContainer(store, model: Self.model())
        let c = container.newContext(concurrencyType: .confinement)
        for entity in ["Entry", "Pinned", "Pinned"] {
            let e = try c.insertNewObject(forEntityName: entity)
            try e.setValue(entity, forKey: "text")
        }
        try c.save()
        var r = FetchRequest<ManagedObject>(entityName: "Entry")
        r.predicate = try FetchPredicate(format: "entity == %@", "Pinned")
        #expect(try c.count(for: r) == 2)
        r.predicate = try FetchPredicate(format: "entity.name != 'Pinned'")
        #expect(try c.fetch(r).map(\.entity.name) == ["Entry"])
        let model = try Self.model()
        r.predicate = try FetchPredicate(format: "entity == %@", model[entity: "Entry"]!)
        #expect(try c.count(for: r) == 1)
        try container.close()
    }
}
