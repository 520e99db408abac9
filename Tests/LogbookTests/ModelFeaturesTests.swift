import Foundation
import LogbookEngine
import LogbookTestSupport
import Testing

@testable import LogbookGraph

final class Recipe: ManagedObject {
    @Managed("title") var title: String
    @OrderedToMany("steps") var steps: [Step]
}

final class Step: ManagedObject {
    @Managed("text") var text: String
    @ToOne("recipe") var recipe: Recipe?
}

/// Ordered relationships, transient attributes, fetched properties, fetch request templates
/// and the rest of the model file.
@Suite struct ModelFeaturesTests {
    /// A model file of the project's own, with what real files hold: inheritance, an ordered
    /// relationship, transient and Undefined attributes, a fetched property, fetch requests
    /// with variables, a configuration, user info, a uniqueness constraint, a compound index
    /// and the diagram's layout.
    static let xml = """
        <?xml version="1.0" encoding="UTF-8" standalone="yes"?>
        <model type="com.apple.IDECoreDataModeler.DataModel" documentVersion="1.0" lastSavedToolsVersion="22222" systemVersion="23A344" minimumToolsVersion="Automatic" sourceLanguage="Swift" userDefinedModelVersionIdentifier="2">
            <entity name="Recipe" representedClassName=".Recipe" syncable="YES">
                <attribute name="title" attributeType="String" syncable="YES">
                    <userInfo><entry key="display" value="Title &quot;main&quot;"/></userInfo>
                </attribute>
                <attribute name="scratch" optional="YES" transient="YES" attributeType="String"/>
                <attribute name="cache" optional="YES" transient="YES" attributeType="Undefined"/>
                <attribute name="assetId" optional="YES" transient="YES" syncable="YES"/>
                <attribute name="code" optional="YES" attributeType="String"/>
                <attribute name="photo" optional="YES" attributeType="Binary" allowsExternalBinaryDataStorage="YES"/>
                <relationship name="steps" optional="YES" toMany="YES" ordered="YES" deletionRule="Cascade" destinationEntity="Step" inverseName="recipe" inverseEntity="Step"/>
                <fetchedProperty name="sameTitle" optional="YES">
                    <fetchRequest name="fetchedPropertyFetchRequest" entity="Recipe" predicateString="title == $FETCH_SOURCE.title"/>
                </fetchedProperty>
                <fetchIndex name="byTitleAndCode">
                    <fetchIndexElement property="title" type="Binary" order="ascending"/>
                    <fetchIndexElement property="code" type="Binary" order="ascending"/>
                </fetchIndex>
                <uniquenessConstraints>
                    <uniquenessConstraint><constraint value="code"/></uniquenessConstraint>
                </uniquenessConstraints>
                <userInfo><entry key="key with.dots" value="v"/></userInfo>
            </entity>
            <entity name="Step" representedClassName="Step" syncable="YES">
                <attribute name="text" attributeType="String"/>
                <relationship name="recipe" optional="YES" maxCount="1" deletionRule="Nullify" destinationEntity="Recipe" inverseName="steps" inverseEntity="Recipe"/>
            </entity>
            <entity name="QuickStep" parentEntity="Step">
                <attribute name="seconds" attributeType="Integer 32" defaultValueString="30"/>
            </entity>
            <entity name="Note">
                <attribute name="text" attributeType="String"/>
            </entity>
            <fetchRequest name="byTitle" entity="Recipe" predicateString="title == $title"/>
            <configuration name="Cloud"><memberEntity name="Recipe"/></configuration>
            <configuration name="Local"><memberEntity name="Note"/></configuration>
            <elements>
                <element name="Recipe" positionX="0" positionY="0" width="128" height="90"/>
            </elements>
        </model>
        """

    static func model() throws -> ManagedObjectModel {
        try ManagedObjectModel(xml: Data(xml.utf8), classes: ["Recipe": Recipe.self, "Step": Step.self])
    }

    @Test func theModelFileLoadsWithEverythingItSays() throws {
        let model = try Self.model()
        let recipe = try #require(model[entity: "Recipe"])
        #expect(recipe.managedClass == Recipe.self)  // `.Recipe`: the current module's class
        #expect(recipe.attributes.map(\.name) == ["title", "scratch", "cache", "assetId", "code", "photo"])
        #expect(recipe.attributes[1].isTransient)
        #expect(recipe.attributes[2].isTransient)
        #expect(recipe.attributes[0].userInfo["display"] == "Title \"main\"")
        #expect(recipe.compoundIndexes == [["title", "code"]])  // a fetch index with two elements
        #expect(recipe.userInfo["key with.dots"] == "v")
        #expect(recipe.relationships.first?.isOrdered == true)
        #expect(recipe.fetchedProperties.map(\.name) == ["sameTitle"])
        #expect(recipe.uniquenessConstraints == [["code"]])
        #expect(model[entity: "QuickStep"]?.parentEntity == "Step")
        #expect(model.fetchRequestTemplates["byTitle"]?.entityName == "Recipe")
        #expect(model.configurations["Cloud"] == ["Recipe"])
        // What is read but not acted on is said, not refused.
        #expect(model.warnings.contains { $0.contains("Undefined") })
        // A transient attribute written with no type (as Xcode writes an Undefined one: Wire's
        // model) is read as an Undefined one; it was refused as lacking a type.
        let asset = recipe.attributes.first { $0.name == "assetId" }
        #expect(asset?.isTransient == true && asset?.type == .data)
    }

    @Test func anOrderedRelationshipKeepsItsOrderThroughSaveReopenUndoAndInverses() throws {
        let store = TemporaryStore()
        var container = try makeContainer(store, model: Self.model())
        var c = container.newContext(concurrencyType: .confinement)
        let recipe = try c.insert(Recipe.self)
        recipe.title = "Bread"
        var steps: [Step] = []
        for text in ["mix", "knead", "rise", "bake"] {
            let s = try c.insert(Step.self)
            s.text = text
            steps.append(s)
        }
        recipe.steps = [steps[2], steps[0], steps[3]]
        #expect(recipe.steps.map(\.text) == ["rise", "mix", "bake"])
        #expect(steps[0].recipe === recipe)  // the inverse follows
        try recipe.insert(steps[1], at: 2, inRelationship: "steps")
        try recipe.moveObject(at: 0, to: 3, inRelationship: "steps")
        #expect(recipe.steps.map(\.text) == ["mix", "knead", "bake", "rise"])
        // From the inverse side: a new step goes last.
        let cool = try c.insert(Step.self)
        cool.text = "cool"
        cool.recipe = recipe
        #expect(recipe.steps.map(\.text) == ["mix", "knead", "bake", "rise", "cool"])
        #expect(throws: LogbookError.self) { try recipe.moveObject(at: 9, to: 0, inRelationship: "steps") }
        try c.save()
        let id = recipe.objectID
        try container.close()

        container = try makeContainer(store, model: Self.model())
        c = container.newContext(concurrencyType: .confinement)
        c.undoHistory = UndoHistory()
        let again = try c.existingObject(with: id) as! Recipe
        #expect(again.steps.map(\.text) == ["mix", "knead", "bake", "rise", "cool"])
        #expect(try again.value(forKey: "steps") is [ManagedObject])
        try again.removeObject(at: 0, fromRelationship: "steps")
        try again.replaceObject(at: 0, with: again.steps[3], inRelationship: "steps")
        #expect(again.steps.map(\.text) == ["cool", "bake", "rise"])
        c.undo()
        #expect(again.steps.map(\.text) == ["knead", "bake", "rise", "cool"])
        c.undo()
        #expect(again.steps.map(\.text) == ["mix", "knead", "bake", "rise", "cool"])
        c.redo()
        try c.save()
        // Another context sees the saved order; a merge brings a new order in.
        let other = container.newContext(concurrencyType: .confinement)
        let theirs = try other.existingObject(with: id) as! Recipe
        #expect(theirs.steps.map(\.text) == ["knead", "bake", "rise", "cool"])
        try theirs.moveObject(at: 3, to: 0, inRelationship: "steps")
        try other.save()
        c.refreshAllObjects()
        #expect(again.steps.map(\.text) == ["cool", "knead", "bake", "rise"])
        // Deleting the recipe cascades to its steps and drops the order record.
        c.delete(again)
        try c.save()
        #expect(try other.count(for: FetchRequest<Step>(entityName: "Step")) == 1)  // "mix", removed earlier
        try container.close()
    }

    @Test func aMoveInALongOrderedRelationshipRewritesTwoPages() throws {
        let store = TemporaryStore()
        var container = try makeContainer(store, model: Self.model(), durability: .none)
        var c = container.newContext(concurrencyType: .confinement)
        let recipe = try c.insert(Recipe.self)
        recipe.title = "Long"
        var steps: [Step] = []
        for i in 0..<3_000 {
            let s = try c.insert(Step.self)
            s.text = "\(i)"
            steps.append(s)
        }
        recipe.steps = steps
        try c.save()
        let layout = recipe.layout
        let r = try recipe.orderedIndex("steps")
        let directoryKey = try #require(
            container.storeLayout.orderKey(entity: layout.index, relationship: r, owner: recipe.engineKey))
        let before = try c.storedOrder(directoryKey, snapshot: container.store.snapshot())
        #expect(before.count == 3_000 / OrderPages.pageSize + 1)
        // Move one step from the middle of page 1 to the middle of page 4.
        try recipe.moveObject(at: 700, to: 2_100, inRelationship: "steps")
        try c.save()
        let after = try c.storedOrder(directoryKey, snapshot: container.store.snapshot())
        let kept = Set(before.map(\.number)).intersection(after.map(\.number))
        #expect(after.count - kept.count <= 2)  // two pages written again, the others kept
        var expected = (0..<3_000).map { "\($0)" }
        expected.insert(expected.remove(at: 700), at: 2_100)
        #expect(recipe.steps.map(\.text) == expected)
        let id = recipe.objectID
        try container.close()
        container = try makeContainer(store, model: Self.model())
        c = container.newContext(concurrencyType: .confinement)
        #expect((try c.existingObject(with: id) as! Recipe).steps.map(\.text) == expected)
        // Removing most members shrinks the order; deleting the owner removes every page.
        let again = try c.existingObject(with: id) as! Recipe
        again.steps = Array(again.steps.prefix(10))
        try c.save()
        #expect(try c.storedOrder(directoryKey, snapshot: container.store.snapshot()).flatMap(\.members).count == 10)
        c.delete(again)
        try c.save()
        var pages = 0
        container.store.snapshot().forEachKey(inKeyspace: EngineKey(rawValue: directoryKey).keyspace) { _ in
            pages += 1
            return true
        }
        #expect(pages == 0)
        try container.close()
    }

    @Test func anOrderedRelationshipThroughAChildContext() throws {
        let store = TemporaryStore()
        let container = try makeContainer(store, model: Self.model())
        let parent = container.newContext(concurrencyType: .confinement)
        let recipe = try parent.insert(Recipe.self)
        recipe.title = "Soup"
        for text in ["chop", "boil"] {
            let s = try parent.insert(Step.self)
            s.text = text
            s.recipe = recipe
        }
        try parent.save()
        let child = parent.newChildContext(concurrencyType: .confinement)
        let mine = try child.existingObject(with: recipe.objectID) as! Recipe
        #expect(mine.steps.map(\.text) == ["chop", "boil"])
        try mine.moveObject(at: 1, to: 0, inRelationship: "steps")
        try child.save()
        #expect(recipe.steps.map(\.text) == ["boil", "chop"])
        try parent.save()
        let check = container.newContext(concurrencyType: .confinement)
        #expect((try check.existingObject(with: recipe.objectID) as! Recipe).steps.map(\.text) == ["boil", "chop"])
        try container.close()
    }

    @Test func aContainerForOneConfiguration() throws {
        let store = TemporaryStore()
        try FileManager.default.createDirectory(atPath: store.directory, withIntermediateDirectories: true)
        var options = ContainerOptions()
        options.configuration = "Local"
        let container = try PersistentContainer(
            name: "Local", model: Self.model(), directory: store.path, options: options)
        let c = container.newContext(concurrencyType: .confinement)
        let note = try c.insertNewObject(forEntityName: "Note")
        try note.setValue("kept here", forKey: "text")
        try c.save()
        #expect(try c.count(for: FetchRequest<ManagedObject>(entityName: "Note")) == 1)
        #expect {
            try c.insertNewObject(forEntityName: "Recipe")
        } throws: { e in
            (e as? LogbookError)?.code == .unknownEntity
        }
        #expect(throws: LogbookError.self) { try c.fetch(FetchRequest<ManagedObject>(entityName: "Recipe")) }
        try container.close()
        // A configuration whose entities point outside it, and one the model lacks.
        options.configuration = "Cloud"
        #expect {
            _ = try PersistentContainer(name: "Cloud", model: Self.model(), directory: store.path, options: options)
        } throws: { e in
            (e as? LogbookError)?.code == .invalidModel
        }
        options.configuration = "Missing"
        #expect {
            _ = try PersistentContainer(name: "Missing", model: Self.model(), directory: store.path, options: options)
        } throws: { e in
            (e as? LogbookError)?.code == .invalidArgument
        }
    }

    @Test func transientAttributesAreNeverStored() throws {
        let store = TemporaryStore()
        let container = try makeContainer(store, model: Self.model())
        let c = container.newContext(concurrencyType: .confinement)
        let recipe = try c.insert(Recipe.self)
        recipe.title = "Tea"
        try recipe.setValue("in memory", forKey: "scratch")
        try c.save()
        #expect(try recipe.value(forKey: "scratch") as? String == "in memory")
        c.refresh(recipe, mergeChanges: false)
        #expect(try recipe.value(forKey: "scratch") == nil)
        let other = container.newContext(concurrencyType: .confinement)
        #expect(try other.existingObject(with: recipe.objectID).value(forKey: "scratch") == nil)
        #expect(try other.existingObject(with: recipe.objectID).value(forKey: "title") as? String == "Tea")
        try container.close()
    }

    @Test func fetchedPropertiesAndTemplatesSubstituteTheirVariables() throws {
        let store = TemporaryStore()
        let model = try Self.model()
        let container = try makeContainer(store, model: model)
        let c = container.newContext(concurrencyType: .confinement)
        for (title, code) in [("Tea", "a"), ("Tea", "b"), ("Cake", "c")] {
            let r = try c.insert(Recipe.self)
            r.title = title
            try r.setValue(code, forKey: "code")
        }
        try c.save()
        var byCode = FetchRequest<Recipe>()
        byCode.predicate = try FetchPredicate(format: "code == 'a'")
        let tea = try #require(try c.fetch(byCode).first)
        let same = try #require(try tea.value(forKey: "sameTitle") as? [ManagedObject])
        #expect(same.count == 2)
        let request = try model.fetchRequestFromTemplate(named: "byTitle", substitutionVariables: ["title": "Cake"])
        #expect(try c.fetch(request).count == 1)
        #expect(throws: LogbookError.self) { try model.fetchRequestFromTemplate(named: "missing") }
        // A variable left without a value is an error when evaluated, naming it.
        let unbound = try model.fetchRequestFromTemplate(named: "byTitle")
        #expect {
            try c.fetch(unbound)
        } throws: { e in
            "\(e)".contains("$title")
        }
        let p = try FetchPredicate(format: "title == $t OR SUBQUERY(steps, $s, $s.text == $t).@count > 0")
        #expect(
            try c.fetch(FetchRequest<Recipe>(entityName: "Recipe")).filter {
                try p.substituting(["t": "Tea"]).evaluate(with: $0)
            }.count == 2)
        try container.close()
    }
}
