import Foundation
import LogbookGraph
import Testing

/// `logbook export --json` and `logbook import --json`: export → import → export gives the same
/// document but for the store's identifier, on the workloads' stores and on a store with every
/// attribute type; bad input is reported by line and leaves nothing behind.
@Suite struct ExchangeTests {
    let tool = ToolTests()
    let base = FileManager.default.temporaryDirectory.appendingPathComponent("logbook-exchange-\(UUID().uuidString)")
        .path

    init() throws { try FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true) }

    /// The export of `store`, its store identifier replaced by `STORE`.
    func exported(_ store: String) throws -> String {
        let r = try tool.run(["export", store, "--json"])
        #expect(r.status == 0, "\(r.err)")
        let header = try JSONSerialization.jsonObject(with: Data(r.out.prefix { $0 != "\n" }.utf8)) as? [String: Any]
        let id = try #require(header?["store"] as? String)
        return r.out.replacingOccurrences(of: id, with: "STORE")
    }

    func roundTrip(_ store: String, _ name: String) throws -> String {
        let first = try tool.run(["export", store, "--json"]).out
        let file = base + "/\(name).jsonl"
        try first.write(toFile: file, atomically: true, encoding: .utf8)
        let imported = base + "/\(name)-imported"
        let r = try tool.run(["import", imported, "--json", file])
        #expect(r.status == 0, "\(name): \(r.err)")
        #expect(try exported(imported) == exported(store), "\(name)")
        return imported
    }

    @Test func everyWorkloadsStoreRoundTrips() throws {
        defer { try? FileManager.default.removeItem(atPath: base) }
        for workload in ["populate", "relations", "ordered", "commits", "joins"] {
            let store = base + "/\(workload)"
            let args =
                ["bench", workload, "--store", store, "--count", "3000"]
                + (workload == "commits" ? ["--commits", "50", "--per", "3"] : [])
            let made = try tool.run(args)
            #expect(made.status == 0, "\(workload): \(made.err)")
            let out = try exported(store)
            #expect(out.split(separator: "\n").count > 1, "\(workload) exports objects")
            _ = try roundTrip(store, workload)
        }
    }

    @Test func everyAttributeTypeRoundTripsToTheBit() throws {
        defer { try? FileManager.default.removeItem(atPath: base) }
        let store = base + "/all"
        var blob = AttributeDescription("blob", .transformable(transformer: "AppOnlyTransformer"), optional: true)
        blob.isIndexed = false
        let model = try ManagedObjectModel {
            EntityDescription("Thing") {
                AttributeDescription("s", .string, optional: true)
                AttributeDescription("i16", .int16, optional: true)
                AttributeDescription("i32", .int32, optional: true)
                AttributeDescription("i64", .int64, optional: true, indexed: true)
                AttributeDescription("d", .double, optional: true)
                AttributeDescription("f", .float, optional: true)
                AttributeDescription("b", .bool, optional: true)
                AttributeDescription("date", .date, optional: true)
                AttributeDescription("data", .data, optional: true)
                AttributeDescription("uuid", .uuid, optional: true)
                AttributeDescription("url", .url, optional: true)
                AttributeDescription("dec", .decimal, optional: true)
                blob
                RelationshipDescription("folder", to: "Folder", inverse: "things")
                RelationshipDescription("tags", to: "Tag", inverse: "things", toMany: true)
            }
            EntityDescription("Special", parent: "Thing") { AttributeDescription("extra", .string, optional: true) }
            EntityDescription("Folder") {
                AttributeDescription("name", .string)
                RelationshipDescription("things", to: "Thing", inverse: "folder", toMany: true, ordered: true)
            }
            EntityDescription("Tag") {
                AttributeDescription("name", .string)
                RelationshipDescription("things", to: "Thing", inverse: "tags", toMany: true)
            }
        }
        // A transformer only the app has: the tool carries its stored bytes.
        struct AppOnly: AttributeTransformer {
            func transformedValue(_ value: Any) throws -> Data { Data((value as! String).utf8.reversed()) }
            func reverseTransformedValue(_ data: Data) throws -> Any {
                String(decoding: data.reversed(), as: UTF8.self)
            }
        }
        AttributeTransformers.register(AppOnly(), name: "AppOnlyTransformer")
        let doubles: [Double] = [
            0, -0.0, .nan, .infinity, -.infinity, 5e-324, .leastNormalMagnitude, .greatestFiniteMagnitude, 0.1,
            818_022_387.7552129
        ]
        let dates: [Date] = [
            .distantPast, .distantFuture, Date(timeIntervalSinceReferenceDate: 818_022_387.7552129),
            Date(timeIntervalSinceReferenceDate: -0.0), Date(timeIntervalSinceReferenceDate: 5e-324)
        ]
        do {
            let container = try PersistentContainer(name: "all", model: model, directory: store)
            let c = container.newContext(concurrencyType: .confinement)
            let folder = try c.insertNewObject(forEntityName: "Folder")
            try folder.setValue("f", forKey: "name")
            let tags = try (0..<3).map { n -> ManagedObject in
                let t = try c.insertNewObject(forEntityName: "Tag")
                try t.setValue("t\(n)", forKey: "name")
                return t
            }
            var things: [ManagedObject] = []
            for n in 0..<12 {
                let t = try c.insertNewObject(forEntityName: n % 4 == 3 ? "Special" : "Thing")
                if n == 11 {
                    things.append(t)
                    continue
                }  // every value nil
                try t.setValue("é\"\\\n\u{1}\(n)", forKey: "s")
                try t.setValue(Int16(n % 2 == 0 ? Int16.min : Int16.max), forKey: "i16")
                try t.setValue(Int32(n % 2 == 0 ? Int32.min : Int32.max), forKey: "i32")
                try t.setValue(n % 2 == 0 ? Int64.min : Int64.max, forKey: "i64")
                try t.setValue(doubles[n % doubles.count], forKey: "d")
                try t.setValue(Float(doubles[n % doubles.count]), forKey: "f")
                try t.setValue(n % 2 == 0, forKey: "b")
                try t.setValue(dates[n % dates.count], forKey: "date")
                try t.setValue(Data([0, 1, 2, UInt8(n), 255]), forKey: "data")
                try t.setValue(UUID(), forKey: "uuid")
                try t.setValue(URL(string: "https://example.com/a?b=\(n)#c")!, forKey: "url")
                try t.setValue(Decimal(string: "12345678901234567890.123456789")!, forKey: "dec")
                try t.setValue("secret \(n)", forKey: "blob")
                if n % 4 == 3 { try t.setValue("x", forKey: "extra") }
                try t.add(tags[n % 3], toRelationship: "tags")
                things.append(t)
            }
            // An ordered relationship whose order is not the insertion order.
            try folder.setValue(things.reversed().filter { _ in true }.prefix(6).map { $0 }, forKey: "things")
            try c.save()
            try container.close()
        }
        let imported = try roundTrip(store, "all")
        // The values themselves, read back through the library, bit for bit.
        func bits(_ dir: String) throws -> [String] {
            let container = try PersistentContainer(name: "all", model: model, directory: dir)
            defer { try? container.close() }
            let c = container.newContext(concurrencyType: .confinement)
            var request = FetchRequest<ManagedObject>(entityName: "Thing")
            request.sortDescriptors = [FetchSortDescriptor(key: "s")]
            return try c.fetch(request).map { t in
                let d = (try t.value(forKey: "d") as? Double)?.bitPattern
                let date = (try t.value(forKey: "date") as? Date)?.timeIntervalSinceReferenceDate.bitPattern
                var position: Int?
                if let f = try t.value(forKey: "folder") as? ManagedObject {
                    position = try f.orderedObjects(forKey: "things").firstIndex { $0 === t }
                }
                let blob = try t.value(forKey: "blob")
                return
                    "\(t.objectID.uriRepresentation.path) \(String(describing: d)) \(String(describing: date)) \(String(describing: blob)) \(String(describing: position))"
            }
        }
        #expect(try bits(imported) == bits(store))
    }

    @Test func badInputIsReportedByLineAndLeavesNothing() throws {
        defer { try? FileManager.default.removeItem(atPath: base) }
        let store = base + "/w1"
        #expect(try tool.run(["bench", "populate", "--store", store, "--count", "100"]).status == 0)
        var lines = try tool.run(["export", store, "--json"]).out.split(separator: "\n").map(String.init)
        lines[40] = "{\"entity\": \"Item\", \"id\": \"not an id\", \"values\": {}}"
        let file = base + "/bad.jsonl"
        try (lines.joined(separator: "\n") + "\n").write(toFile: file, atomically: true, encoding: .utf8)
        let target = base + "/new"
        let r = try tool.run(["import", target, "--json", file])
        #expect(r.status != 0)
        #expect(r.err.contains("line 41"), "\(r.err)")
        #expect(!FileManager.default.fileExists(atPath: target))
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: base).filter { $0.contains("importing") }
        #expect(leftovers.isEmpty)
        // Into the store it came from: every object is there already, and the store is unchanged.
        let good = base + "/good.jsonl"
        try tool.run(["export", store, "--json"]).out.write(toFile: good, atomically: true, encoding: .utf8)
        let before = try exported(store)
        let again = try tool.run(["import", store, "--json", good])
        #expect(again.status != 0)
        #expect(again.err.contains("line 2") && again.err.contains("already has"), "\(again.err)")
        #expect(try exported(store) == before)
        // From standard input, into an empty directory.
        let piped = base + "/piped"
        let p = Process()
        p.executableURL = URL(fileURLWithPath: ToolTests.tool)
        p.arguments = ["import", piped, "--json"]
        p.standardInput = FileHandle(forReadingAtPath: good)
        p.standardOutput = FileHandle.nullDevice
        try p.run()
        p.waitUntilExit()
        #expect(p.terminationStatus == 0)
        #expect(try exported(piped) == before)
    }
}
