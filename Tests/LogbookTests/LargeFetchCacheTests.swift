import Foundation
import LogbookTestSupport
import Testing

@testable import LogbookGraph

/// A fetch of many objects reads each block of records once: it leaves the store's shared
/// block cache to the reads that come back to their blocks (faults, relationships, small
/// fetches), caching the blocks of its first part only.
@Suite struct LargeFetchCacheTests {
    @Test func aLargeFetchCachesOnlyItsFirstPart() throws {
        let store = TemporaryStore()
        let count = 30_000
        do {
            let container = try makeContainer(store, durability: .none)
            let writer = container.newContext(concurrencyType: .confinement)
            for i in 0..<count {
                let p = try writer.insert(Person.self)
                p.firstName = "P\(i) " + String(repeating: "x", count: 40)
                p.lastName = "L\(i)"
                p.age = Int32(i)
            }
            try writer.save()
            try container.close()
        }
        let container = try makeContainer(store, durability: .none)
        let before = container.store.statistics()
        let reader = container.newContext(concurrencyType: .confinement)
        var request = FetchRequest<Person>()
        // Sorted by an indexed attribute, no filter: the index is walked and the records read
        // in parts (`streamChunk` at a time).
        request.sortDescriptors = [FetchSortDescriptor(key: "age")]
        let people = try reader.fetch(request)
        #expect(people.count == count)
        #expect(people.first?.firstName.hasPrefix("P0 ") == true && people.last?.lastName == "L\(count - 1)")
        #expect(count > 2 * ManagedObjectContext.streamChunk)
        let grown = container.store.statistics().blockCacheBytes - before.blockCacheBytes
        // Some blocks (the first part's), not all: less than half of the people's records.
        #expect(grown > 0, "the first part's blocks are cached")
        #expect(grown < before.liveBytes / 2, "cached \(grown) bytes of \(before.liveBytes)")
        try container.close()
    }
}
