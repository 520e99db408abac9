import Foundation
import Logbook
import LogbookEngine

/// The benchmark data of ../shared/benchmarks.md.
enum BenchmarkModel {
    /// Item i: name "Item i", createdAt = 1,700,000,000 s + i ms, done = (i % 2 == 0).
    static let base = Date(timeIntervalSince1970: 1_700_000_000)

    static func model() throws -> ManagedObjectModel {
        try ManagedObjectModel {
            EntityDescription("Item", class: Item.self) {
                AttributeDescription("name", .string)
                AttributeDescription("createdAt", .date, indexed: true)
                AttributeDescription("done", .bool, default: false)
            }
            EntityDescription("Manager") {
                AttributeDescription("firstName", .string)
                AttributeDescription("lastName", .string)
                AttributeDescription("age", .int32, optional: true)
                RelationshipDescription("employees", to: "Employee", inverse: "managers", toMany: true)
            }
            EntityDescription("Employee") {
                AttributeDescription("firstName", .string)
                AttributeDescription("lastName", .string)
                AttributeDescription("age", .int32, optional: true)
                RelationshipDescription("managers", to: "Manager", inverse: "employees", toMany: true)
            }
        }
    }
}

final class Item: ManagedObject {
    @Attribute("name") var name: String
    @Attribute("createdAt") var createdAt: Date
    @Attribute("done") var done: Bool
}

/// W1: insert N Items as managed objects in a context, one save with full durability.
func populate(store path: String, count: Int, durability: Durability) throws {
    var options = ContainerOptions()
    options.durability = durability
    let start = now()
    let container = try PersistentContainer(name: "Items", model: BenchmarkModel.model(), directory: path, options: options)
    let context = container.newContext(concurrencyType: .confinement)
    let base = BenchmarkModel.base.timeIntervalSince1970
    for i in 1...count {
        let item = try context.insert(Item.self)
        item.name = "Item \(i)"
        item.createdAt = Date(timeIntervalSince1970: base + Double(i) / 1000)
        item.done = i % 2 == 0
    }
    let inserted = now()
    let insertPeak = peakRSSMegabytes()
    try context.save()
    let saved = now()
    report("populate", ["records": count, "seconds": saved - start, "insert_seconds": inserted - start, "save_seconds": saved - inserted,
                        "records_per_s": Int(Double(count) / (saved - start)), "peak_rss_mb": peakRSSMegabytes(), "insert_peak_rss_mb": insertPeak,
                        "file_bytes": directoryBytes(path)])
    context.reset()
    try container.close()
    report("populate_close", ["file_bytes": directoryBytes(path)])
}

/// W2: open a W1 store, fetch every Item sorted by createdAt as objects, read every name.
func fetchSorted(store path: String) throws {
    let start = now()
    let container = try PersistentContainer(name: "Items", model: BenchmarkModel.model(), directory: path)
    let context = container.newContext(concurrencyType: .confinement)
    let opened = now()
    report("open", ["seconds": opened - start])
    var request = FetchRequest<Item>()
    request.sortDescriptors = [FetchSortDescriptor(key: "createdAt")]
    var chars = 0
    let items = try context.fetch(request)
    for item in items { chars &+= item.name.utf8.count }
    let fetched = now()
    report("fetch_sorted", ["records": items.count, "seconds": fetched - opened, "peak_rss_mb": peakRSSMegabytes()])
    var range = FetchRequest<Item>()
    let base = BenchmarkModel.base.timeIntervalSince1970
    range.predicate = try FetchPredicate(format: "createdAt >= %@ AND createdAt < %@",
                                         Date(timeIntervalSince1970: base + 400), Date(timeIntervalSince1970: base + 500))
    range.sortDescriptors = [FetchSortDescriptor(key: "createdAt")]
    let r0 = now()
    let found = try context.fetch(range)
    for item in found { chars &+= item.name.utf8.count }
    report("fetch_range", ["records": found.count, "seconds": now() - r0])
    _ = chars
}
