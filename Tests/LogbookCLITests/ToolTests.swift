import Foundation
import Testing
import Logbook
import LogbookEngine

/// The `logbook` tool as a user runs it: arguments, output, exit codes.
@Suite struct ToolTests {
    static var tool: String {
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        var dir = URL(fileURLWithPath: exe).deletingLastPathComponent()
        while dir.path != "/" && !FileManager.default.fileExists(atPath: dir.appendingPathComponent("logbook").path) {
            dir = dir.deletingLastPathComponent()
        }
        return dir.appendingPathComponent("logbook").path
    }

    func run(_ arguments: [String]) throws -> (status: Int32, out: String, err: String) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: Self.tool)
        p.arguments = arguments
        let out = Pipe(), err = Pipe()
        p.standardOutput = out
        p.standardError = err
        try p.run()
        let o = out.fileHandleForReading.readDataToEndOfFile()
        let e = err.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return (p.terminationStatus, String(decoding: o, as: UTF8.self), String(decoding: e, as: UTF8.self))
    }

    /// A small store of people, written through the library.
    func makeStore() throws -> String {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("logbook-tool-\(UUID().uuidString)").path
        let model = try ManagedObjectModel {
            EntityDescription("Person") {
                AttributeDescription("name", .string)
                AttributeDescription("age", .int32, optional: true, indexed: true)
            }
        }
        let container = try PersistentContainer(name: "People", model: model, directory: dir)
        let context = container.newContext(concurrencyType: .confinement)
        for (name, age) in [("Ann", 31), ("Bob", 45), ("Cy", 28), ("Di \"Q\"", 60)] {
            let p = try context.insertNewObject(forEntityName: "Person")
            try p.setValue(name, forKey: "name")
            try p.setValue(age, forKey: "age")
        }
        try context.save()
        try container.close()
        return dir
    }

    @Test func schemaCountAndQueryReadASelfDescribingStore() throws {
        let store = try makeStore()
        defer { try? FileManager.default.removeItem(atPath: store) }
        let schema = try run(["schema", store])
        #expect(schema.status == 0)
        #expect(schema.out == "entity Person\n  attribute name: String\n  attribute age: Integer 32, optional, indexed\n")
        let count = try run(["count", store, "--entity", "Person", "--where", "age >= 30"])
        #expect(count.status == 0 && count.out == "3\n")
        #expect(try run(["count", store, "--entity", "Person"]).out == "4\n")
        let query = try run(["query", store, "--entity", "Person", "--where", "age > 30", "--sort", "age:desc", "--limit", "2"])
        #expect(query.status == 0)
        #expect(query.out == "Person/p4 name=\"Di \"Q\"\" age=60\nPerson/p2 name=\"Bob\" age=45\n")
        let json = try run(["query", store, "--entity", "Person", "--sort", "name", "--json"])
        let parsed = try JSONSerialization.jsonObject(with: Data(json.out.utf8)) as? [[String: Any]]
        #expect(parsed?.map { $0["name"] as? String } == ["Ann", "Bob", "Cy", "Di \"Q\""])
        #expect(parsed?.first?["age"] as? Int == 31)
    }

    @Test func errorsAreOneLineAndNonZero() throws {
        let store = try makeStore()
        defer { try? FileManager.default.removeItem(atPath: store) }
        let missing = try run(["count", store + "-nope", "--entity", "Person"])
        #expect(missing.status != 0)
        #expect(missing.err.hasPrefix("logbook: ") && missing.err.contains("no store"))
        #expect(missing.err.split(separator: "\n").count == 1)
        let entity = try run(["count", store, "--entity", "Nobody"])
        #expect(entity.status != 0 && entity.err.contains("no entity named Nobody"))
        let predicate = try run(["query", store, "--entity", "Person", "--where", "age >"])
        #expect(predicate.status != 0 && predicate.err.contains("column 6"))
        let usage = try run(["count", store])
        #expect(usage.status != 0 && usage.err.contains("--entity"))
        let help = try run(["query", "--help"])
        #expect(help.status == 0 && help.out.contains("--where"))
    }

    @Test func compactRewritesAStore() throws {
        let store = try makeStore()
        defer { try? FileManager.default.removeItem(atPath: store) }
        let r = try run(["compact", store])
        #expect(r.status == 0 && r.out.hasPrefix("compact seconds="))
        #expect(try run(["count", store, "--entity", "Person"]).out == "4\n")
    }
}
