// W11 and W12 of docs/benchmarks.md on both libraries: queries no index answers (W11, on the
// W1 stores, each library in a new process so that its peak memory is its own), and fetches
// that a relationship (foreign-key) index or a compound index answers (W12).
import Foundation
import GRDB
import LogbookEngine
import LogbookGraph

/// The peak resident memory of this process, in MB (VmHWM).
func peakRSSMegabytes() -> Double {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return .nan }
    for line in status.split(separator: "\n") where line.hasPrefix("VmHWM:") {
        let kb = line.split(separator: " ").compactMap { Double($0) }.first ?? .nan
        return kb / 1024
    }
    return .nan
}

/// One untimed run, then the median of ten.
func medianOfTen(_ body: () throws -> Int) rethrows -> (seconds: Double, records: Int) {
    var n = try body()
    var times: [Double] = []
    for _ in 0..<10 {
        let t = now()
        n = try body()
        times.append(now() - t)
    }
    return (median(times), n)
}

/// `--phase logbook-w11`: the three W11 queries on the Logbook W1 store.
func logbookW11Phase(_ path: String) throws {
    let container = try PersistentContainer(
        name: "Items", model: logbookModel(), directory: path, options: peerOptions())
    let context = container.newContext(concurrencyType: .confinement)
    func fetchNames(_ format: String) throws -> Int {
        var request = FetchRequest<Item>()
        request.predicate = try FetchPredicate(format: format)
        var chars = 0
        let items = try context.fetch(request)
        for item in items { chars &+= item.name.utf8.count }
        context.reset()
        return chars > 0 ? items.count : 0
    }
    var countRequest = FetchRequest<Item>()
    countRequest.predicate = try FetchPredicate(format: "done == YES")
    let c = try medianOfTen { try context.count(for: countRequest) }
    let contains = try medianOfTen { try fetchNames("name CONTAINS '99999'") }
    let mixed = try medianOfTen { try fetchNames("done == NO AND name LIKE 'Item 1*'") }
    print(
        "count=\(c.seconds) contains=\(contains.seconds) mixed=\(mixed.seconds) peak_rss_mb=\(peakRSSMegabytes()) "
            + "count_records=\(c.records) contains_records=\(contains.records) mixed_records=\(mixed.records)")
}

/// `--phase grdb-w11`: the same on the GRDB W1 database.
func grdbW11Phase(_ path: String) throws {
    let pool = try DatabasePool(path: path + "/db.sqlite")
    func fetchNames(_ sql: String) throws -> Int {
        let items = try pool.read { db in try ItemRecord.fetchAll(db, sql: sql) }
        var chars = 0
        for item in items { chars &+= item.name.utf8.count }
        return chars > 0 ? items.count : 0
    }
    let c = try medianOfTen {
        try pool.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM item WHERE done = 1")! }
    }
    let contains = try medianOfTen {
        try fetchNames("SELECT name, createdAt, done FROM item WHERE name LIKE '%99999%'")
    }
    let mixed = try medianOfTen {
        try fetchNames("SELECT name, createdAt, done FROM item WHERE done = 0 AND name LIKE 'Item 1%'")
    }
    print(
        "count=\(c.seconds) contains=\(contains.seconds) mixed=\(mixed.seconds) peak_rss_mb=\(peakRSSMegabytes()) "
            + "count_records=\(c.records) contains_records=\(contains.records) mixed_records=\(mixed.records)")
}

// MARK: W12

/// W12's data: N/1000 managers, N/10 employees; employee i has lastName "L(i % 100)", age
/// 20 + (i / 100) % 50 and manager i % managers.
var w12Employees: Int { max(1, count / 10) }
var w12Managers: Int { max(1, count / 1000) }

func staffModel() throws -> ManagedObjectModel {
    try ManagedObjectModel {
        EntityDescription("Manager") {
            AttributeDescription("name", .string)
            AttributeDescription("lastName", .string)
            RelationshipDescription("reports", to: "Employee", inverse: "manager", toMany: true)
        }
        EntityDescription("Employee", compoundIndexes: [["lastName", "age"]]) {
            AttributeDescription("firstName", .string)
            AttributeDescription("lastName", .string)
            AttributeDescription("age", .int32, optional: true)
            RelationshipDescription("manager", to: "Manager", inverse: "reports")
        }
    }
}

/// The W12 timings: employees of manager M7 (by object), of the manager named M7 (through
/// the relationship), and `lastName == 'L7' AND age > 40`.
struct W12: CustomStringConvertible {
    var byManager = 0.0
    var byPath = 0.0
    var compound = 0.0
    var records: [Int] = []
    var description: String { "\(byManager) \(byPath) \(compound) \(records)" }
}

/// A W12 Logbook store in `path` (the parent process builds it once, as W1's).
func logbookW12Store(_ path: String) throws {
    let container = try PersistentContainer(name: "Staff", model: staffModel(), directory: path, options: peerOptions())
    let context = container.newContext(concurrencyType: .confinement)
    var bosses: [ManagedObject] = []
    for m in 0..<w12Managers {
        let o = try context.insertNewObject(forEntityName: "Manager")
        try o.setValue("M\(m)", forKey: "name")
        try o.setValue("Boss\(m % 10)", forKey: "lastName")
        bosses.append(o)
    }
    for i in 0..<w12Employees {
        let e = try context.insertNewObject(forEntityName: "Employee")
        try e.setValue("E\(i)", forKey: "firstName")
        try e.setValue("L\(i % 100)", forKey: "lastName")
        try e.setValue(Int32(20 + (i / 100) % 50), forKey: "age")
        try e.setValue(bosses[i % w12Managers], forKey: "manager")
    }
    try context.save()
    try container.close()
}

/// `--phase logbook-w12`: open the W12 store (a new process, as for W2–W4), then the three
/// fetches; prints them.
func logbookW12(_ path: String) throws -> W12 {
    let container = try PersistentContainer(name: "Staff", model: staffModel(), directory: path, options: peerOptions())
    let reader = container.newContext(concurrencyType: .confinement)
    var managerRequest = FetchRequest<ManagedObject>(entityName: "Manager")
    managerRequest.predicate = try FetchPredicate(format: "name == 'M7'")
    let manager = try reader.fetch(managerRequest)[0]
    func run(_ predicate: FetchPredicate) throws -> (seconds: Double, records: Int) {
        var request = FetchRequest<ManagedObject>(entityName: "Employee")
        request.predicate = predicate
        return try medianOfTen {
            var chars = 0
            let found = try reader.fetch(request)
            for e in found { chars &+= (try e.value(forKey: "firstName") as? String)?.utf8.count ?? 0 }
            return chars > 0 ? found.count : 0
        }
    }
    let a = try run(try FetchPredicate(format: "manager == %@", manager))
    let b = try run(try FetchPredicate(format: "manager.name == 'M7'"))
    let c = try run(try FetchPredicate(format: "lastName == 'L7' AND age > 40"))
    try container.close()
    return W12(byManager: a.seconds, byPath: b.seconds, compound: c.seconds, records: [a.records, b.records, c.records])
}

struct EmployeeRecord: Codable, FetchableRecord {
    var id: Int64
    var firstName: String
    var lastName: String
    var age: Int?
    var managerId: Int64?
}

/// A W12 GRDB database in `dir`.
func grdbW12Store(_ dir: String) throws {
    let pool = try DatabasePool(path: dir + "/db.sqlite")
    try pool.write { db in
        try db.execute(sql: "CREATE TABLE manager (id INTEGER PRIMARY KEY, name TEXT NOT NULL, lastName TEXT NOT NULL)")
        try db.execute(
            sql: """
                CREATE TABLE employee (id INTEGER PRIMARY KEY, firstName TEXT NOT NULL, lastName TEXT NOT NULL, \
                age INTEGER, managerId INTEGER REFERENCES manager(id))
                """)
        try db.execute(sql: "CREATE INDEX employee_manager ON employee(managerId)")
        try db.execute(sql: "CREATE INDEX employee_lastName_age ON employee(lastName, age)")
        let m = try db.cachedStatement(sql: "INSERT INTO manager (id, name, lastName) VALUES (?, ?, ?)")
        for i in 0..<w12Managers { try m.execute(arguments: [i + 1, "M\(i)", "Boss\(i % 10)"]) }
        let e = try db.cachedStatement(
            sql: "INSERT INTO employee (firstName, lastName, age, managerId) VALUES (?, ?, ?, ?)")
        for i in 0..<w12Employees {
            try e.execute(arguments: ["E\(i)", "L\(i % 100)", 20 + (i / 100) % 50, i % w12Managers + 1])
        }
    }
    try pool.close()
}

/// `--phase grdb-w12`: the same on the GRDB database.
func grdbW12(_ dir: String) throws -> W12 {
    let pool = try DatabasePool(path: dir + "/db.sqlite")
    let managerId = try pool.read { db in try Int64.fetchOne(db, sql: "SELECT id FROM manager WHERE name = 'M7'")! }
    func run(_ sql: String, _ arguments: StatementArguments = []) throws -> (seconds: Double, records: Int) {
        try medianOfTen {
            let found = try pool.read { db in try EmployeeRecord.fetchAll(db, sql: sql, arguments: arguments) }
            var chars = 0
            for e in found { chars &+= e.firstName.utf8.count }
            return chars > 0 ? found.count : 0
        }
    }
    let a = try run("SELECT * FROM employee WHERE managerId = ?", [managerId])
    let b = try run("SELECT * FROM employee WHERE managerId IN (SELECT id FROM manager WHERE name = 'M7')")
    let c = try run("SELECT * FROM employee WHERE lastName = 'L7' AND age > 40")
    try pool.close()
    return W12(byManager: a.seconds, byPath: b.seconds, compound: c.seconds, records: [a.records, b.records, c.records])
}

/// Prints a W12 result as `PeerRunner --phase` output.
func printW12(_ w: W12) {
    print(
        "by_manager=\(w.byManager) by_path=\(w.byPath) compound=\(w.compound) "
            + "records_a=\(w.records[0]) records_b=\(w.records[1]) records_c=\(w.records[2])")
}
