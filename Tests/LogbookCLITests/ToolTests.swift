import Foundation
import LogbookEngine
import LogbookGraph
import Testing

/// The `logbook` tool as a user runs it: arguments, output, exit codes.
@Suite struct ToolTests {
    static var tool: String {
        let exe =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
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
        let out = Pipe()
        let err = Pipe()
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
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("logbook-tool-\(UUID().uuidString)")
            .path
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
        #expect(
            schema.out == "entity Person\n  attribute name: String\n  attribute age: Integer 32, optional, indexed\n")
        let count = try run(["count", store, "--entity", "Person", "--where", "age >= 30"])
        #expect(count.status == 0 && count.out == "3\n")
        #expect(try run(["count", store, "--entity", "Person"]).out == "4\n")
        let query = try run([
            "query", store, "--entity", "Person", "--where", "age > 30", "--sort", "age:desc", "--limit", "2"
        ])
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

    /// A key file of 32 random bytes, as `head -c 32 /dev/urandom > key` makes one.
    func keyFile() -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("logbook-key-\(UUID().uuidString)")
            .path
        _ = FileManager.default.createFile(
            atPath: path, contents: Data((0..<32).map { _ in UInt8.random(in: 0...255) }))
        return path
    }

    /// `rekey` encrypts a store and changes its key; every reading command takes `--key-file`,
    /// and without it (or with another key) says why in one line.
    @Test func rekeyEncryptsAStoreAndEveryCommandReadsItWithItsKey() throws {
        let store = try makeStore()
        let (first, second) = (keyFile(), keyFile())
        defer { for p in [store, first, second] { try? FileManager.default.removeItem(atPath: p) } }
        let encrypt = try run(["rekey", store, "--new-key-file", first])
        #expect(encrypt.status == 0 && encrypt.out.contains("encrypted=true"), "\(encrypt.err)")
        for name in try FileManager.default.contentsOfDirectory(atPath: store) {
            let data = FileManager.default.contents(atPath: store + "/" + name) ?? Data()
            #expect(data.range(of: Data("Bob".utf8)) == nil, "\(name) holds a name in clear")
        }
        let locked = try run(["count", store, "--entity", "Person"])
        #expect(locked.status != 0 && locked.err.contains("encrypted") && locked.err.contains("--key-file"))
        #expect(locked.err.split(separator: "\n").count == 1)
        #expect(try run(["count", store, "--entity", "Person", "--key-file", first]).out == "4\n")
        #expect(try run(["schema", store, "--key-file", first]).out.hasPrefix("entity Person"))
        #expect(
            try run(["query", store, "--entity", "Person", "--where", "age > 40", "--key-file", first]).out.contains(
                "Bob"))
        let verify = try run(["verify", store, "--key-file", first])
        #expect(verify.status == 0 && verify.out.contains("sound"), "\(verify.out)\(verify.err)")
        let stats = try run(["stats", store, "--key-file", first]).out
        #expect(stats.contains("Person (keyspace 1): 4 records") && stats.contains("encrypted: yes"))
        #expect(try run(["export", store, "--json", "--key-file", first]).out.contains("\"Bob\""))
        #expect(try run(["compact", store, "--key-file", first]).status == 0)
        #expect(try run(["history", store, "--key-file", first]).status == 0)

        let rekey = try run(["rekey", store, "--key-file", first, "--new-key-file", second])
        #expect(rekey.status == 0, "\(rekey.err)")
        let wrong = try run(["count", store, "--entity", "Person", "--key-file", first])
        #expect(wrong.status != 0 && wrong.err.contains("not the store's key"))
        #expect(try run(["count", store, "--entity", "Person", "--key-file", second]).out == "4\n")
        let short = keyFile()
        defer { try? FileManager.default.removeItem(atPath: short) }
        #expect(FileManager.default.createFile(atPath: short, contents: Data([1, 2, 3])))
        let bad = try run(["count", store, "--entity", "Person", "--key-file", short])
        #expect(bad.status != 0 && bad.err.contains("exactly 32 bytes"))
        #expect(try run(["rekey", store, "--key-file", second]).status != 0)  // neither a new key nor --decrypt
        #expect(try run(["rekey", store, "--key-file", second, "--decrypt"]).status == 0)
        #expect(try run(["count", store, "--entity", "Person"]).out == "4\n")
    }

    @Test func statsNameEntitiesAndIndexes() throws {
        let store = try makeStore()
        defer { try? FileManager.default.removeItem(atPath: store) }
        let r = try run(["stats", store])
        #expect(r.status == 0, "\(r.err)")
        #expect(r.out.contains("Person (keyspace 1): 4 records"), "\(r.out)")
        #expect(r.out.contains("(Person.age): 4 entries") && r.out.contains("pinned snapshots: 0"), "\(r.out)")
        #expect(r.out.contains("live bytes: ") && r.out.contains("checkpoint: "))
        let missing = try run(["stats", store + "-nope"])
        #expect(missing.status != 0 && missing.err.hasPrefix("logbook: "))
    }

    /// `logbook compact` beside a writing container (in this process): it compacts, and the
    /// container goes on saving and fetching over the compacted store; `rekey`, which must be
    /// the only writer, waits for it to close (a clear error).
    @Test func compactBesideAWriterWorksAndRekeyWaitsForIt() throws {
        let store = try makeStore()
        defer { try? FileManager.default.removeItem(atPath: store) }
        let model = try ManagedObjectModel(recordedIn: store)
        let container = try PersistentContainer(name: "People", model: model, directory: store)
        let context = container.newContext(concurrencyType: .confinement)
        let ann = try #require(try context.fetch(FetchRequest<ManagedObject>(entityName: "Person")).first)
        try ann.setValue(32, forKey: "age")
        try context.save()
        let r = try run(["compact", store])
        #expect(r.status == 0, "\(r.err)")
        // The container saves after the other process's compaction, and reads all of it.
        let eve = try context.insertNewObject(forEntityName: "Person")
        try eve.setValue("Eve", forKey: "name")
        try context.save()
        #expect(try context.count(for: FetchRequest<ManagedObject>(entityName: "Person")) == 5)
        #expect(try run(["count", store, "--entity", "Person"]).out == "5\n")
        let reader = container.newContext(concurrencyType: .confinement)
        let ages = try reader.fetch(FetchRequest<ManagedObject>(entityName: "Person")).compactMap {
            try $0.value(forKey: "age") as? Int32
        }
        #expect(ages.sorted() == [28, 32, 45, 60])
        let keyFile = store + ".key"
        defer { try? FileManager.default.removeItem(atPath: keyFile) }
        FileManager.default.createFile(atPath: keyFile, contents: Data((0..<32).map { UInt8($0) }))
        let rekey = try run(["rekey", store, "--new-key-file", keyFile])
        #expect(rekey.status != 0, "\(rekey.out)")
        #expect(rekey.err.hasPrefix("logbook: ") && rekey.err.split(separator: "\n").count == 1, "\(rekey.err)")
        #expect(rekey.err.contains("another process"), "\(rekey.err)")
        try container.close()
        #expect(try run(["compact", store]).status == 0)
    }

    @Test func compactRewritesAStore() throws {
        let store = try makeStore()
        defer { try? FileManager.default.removeItem(atPath: store) }
        let r = try run(["compact", store])
        #expect(r.status == 0 && r.out.hasPrefix("compact seconds="))
        #expect(try run(["count", store, "--entity", "Person"]).out == "4\n")
    }

    func files(_ store: String) throws -> [String: Data] {
        var out: [String: Data] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: store) {
            out[name] = try Data(contentsOf: URL(fileURLWithPath: store + "/" + name))
        }
        return out
    }

    func flipByte(in path: String, at offset: Int) throws {
        var data = try Data(contentsOf: URL(fileURLWithPath: path))
        data[offset] ^= 0x5A
        try data.write(to: URL(fileURLWithPath: path))
    }

    @Test func verifyTellsSoundDamagedAndNotAStoreApartAndChangesNothing() throws {
        let store = try makeStore()
        defer { try? FileManager.default.removeItem(atPath: store) }
        let before = try files(store)
        let sound = try run(["verify", store])
        #expect(sound.status == 0, "\(sound.err)")
        #expect(sound.out.contains("records: 6") && sound.out.hasSuffix("sound\n"), "\(sound.out)")
        #expect(try files(store) == before, "verify never changes the store")
        // After a compaction the rewritten journal still agrees with the checkpoint.
        #expect(try run(["compact", store]).status == 0)
        #expect(try run(["verify", store]).status == 0)

        // A damaged record in the journal: exit 1, naming the file and offset.
        let segment = try FileManager.default.contentsOfDirectory(atPath: store).filter { $0.hasSuffix(".lbj") }
            .max { try! files(store)[$0]!.count < files(store)[$1]!.count }!
        try flipByte(in: store + "/" + segment, at: 40)
        let damaged = try run(["verify", store])
        #expect(damaged.status == 1, "\(damaged)")
        #expect(damaged.err.contains(segment) && damaged.err.contains("offset"), "\(damaged.err)")
        #expect(damaged.err.split(separator: "\n").count == 1)
        try flipByte(in: store + "/" + segment, at: 40)
        #expect(try run(["verify", store]).status == 0)

        // A damaged checkpoint: the store still opens (from the journal), verify reports it.
        let checkpoint = try FileManager.default.contentsOfDirectory(atPath: store).first { $0.hasSuffix(".lbc") }!
        try flipByte(in: store + "/" + checkpoint, at: 40)
        let badCheckpoint = try run(["verify", store])
        #expect(badCheckpoint.status == 1 && badCheckpoint.err.contains("checkpoint"), "\(badCheckpoint)")

        // Not a store, or nothing there: exit 2.
        let empty = FileManager.default.temporaryDirectory.appendingPathComponent("logbook-empty-\(UUID().uuidString)")
            .path
        try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: true)
        try Data("hello".utf8).write(to: URL(fileURLWithPath: empty + "/notes.txt"))
        defer { try? FileManager.default.removeItem(atPath: empty) }
        let notAStore = try run(["verify", empty])
        #expect(notAStore.status == 2 && notAStore.err.hasPrefix("logbook: "), "\(notAStore)")
        #expect(try run(["verify", empty + "/missing"]).status == 2)
    }

    @Test func exportStreamsEveryObjectAsJSONLines() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("logbook-export-\(UUID().uuidString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let model = try ManagedObjectModel {
            EntityDescription("Manager") {
                AttributeDescription("name", .string)
                RelationshipDescription("employees", to: "Employee", inverse: "manager", toMany: true)
            }
            EntityDescription("Employee") {
                AttributeDescription("name", .string)
                AttributeDescription("hired", .date, optional: true)
                RelationshipDescription("manager", to: "Manager", inverse: "employees")
            }
        }
        let container = try PersistentContainer(name: "Staff", model: model, directory: dir)
        let context = container.newContext(concurrencyType: .confinement)
        let boss = try context.insertNewObject(forEntityName: "Manager")
        try boss.setValue("Boss", forKey: "name")
        for i in 0..<2500 {
            let e = try context.insertNewObject(forEntityName: "Employee")
            try e.setValue("E\(i)", forKey: "name")
            if i % 2 == 0 { try e.setValue(boss, forKey: "manager") }
        }
        try context.save()
        try container.close()
        let r = try run(["export", dir, "--json"])
        #expect(r.status == 0, "\(r.err)")
        // JSON Lines: the header with the schema, then an object per line.
        let lines = try r.out.split(separator: "\n").map {
            try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] ?? [:]
        }
        let schema = (lines.first?["schema"] as? [String: Any])?["entities"] as? [[String: Any]] ?? []
        #expect(schema.map { $0["name"] as? String } == ["Manager", "Employee"])
        let objects = lines.dropFirst()
        let managers = objects.filter { $0["entity"] as? String == "Manager" }
        let employees = objects.filter { $0["entity"] as? String == "Employee" }.map {
            $0["values"] as? [String: Any] ?? [:]
        }
        #expect(managers.count == 1 && employees.count == 2500)
        #expect(employees.map { $0["name"] as? String } == (0..<2500).map { "E\($0)" }, "in insertion order")
        let bossLine = managers.first ?? [:]
        #expect(((bossLine["values"] as? [String: Any])?["employees"] as? [String])?.count == 1250)
        #expect(employees[0]["manager"] as? String == bossLine["id"] as? String)
        #expect(employees[1]["manager"] is NSNull && employees[1]["hired"] is NSNull)
        let usage = try run(["export", dir])
        #expect(usage.status != 0 && usage.err.contains("--json"))
    }

    /// Phase lines: `PHASE key=value …` with the keys the workloads promise, or JSON objects.
    @Test func benchWorkloadsPrintPhaseLines() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("logbook-bench-\(UUID().uuidString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        func phases(_ out: String) -> [String: [String: String]] {
            var result: [String: [String: String]] = [:]
            for line in out.split(separator: "\n") {
                let parts = line.split(separator: " ")
                var fields: [String: String] = [:]
                for p in parts.dropFirst() {
                    let kv = p.split(separator: "=", maxSplits: 1)
                    if kv.count == 2 { fields[String(kv[0])] = String(kv[1]) }
                }
                result[String(parts[0])] = fields
            }
            return result
        }
        let populate = try run(["bench", "populate", "--store", dir + "/w1", "--count", "3000"])
        #expect(populate.status == 0, "\(populate.err)")
        let p = phases(populate.out)["populate"]
        #expect(
            p?["records"] == "3000" && p?["seconds"] != nil && p?["peak_rss_mb"] != nil
                && Int(p?["file_bytes"] ?? "") ?? 0 > 0, "\(populate.out)")
        let fetch = try run(["bench", "fetch", "--store", dir + "/w1", "--count", "3000"])
        #expect(fetch.status == 0, "\(fetch.err)")
        let f = phases(fetch.out)
        #expect(Set(f.keys) == ["open", "fetch_sorted", "fetch_range", "count"], "\(fetch.out)")
        #expect(
            f["fetch_sorted"]?["records"] == "3000" && f["fetch_range"]?["records"] == "300"
                && f["count"]?["records"] == "3000")
        #expect(f["fetch_range"]?["first_seconds"] != nil && f["count"]?["first_seconds"] != nil)
        // Every phase says the peak memory of its process.
        #expect(f.values.allSatisfy { Int($0["peak_rss_mb"] ?? "") ?? 0 > 0 }, "\(fetch.out)")
        let batch = try run(["bench", "populate", "--batch", "--store", dir + "/batch", "--count", "3000", "--json"])
        let object = try JSONSerialization.jsonObject(with: Data(batch.out.utf8)) as? [String: Any]
        #expect(object?["phase"] as? String == "populate_batch" && object?["records"] as? Int == 3000, "\(batch.out)")
        let commits = try run([
            "bench", "commits", "--store", dir + "/w7", "--commits", "5", "--per", "2", "--durability", "normal"
        ])
        #expect(
            phases(commits.out)["commits"]?["records"] == "10" && phases(commits.out)["commits"]?["commits"] == "5",
            "\(commits.out)")
        let unknown = try run(["bench", "nothing"])
        #expect(unknown.status != 0 && unknown.err.contains("unknown workload"))
        let none = try run(["bench", "populate", "--durability", "sometimes"])
        #expect(none.status != 0 && none.err.contains("durability"))
    }
}

extension ToolTests {
    /// `logbook history` prints, per transaction, what `PersistentContainer.history(after:)`
    /// returns: version, time, author, context name and the counts per entity; `--since` and
    /// `--json` select and shape it; `stats` shows the space history takes.
    @Test func historyPrintsTheTransactionsTheLibraryRecorded() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("logbook-tool-\(UUID().uuidString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let model = try ManagedObjectModel {
            EntityDescription("Person") { AttributeDescription("name", .string) }
        }
        var options = ContainerOptions()
        options.persistentHistoryTracking = true
        let container = try PersistentContainer(name: "People", model: model, directory: dir, options: options)
        let context = container.newContext(concurrencyType: .confinement)
        context.name = "main"
        context.transactionAuthor = "tests"
        var people: [ManagedObject] = []
        for name in ["Ann", "Bob", "Cy"] {
            let p = try context.insertNewObject(forEntityName: "Person")
            try p.setValue(name, forKey: "name")
            people.append(p)
        }
        try context.save()
        try people[0].setValue("Anne", forKey: "name")
        context.delete(people[2])
        context.transactionAuthor = nil
        try context.save()
        let history = try container.history(after: nil)
        try container.close()
        #expect(history.count == 2)

        let text = try run(["history", dir])
        #expect(text.status == 0)
        let lines = text.out.split(separator: "\n").map(String.init)
        #expect(lines.count == 2)
        #expect(lines[0].hasPrefix("version=\(history[0].token.version) time="))
        #expect(lines[0].hasSuffix(" author=tests context=main Person +3 ~0 -0"))
        #expect(lines[1].hasSuffix(" author=- context=main Person +0 ~1 -1"))

        let since = try run(["history", dir, "--since", "\(history[0].token.version)", "--json"])
        #expect(since.status == 0)
        let parsed = try JSONSerialization.jsonObject(with: Data(since.out.utf8)) as? [[String: Any]]
        #expect(parsed?.count == 1)
        #expect(parsed?.first?["version"] as? Int == Int(history[1].token.version))
        #expect(parsed?.first?["author"] is NSNull && parsed?.first?["contextName"] as? String == "main")
        let counts = (parsed?.first?["entities"] as? [String: Any])?["Person"] as? [String: Int]
        #expect(counts == ["inserted": 0, "updated": 1, "deleted": 1])

        let stats = try run(["stats", dir])
        #expect(stats.out.contains("history (keyspace 65535): 2 transactions, "))
    }
}

extension ToolTests {
    /// `count --as-of` and `query --as-of` read the store as it was at a version: on a W1 store
    /// rewritten by `bench update` (W5: every Item's `done` set, every name changed, then every
    /// `done` cleared), the version before the update still counts half the Items not done and
    /// the old names; after a compaction that version is gone, with a clear error.
    @Test func asOfReadsTheStoreBeforeAnUpdate() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("logbook-asof-\(UUID().uuidString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let store = dir + "/w1"
        #expect(try run(["bench", "populate", "--store", store, "--count", "3000"]).status == 0)
        func version() throws -> UInt64? {
            let stats = try run(["stats", store]).out
            return stats.split(separator: "\n").first { $0.hasPrefix("version: ") }.flatMap {
                UInt64($0.dropFirst("version: ".count))
            }
        }
        let before = try #require(try version())
        #expect(try run(["bench", "update", "--store", store]).status == 0)
        let after = try #require(try version())
        #expect(after > before)
        #expect(try run(["stats", store]).out.contains("oldest readable version: 0 "))

        let done = ["count", store, "--entity", "Item", "--where", "done == NO"]
        #expect(try run(done).out == "3000\n")
        #expect(try run(done + ["--as-of", "\(before)"]).out == "1500\n")
        #expect(try run(["count", store, "--entity", "Item", "--as-of", "0"]).out == "0\n")
        let first = ["query", store, "--entity", "Item", "--sort", "createdAt", "--limit", "1", "--json"]
        #expect(try run(first + ["--as-of", "\(before)"]).out.contains("\"name\": \"Item 1\""))
        #expect(try run(first).out.contains("\"name\": \"Renamed 1\""))
        // Its date, written with every digit it needs, reads back bit for bit (the populate's
        // dates are 1,700,000,000 s since 1970 plus i ms).
        let row = try #require(
            (try JSONSerialization.jsonObject(with: Data(try run(first).out.utf8)) as? [[String: Any]])?.first)
        let written = try #require(row["createdAt"] as? String)
        let parts = written.dropLast().split(separator: ".", maxSplits: 1)
        let whole = try #require(ISO8601DateFormatter().date(from: String(parts[0]) + "Z"))
        let interval = whole.timeIntervalSinceReferenceDate + (parts.count > 1 ? Double("0." + parts[1])! : 0)
        let itemDates = (0...1).map { Date(timeIntervalSince1970: 1_700_000_000 + Double($0) / 1000) }
        #expect(
            itemDates.contains { $0.timeIntervalSinceReferenceDate.bitPattern == interval.bitPattern },
            "\(written) is none of \(itemDates.map(\.timeIntervalSinceReferenceDate))")
        let future = try run(done + ["--as-of", "\(after + 1)"])
        #expect(future.status != 0 && future.err.contains("after the last commit"))

        #expect(try run(["compact", store]).status == 0)
        let gone = try run(done + ["--as-of", "\(before)"])
        #expect(gone.status != 0 && gone.err.contains("compacted away"))
        #expect(try run(done + ["--as-of", "\(try #require(try version()))"]).out == "3000\n")

        // With history recorded (`--history`), the versions it reaches stay readable through
        // the update's own compactions and `logbook compact`.
        let tracked = dir + "/tracked"
        #expect(try run(["bench", "populate", "--store", tracked, "--count", "3000", "--history"]).status == 0)
        let history = try run(["history", tracked, "--json"])
        let populated = try #require(
            (try JSONSerialization.jsonObject(with: Data(history.out.utf8)) as? [[String: Any]])?.last?["version"]
                as? Int)
        #expect(try run(["bench", "update", "--store", tracked, "--history"]).status == 0)
        #expect(try run(["compact", tracked]).status == 0)
        let trackedDone = ["count", tracked, "--entity", "Item", "--where", "done == NO"]
        #expect(try run(trackedDone).out == "3000\n")
        #expect(try run(trackedDone + ["--as-of", "\(populated)"]).out == "1500\n")
        // The populate and W5's three saves.
        #expect(try run(["history", tracked]).out.split(separator: "\n").count == 4)
    }
}

extension ToolTests {
    /// A read-only container in this process follows `logbook bench commits` writing the same
    /// store in another, in small segments and compacting every 100 saves: `remoteChanges()`
    /// delivers each of its transactions once, in order, with its inserts, across the rollovers
    /// and compactions; merged into a context, they show in its fetches.
    @Test func aFollowerReceivesEveryTransactionOfAWriterInAnotherProcess() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("logbook-feed-\(UUID().uuidString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let store = dir + "/items"
        // A store with 200 saves made before history was recorded, in small segments: the
        // writer's compactions below fold them (they are before the history it keeps).
        let first = try run([
            "bench", "commits", "--store", store, "--commits", "200", "--per", "1", "--segment-size", "8192"
        ])
        #expect(first.status == 0, "\(first.err)")
        var options = ContainerOptions()
        options.readOnly = true
        let follower = try PersistentContainer(
            name: "follower", model: ManagedObjectModel(recordedIn: store), directory: store, options: options)
        let start = follower.currentHistoryToken
        let context = follower.newContext(concurrencyType: .confinement)
        let items = FetchRequest<ManagedObject>(entityName: "Item")
        #expect(try context.count(for: items) == 200)
        let segmentsBefore = follower.store.statistics().segments.map(\.number)

        let writer = Process()
        writer.executableURL = URL(fileURLWithPath: Self.tool)
        writer.arguments = [
            "bench", "commits", "--store", store, "--commits", "300", "--per", "3", "--history", "--durability",
            "normal", "--segment-size", "8192", "--compact-every", "100"
        ]
        writer.standardOutput = FileHandle.nullDevice
        writer.standardError = FileHandle.nullDevice
        try writer.run()
        defer { writer.waitUntilExit() }

        let follow = Task { () throws -> [PersistentHistoryTransaction] in
            var received: [PersistentHistoryTransaction] = []
            for try await transaction in follower.remoteChanges(after: start, pollInterval: .seconds(5)) {
                received.append(transaction)
                if received.count == 300 { break }
            }
            return received
        }
        // A watchdog: a follower that misses a transaction would wait for ever.
        let watchdog = Task {
            try await Task.sleep(for: .seconds(60))
            follow.cancel()
        }
        let received = try await follow.value
        watchdog.cancel()
        #expect(received.count == 300)
        let versions = received.map(\.token.version)
        #expect(versions == versions.sorted() && Set(versions).count == 300)
        #expect(versions.first! > start.version)
        #expect(received.allSatisfy { t in t.changes.count == 3 && t.changes.allSatisfy { $0.changeType == .insert } })
        for transaction in received { context.mergeChanges(fromContextDidSave: transaction.contextChanges) }
        #expect(try context.count(for: items) == 200 + 900)
        // The writer's 8 KiB segments rolled over while it was followed, and its compactions
        // replaced the segments the follower had opened with.
        let segmentsAfter = follower.store.statistics().segments.map(\.number)
        #expect(segmentsAfter.count > 3)
        #expect(!segmentsAfter.starts(with: segmentsBefore))
        try follower.close()
    }
}

extension ToolTests {
    /// A read-only container that observes remote changes follows `logbook bench commits`
    /// writing in another process: its remote-change notifications reach the writer's last
    /// version, and a fetched-results controller over a context that merges automatically ends
    /// with every object the writer inserted, with no call of the app's own.
    @Test func aReadOnlyContainerFollowsAWriterInAnotherProcess() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("logbook-follow-\(UUID().uuidString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let store = dir + "/items"
        let first = try run(["bench", "commits", "--store", store, "--commits", "10", "--per", "1"])
        #expect(first.status == 0, "\(first.err)")
        var options = ContainerOptions()
        options.readOnly = true
        options.observesRemoteChanges = true
        let follower = try PersistentContainer(
            name: "follower", model: ManagedObjectModel(recordedIn: store), directory: store, options: options)
        let context = follower.newContext(concurrencyType: .privateQueue)
        context.automaticallyMergesChangesFromOtherContexts = true
        let controller = context.performAndWait {
            let c = FetchedResultsController(
                fetchRequest: FetchRequest<ManagedObject>(entityName: "Item"), managedObjectContext: context)
            try? c.performFetch()
            return c
        }
        #expect(context.performAndWait { controller.fetchedObjects?.count } == 10)
        let changes = follower.remoteChangeNotifications()

        let writer = Process()
        writer.executableURL = URL(fileURLWithPath: Self.tool)
        writer.arguments = [
            "bench", "commits", "--store", store, "--commits", "200", "--per", "2", "--history", "--durability",
            "normal"
        ]
        writer.standardOutput = FileHandle.nullDevice
        writer.standardError = FileHandle.nullDevice
        try writer.run()
        writer.waitUntilExit()
        #expect(writer.terminationStatus == 0)
        let last = try PersistentContainer(
            name: "check", model: ManagedObjectModel(recordedIn: store), directory: store,
            options: {
                var o = ContainerOptions()
                o.readOnly = true
                return o
            }()
        ).currentHistoryToken
        let heard = Task { () -> Int in
            var notifications = 0
            for await change in changes {
                notifications += 1
                if change.historyToken >= last { break }
            }
            return notifications
        }
        let watchdog = Task {
            try await Task.sleep(for: .seconds(30))
            heard.cancel()
        }
        let notifications = await heard.value
        watchdog.cancel()
        #expect(notifications >= 1)
        context.performAndWait {}
        #expect(context.performAndWait { controller.fetchedObjects?.count } == 10 + 400)
        try follower.close()
    }
}

extension ToolTests {
    /// W15: every commit of the writer process reaches the follower's remote-change handler.
    /// `verify`, `count` and `stats` on a store another process is writing: each answers from
    /// one version (verify compared a checkpoint's state with a journal read a moment later,
    /// and called the store damaged).
    @Test func verifyAndCountBesideAWriterInAnotherProcess() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("logbook-beside-\(UUID().uuidString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let store = dir + "/store"
        #expect(try run(["bench", "populate", "--count", "500", "--store", store]).status == 0)
        let writer = Process()
        writer.executableURL = URL(fileURLWithPath: Self.tool)
        writer.arguments = ["bench", "commits", "--store", store, "--commits", "100000"]
        writer.standardOutput = FileHandle.nullDevice
        writer.standardError = FileHandle.nullDevice
        try writer.run()
        defer {
            kill(writer.processIdentifier, SIGKILL)
            writer.waitUntilExit()
        }
        var versions: [Int] = []
        for _ in 0..<2 {
            let verify = try run(["verify", store])
            #expect(verify.status == 0 && verify.out.contains("sound"), "\(verify.out)\(verify.err)")
            if let line = verify.out.split(separator: "\n").first(where: { $0.hasPrefix("commits replayed") }),
                let v = line.split(separator: " ").last.flatMap({ Int($0) })
            {
                versions.append(v)
            }
            let count = try run(["count", store, "--entity", "Item"])
            #expect(
                count.status == 0
                    && Int(count.out.trimmingCharacters(in: .whitespacesAndNewlines)).map { $0 >= 500 } == true)
        }
        #expect(writer.isRunning, "the writer ran beside every check")
        #expect(Set(versions).count > 1, "the store changed between the checks: \(versions)")
    }

    @Test func followMeasuresEveryCommitOfAWriterInAnotherProcess() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("logbook-w15-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let r = try run(["bench", "follow", "--store", dir + "/store", "--commits", "50"])
        #expect(r.status == 0, "\(r.err)")
        let line = try #require(r.out.split(separator: "\n").first { $0.hasPrefix("follow ") })
        #expect(line.contains("commits=50 received=50"), "\(line)")
        #expect(line.contains("p50_ms=") && line.contains("p99_ms="))
    }

    /// `logbook sync`: setup on the server (as its owner), a first push of a store, its status,
    /// and a pull into another store, against the test server (LOGBOOK_POSTGRES_URL, started by
    /// .ci/test); the scope role is made with psql.
    @Test func syncSetsUpPushesAndPullsThroughTheServer() throws {
        let admin = try #require(
            ProcessInfo.processInfo.environment["LOGBOOK_POSTGRES_URL"], "run the tests with .ci/test (a server)")
        let suffix = UUID().uuidString.prefix(8).lowercased()
        let schema = "cli_\(suffix)"
        let role = "cli_\(suffix)"
        func psql(_ sql: String) throws -> String {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            p.arguments = ["psql", admin, "-At", "-c", sql]
            let out = Pipe()
            p.standardOutput = out
            p.standardError = Pipe()
            try p.run()
            let data = out.fileHandleForReading.readDataToEndOfFile()
            p.waitUntilExit()
            return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        }
        _ = try psql("CREATE ROLE \(role) LOGIN PASSWORD 'pw'")
        defer {
            _ = try? psql("DROP SCHEMA IF EXISTS \(schema) CASCADE")
            _ = try? psql("DROP ROLE IF EXISTS \(role)")
        }
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("logbook-sync-\(UUID().uuidString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: base) }
        let a = base + "/a"
        let b = base + "/b"
        for (dir, n) in [(a, "6"), (b, "1")] {
            let made = try run(["bench", "commits", "--store", dir, "--commits", n, "--per", "2"])
            #expect(made.status == 0, "\(made.err)")
        }
        let url = URL(string: admin)!
        let scoped = "postgres://\(role):pw@\(url.host!):\(url.port ?? 5432)\(url.path)"
        let setup = try run(["sync", "setup", a, "--postgres", admin, "--schema", schema, "--scope", role])
        #expect(setup.status == 0, "\(setup.err)")
        let push = try run(["sync", "push", a, "--postgres", scoped, "--schema", schema, "--json"])
        #expect(push.status == 0, "\(push.err)")
        #expect(
            push.out.contains("\"pushedTransactions\": 1") && push.out.contains("\"pushedChanges\": 12"), "\(push.out)")
        let status = try run(["sync", "status", a, "--postgres", scoped, "--schema", schema])
        #expect(status.status == 0 && status.out.contains("to_push=0"), "\(status.out) \(status.err)")
        #expect(try psql("SELECT count(*) FROM \(schema).\"Item\"") == "12")
        let pull = try run(["sync", "pull", b, "--postgres", scoped, "--schema", schema])
        #expect(pull.status == 0, "\(pull.err)")
        let count = try run(["count", b, "--entity", "Item"])
        #expect(count.out.trimmingCharacters(in: .whitespacesAndNewlines).hasSuffix("14"), "\(count.out)")
        // A wrong password: one line, no password in it, a non-zero status.
        let wrong = try run([
            "sync", "status", a, "--postgres", "postgres://\(role):WRONGPW@\(url.host!):\(url.port ?? 5432)\(url.path)",
            "--schema", schema
        ])
        #expect(
            wrong.status != 0 && wrong.err.contains("authentication") && !wrong.err.contains("WRONGPW"), "\(wrong.err)")
    }
}
