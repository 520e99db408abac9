import Foundation
import LogbookTestSupport
import Testing

@testable import LogbookGraph

/// The six real Core Data models in `../shared/models` (outside the repository, when present):
/// each loads with the entities and the own attribute, relationship and fetched-property
/// counts its README lists. The project's own model tests do not depend on them.
@Suite struct SharedModelsTests {
    static let folder: URL = {
        if let given = ProcessInfo.processInfo.environment["LOGBOOK_SHARED_MODELS"] {
            return URL(fileURLWithPath: given)
        }
        return URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("shared/models")
    }()
    static var present: Bool { FileManager.default.fileExists(atPath: folder.appendingPathComponent("README.md").path) }

    /// From a README: file name → entity name → (attributes, relationships, fetched properties).
    static func expectations(in folder: URL = folder) throws -> [String: [String: (a: Int, r: Int, fp: Int)]] {
        let text = try String(contentsOf: folder.appendingPathComponent("README.md"), encoding: .utf8)
        var result: [String: [String: (a: Int, r: Int, fp: Int)]] = [:]
        var file: String?
        for line in text.split(separator: "\n") {
            if line.hasPrefix("## ") || line.hasPrefix("### ") {
                file = String(line.drop { $0 == "#" }.dropFirst())
            }
            guard let f = file, line.hasPrefix("- expected: ") else { continue }
            for item in line.dropFirst("- expected: ".count).split(separator: ";") {
                let parts = item.split(separator: " ")
                guard let name = parts.first else { continue }
                var counts = (a: 0, r: 0, fp: 0)
                for p in parts.dropFirst() {
                    let kv = p.split(separator: "=")
                    guard kv.count == 2, let n = Int(kv[1]) else { continue }
                    switch kv[0] {
                    case "a": counts.a = n
                    case "r": counts.r = n
                    case "fp": counts.fp = n
                    default: break
                    }
                }
                result[f, default: [:]][String(name)] = counts
            }
        }
        return result
    }

    /// The six models of the folder and the twelve of its `more/`.
    static let folders: [(URL, Int)] = [(folder, 6), (folder.appendingPathComponent("more"), 12)]

    @Test(.enabled(if: SharedModelsTests.present, "../shared/models is not present"), arguments: 0..<2)
    func everySharedModelLoadsWithItsEntitiesAndProperties(folderNumber: Int) throws {
        let (folder, count) = Self.folders[folderNumber]
        let expected = try Self.expectations(in: folder)
        #expect(expected.count == count)
        for (file, entities) in expected.sorted(by: { $0.key < $1.key }) {
            let model: ManagedObjectModel
            do { model = try ManagedObjectModel(contentsOf: folder.appendingPathComponent(file)) } catch {
                Issue.record("\(file): \(error)")
                continue
            }
            #expect(Set(model.entities.map(\.name)) == Set(entities.keys), "\(file)")
            for (name, counts) in entities {
                let e = try #require(model[entity: name], "\(file): \(name)")
                #expect(e.attributes.count == counts.a, "\(file): \(name) attributes")
                #expect(e.relationships.count == counts.r, "\(file): \(name) relationships")
                #expect(e.fetchedProperties.count == counts.fp, "\(file): \(name) fetched properties")
            }
        }
    }

    /// Each of the 18 models opens as a store (its layout checked: indexes, constraints,
    /// inverses), takes an object of each concrete entity that needs no values, and opens again.
    @Test(.enabled(if: SharedModelsTests.present, "../shared/models is not present"))
    func everySharedModelOpensAsAStore() throws {
        var opened = 0
        for (folder, _) in Self.folders {
            let files = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasSuffix(".xml") }
            for file in files.sorted() {
                let store = TemporaryStore()
                try FileManager.default.createDirectory(atPath: store.directory, withIntermediateDirectories: true)
                do {
                    let model = try ManagedObjectModel(contentsOf: folder.appendingPathComponent(file))
                    var inserted = 0
                    do {
                        let container = try PersistentContainer(name: "Shared", model: model, directory: store.path)
                        let context = container.newContext(concurrencyType: .confinement)
                        for entity in model.entities where !entity.isAbstract {
                            var chain = [entity]
                            while let p = chain.last?.parentEntity, let parent = model[entity: p] {
                                chain.append(parent)
                            }
                            let needsValues = chain.contains { e in
                                e.attributes.contains { !$0.isOptional && !$0.isTransient && $0.defaultValue == nil }
                                    || e.relationships.contains { !$0.isOptional || $0.minCount > 0 }
                            }
                            if needsValues { continue }
                            _ = try context.insertNewObject(forEntityName: entity.name)
                            inserted += 1
                        }
                        try context.save()
                    }
                    let again = try PersistentContainer(name: "Shared", model: model, directory: store.path)
                    var counted = 0
                    for entity in model.entities where entity.parentEntity == nil {
                        let request = FetchRequest(entityName: entity.name)
                        counted += try again.newContext(concurrencyType: .confinement).count(for: request)
                    }
                    #expect(counted == inserted, "\(file)")
                    opened += 1
                } catch {
                    Issue.record("\(file): \(error)")
                }
            }
        }
        #expect(opened == 18)
    }
}
