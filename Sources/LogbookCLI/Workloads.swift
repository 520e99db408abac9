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
