// PeerRunner: W1 of ../shared/benchmarks.md on Logbook and on GRDB.swift 7.10.0 (SQLite,
// DatabasePool, WAL, its defaults), in one run, then one table: workload, Logbook, GRDB, ratio.
//
//   swift run -c release --package-path Benchmarks PeerRunner [--count N] [--repeat R]
import Foundation
import GRDB
import Logbook
import LogbookEngine

let arguments = CommandLine.arguments
func option(_ name: String, _ fallback: Int) -> Int {
    guard let i = arguments.firstIndex(of: name), i + 1 < arguments.count, let v = Int(arguments[i + 1]) else { return fallback }
    return v
}
let count = option("--count", 1_000_000)
let repeats = option("--repeat", 3)
let base = 1_700_000_000.0

func now() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}

func freshDirectory(_ name: String) -> String {
    let dir = FileManager.default.temporaryDirectory.appendingPathComponent("peer-\(name)-\(UUID().uuidString)").path
    try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    return dir
}

func directoryBytes(_ path: String) -> Int {
    let files = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
    return files.reduce(0) { total, f in
        total + (((try? FileManager.default.attributesOfItem(atPath: path + "/" + f))?[.size] as? Int) ?? 0)
    }
}

func median(_ xs: [Double]) -> Double { xs.sorted()[xs.count / 2] }

// MARK: Logbook

final class Item: ManagedObject {
    @Logbook.Attribute("name") var name: String
    @Logbook.Attribute("createdAt") var createdAt: Date
    @Logbook.Attribute("done") var done: Bool
}

func logbookModel() throws -> ManagedObjectModel {
    try ManagedObjectModel {
        EntityDescription("Item", class: Item.self) {
            AttributeDescription("name", .string)
            AttributeDescription("createdAt", .date, indexed: true)
            AttributeDescription("done", .bool, default: false)
        }
    }
}

/// W1 through a context: N managed objects, one save (durability full).
func logbookPopulate() throws -> (seconds: Double, bytes: Int) {
    let dir = freshDirectory("logbook")
    defer { try? FileManager.default.removeItem(atPath: dir) }
    let start = now()
    let container = try PersistentContainer(name: "Items", model: logbookModel(), directory: dir + "/store")
    let context = container.newContext(concurrencyType: .confinement)
    for i in 1...count {
        let item = try context.insert(Item.self)
        item.name = "Item \(i)"
        item.createdAt = Date(timeIntervalSince1970: base + Double(i) / 1000)
        item.done = i % 2 == 0
    }
    try context.save()
    let seconds = now() - start
    context.reset()
    try container.close()
    return (seconds, directoryBytes(dir + "/store"))
}

// MARK: GRDB

struct ItemRecord: Codable, PersistableRecord {
    static let databaseTableName = "item"
    static let databaseDateEncodingStrategy = DatabaseDateEncodingStrategy.timeIntervalSince1970
    var name: String
    var createdAt: Date
    var done: Bool
}

func grdbPool(_ dir: String) throws -> DatabasePool {
    let pool = try DatabasePool(path: dir + "/db.sqlite")
    try pool.write { db in
        try db.execute(sql: "CREATE TABLE item (id INTEGER PRIMARY KEY, name TEXT NOT NULL, createdAt REAL NOT NULL, done INTEGER NOT NULL)")
        try db.execute(sql: "CREATE INDEX item_createdAt ON item(createdAt)")
    }
    return pool
}

/// W1 with a cached prepared statement (SQLite's fastest insert path).
func grdbStatement() throws -> (seconds: Double, bytes: Int) {
    let dir = freshDirectory("grdb")
    defer { try? FileManager.default.removeItem(atPath: dir) }
    let start = now()
    let pool = try grdbPool(dir)
    try pool.write { db in
        let statement = try db.cachedStatement(sql: "INSERT INTO item (name, createdAt, done) VALUES (?, ?, ?)")
        for i in 1...count {
            try statement.execute(arguments: ["Item \(i)", base + Double(i) / 1000, i % 2 == 0])
        }
    }
    let seconds = now() - start
    try pool.close()
    return (seconds, directoryBytes(dir))
}

/// W1 with Codable records (the typical user path).
func grdbRecords() throws -> (seconds: Double, bytes: Int) {
    let dir = freshDirectory("grdb")
    defer { try? FileManager.default.removeItem(atPath: dir) }
    let start = now()
    let pool = try grdbPool(dir)
    try pool.write { db in
        for i in 1...count {
            try ItemRecord(name: "Item \(i)", createdAt: Date(timeIntervalSince1970: base + Double(i) / 1000), done: i % 2 == 0).insert(db)
        }
    }
    let seconds = now() - start
    try pool.close()
    return (seconds, directoryBytes(dir))
}

// MARK: Run

var logbook: [Double] = [], statement: [Double] = [], records: [Double] = []
var logbookBytes = 0, statementBytes = 0
for round in 1...repeats {
    let l = try logbookPopulate()
    logbook.append(l.seconds); logbookBytes = l.bytes
    let s = try grdbStatement()
    statement.append(s.seconds); statementBytes = s.bytes
    if round == 1 || repeats <= 3 { records.append(try grdbRecords().seconds) }
    FileHandle.standardError.write(Data("round \(round): logbook \(l.seconds) s, grdb statement \(s.seconds) s\n".utf8))
}

func row(_ name: String, _ a: Double, _ b: Double, unit: String = "s") -> String {
    String(format: "| %@ | %.3f %@ | %.3f %@ | %.2f× |", name, a, unit, b, unit, b / a)
}
print("N = \(count), medians of \(repeats) runs")
print("| workload | Logbook | GRDB | GRDB ÷ Logbook |")
print("|---|---|---|---|")
print(row("W1 populate vs cached statement", median(logbook), median(statement)))
print(row("W1 populate vs Codable records", median(logbook), median(records)))
print(String(format: "| W1 store size | %.1f MB | %.1f MB | %.2f× |", Double(logbookBytes) / 1e6, Double(statementBytes) / 1e6, Double(statementBytes) / Double(logbookBytes)))
