import Foundation
import LogbookEngine
import LogbookGraph

/// Runs `body` once (not counted), then ten times; the median, fastest and slowest of the ten.
func timedTen(_ body: () throws -> Int) rethrows -> (median: Double, min: Double, max: Double, result: Int) {
    var result = try body()
    var times: [Double] = []
    for _ in 0..<10 {
        let t0 = now()
        result = try body()
        times.append(now() - t0)
    }
    return (median(times), times.min()!, times.max()!, result)
}

/// W11: queries no index answers, on a W1 store: a count of `done == YES`, a fetch of
/// `name CONTAINS '99999'` and one of `done == NO AND name LIKE 'Item 1*'`, each reading the
/// names of what it found.
func scanWorkload(store path: String) throws {
    let container = try openItems(path)
    let context = container.newContext(concurrencyType: .confinement)
    let openRSS = currentRSSMegabytes()
    report("scan_open", ["rss_mb": openRSS, "peak_rss_mb": peakRSSMegabytes()])
    enum Result { case objects, count, ids }
    func run(_ phase: String, _ format: String, _ result: Result) throws {
        var request = FetchRequest<Item>()
        request.predicate = try FetchPredicate(format: format)
        // The peak of this phase alone, above the open store's resident memory.
        resetPeakRSS()
        let t = try timedTen {
            if result == .count { return try context.count(for: request) }
            if result == .ids { return try context.fetchObjectIDs(request).count }
            var chars = 0
            let items = try context.fetch(request)
            for item in items { chars &+= item.name.utf8.count }
            context.reset()
            return items.count
        }
        report(
            phase,
            [
                "records": t.result, "seconds": t.median, "min_seconds": t.min, "max_seconds": t.max,
                "peak_rss_mb": peakRSSMegabytes(), "peak_above_open_mb": peakRSSMegabytes() - openRSS,
                "plan": try context.explain(request).description.replacingOccurrences(of: " ", with: "_")
            ])
    }
    try run("scan_count", "done == YES", .count)
    try run("scan_contains", "name CONTAINS '99999'", .objects)
    try run("scan_mixed", "done == NO AND name LIKE 'Item 1*'", .objects)
    try run("scan_ids", "done == YES", .ids)
    report("scan_memory", ["peak_rss_mb": peakRSSMegabytes(), "rss_mb": currentRSSMegabytes()])
    try container.close()
}

/// The data of W12: 1,000 managers and 100,000 employees (for N = 1,000,000: N/1000 and
/// N/10), employee i with lastName "L(i % 100)", age 20 + (i / 100) % 50 and the to-one
/// `manager` = manager i % 1000 (inverse `reports`); a compound index on (lastName, age).
enum StaffModel {
    static func model() throws -> ManagedObjectModel {
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
}

/// W12: fetches a relationship index or a compound index answers, on the W12 data.
func relationshipQueryWorkload(store path: String, count: Int, durability: Durability) throws {
    let employees = max(1, count / 10)
    let managers = max(1, count / 1000)
    var options = ContainerOptions()
    options.durability = durability
    options.encryptionKey = benchKey?.key
    let container = try PersistentContainer(
        name: "Staff", model: StaffModel.model(), directory: path, options: options)
    let writer = container.newContext(concurrencyType: .confinement)
    if try writer.count(for: FetchRequest<ManagedObject>(entityName: "Employee")) == 0 {
        let t0 = now()
        var bosses: [ManagedObject] = []
        for m in 0..<managers {
            let o = try writer.insertNewObject(forEntityName: "Manager")
            try o.setValue("M\(m)", forKey: "name")
            try o.setValue("Boss\(m % 10)", forKey: "lastName")
            bosses.append(o)
        }
        for i in 0..<employees {
            let e = try writer.insertNewObject(forEntityName: "Employee")
            try e.setValue("E\(i)", forKey: "firstName")
            try e.setValue("L\(i % 100)", forKey: "lastName")
            try e.setValue(Int32(20 + (i / 100) % 50), forKey: "age")
            try e.setValue(bosses[i % managers], forKey: "manager")
        }
        try writer.save()
        report("staff_populate", ["records": employees + managers, "seconds": now() - t0])
        writer.reset()
    }
    // Queries in a context of their own (as an app's reading context would be).
    let context = container.newContext(concurrencyType: .confinement)
    // Manager 7 (or the last, for fewer than 8: a small --count crashed here).
    let chosen = "M\(min(7, managers - 1))"
    guard
        let manager = try context.fetch(
            FetchRequest<ManagedObject>(entityName: "Manager").with(try FetchPredicate(format: "name == %@", chosen))
        ).first
    else { throw LogbookError(.objectNotFound, "the store has no manager named \(chosen)") }
    func run(_ phase: String, _ predicate: FetchPredicate) throws {
        let request = FetchRequest<ManagedObject>(entityName: "Employee").with(predicate)
        let t = try timedTen {
            var chars = 0
            let found = try context.fetch(request)
            for e in found { chars &+= (try e.value(forKey: "firstName") as? String)?.utf8.count ?? 0 }
            return found.count
        }
        report(
            phase,
            [
                "records": t.result, "microseconds": (t.median * 1e6).rounded(),
                "min_microseconds": (t.min * 1e6).rounded(),
                "max_microseconds": (t.max * 1e6).rounded(),
                "plan": try context.explain(request).description.replacingOccurrences(of: " ", with: "_")
            ])
    }
    try run("relation_to_one", try FetchPredicate(format: "manager == %@", manager))
    try run("relation_path", try FetchPredicate(format: "manager.name == %@", chosen))
    try run("compound_index", try FetchPredicate(format: "lastName == 'L7' AND age > 40"))
    report("relation_memory", ["peak_rss_mb": peakRSSMegabytes()])
    try container.close()
}

extension FetchRequest {
    fileprivate func with(_ predicate: FetchPredicate) -> FetchRequest {
        var r = self
        r.predicate = predicate
        return r
    }
}
