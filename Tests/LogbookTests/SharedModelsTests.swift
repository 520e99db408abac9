import Foundation
import Testing

@testable import Logbook

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

    /// From the README: file name → entity name → (attributes, relationships, fetched properties).
    static func expectations() throws -> [String: [String: (a: Int, r: Int, fp: Int)]] {
        let text = try String(contentsOf: folder.appendingPathComponent("README.md"), encoding: .utf8)
        var result: [String: [String: (a: Int, r: Int, fp: Int)]] = [:]
        var file: String?
        for line in text.split(separator: "\n") {
            if line.hasPrefix("## ") { file = String(line.dropFirst(3)) }
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

    @Test(.enabled(if: SharedModelsTests.present, "../shared/models is not present"))
    func everySharedModelLoadsWithItsEntitiesAndProperties() throws {
        let expected = try Self.expectations()
        #expect(expected.count == 6)
        for (file, entities) in expected.sorted(by: { $0.key < $1.key }) {
            let model: ManagedObjectModel
            do { model = try ManagedObjectModel(contentsOf: Self.folder.appendingPathComponent(file)) } catch {
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
}
