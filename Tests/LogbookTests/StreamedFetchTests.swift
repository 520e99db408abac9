import Foundation
import LogbookTestSupport
import Testing

@testable import LogbookGraph

/// A fetch whose index gives its keys and order makes its objects a chunk of keys at a time
/// (issue 48: no array of every key or every record's span at the fetch's peak). What a user
/// sees must not depend on where the chunks end: these fetches span several.
@Suite struct StreamedFetchTests {
    /// More than two chunks of people, some names long enough that a record's length takes
    /// two bytes in its arena.
    static let count = 2 * ManagedObjectContext.streamChunk + 1_000

    static func name(_ i: Int) -> String {
        i % 97 == 0 ? "P\(i)-" + String(repeating: "x", count: 200) : "P\(i)"
    }

    /// A store of `count` people, age `i` for the `i`th, saved in three saves (so that the
    /// records lie in several frames).
    static func populated(_ store: TemporaryStore) throws -> PersistentContainer {
        let container = try makeContainer(store)
        let writer = container.newContext(concurrencyType: .confinement)
        for i in 0..<count {
            let p = try writer.insert(Person.self)
            p.firstName = name(i)
            p.lastName = "L"
            p.age = Int32(i)
            if i % 9_000 == 8_999 { try writer.save() }
        }
        try writer.save()
        return container
    }

    static func byAge(ascending: Bool = true, offset: Int = 0, limit: Int = 0) -> FetchRequest<Person> {
        var request = FetchRequest<Person>()
        request.sortDescriptors = [FetchSortDescriptor(key: "age", ascending: ascending)]
        request.fetchOffset = offset
        request.fetchLimit = limit
        return request
    }

    @Test func everyObjectComesInTheIndexOrderWithItsValues() throws {
        let store = TemporaryStore()
        let container = try Self.populated(store)
        let context = container.newContext(concurrencyType: .confinement)
        let people = try context.fetch(Self.byAge())
        #expect(people.count == Self.count)
        #expect(context.lastFetchRecordsRead == Self.count)
        #expect(people.allSatisfy { $0.isFault }, "objects are faults that keep their record")
        var wrong = 0
        for (i, p) in people.enumerated() where p.age != Int32(i) || p.firstName != Self.name(i) { wrong += 1 }
        #expect(wrong == 0)
        #expect(people.allSatisfy { $0.isFault }, "typed reads leave them faults")
        // A change decodes the whole record, from the same bytes.
        let last = people[Self.count - 1]
        #expect(try last.value(forKey: "lastName") as? String == "L")
        last.lastName = "M"
        #expect(!last.isFault && last.firstName == Self.name(Self.count - 1) && last.age == Int32(Self.count - 1))
        // One object per record: a second fetch hands back the same objects.
        let again = try context.fetch(Self.byAge(limit: 3))
        #expect(again.count == 3 && zip(again, people).allSatisfy { $0 === $1 })
    }

    @Test func theWindowAndADescendingOrderCrossChunks() throws {
        let store = TemporaryStore()
        let container = try Self.populated(store)
        let chunk = ManagedObjectContext.streamChunk
        let context = container.newContext(concurrencyType: .confinement)
        let window = try context.fetch(Self.byAge(offset: chunk - 2, limit: 5))
        #expect(window.map(\.age) == (chunk - 2..<chunk + 3).map { Int32($0) })
        #expect(window.map(\.firstName) == (chunk - 2..<chunk + 3).map(Self.name))
        let fresh = container.newContext(concurrencyType: .confinement)
        let descending = try fresh.fetch(Self.byAge(ascending: false, offset: chunk, limit: chunk + 10))
        #expect(descending.count == chunk + 10)
        #expect(descending.first?.age == Int32(Self.count - 1 - chunk))
        #expect(descending.last?.age == Int32(Self.count - 1 - chunk - (chunk + 9)))
        let tail = try fresh.fetch(Self.byAge(offset: Self.count - 4))
        #expect(tail.map(\.age) == (Self.count - 4..<Self.count).map { Int32($0) })
        #expect(try fresh.fetch(Self.byAge(offset: Self.count)).isEmpty)
    }

    /// Objects the context already holds are the ones handed back, with their unsaved
    /// changes (the fetch then takes the general path, which judges them).
    @Test func objectsTheContextHoldsAreHandedBackAsTheyAre() throws {
        let store = TemporaryStore()
        let container = try Self.populated(store)
        let context = container.newContext(concurrencyType: .confinement)
        let held = try context.fetch(Self.byAge(offset: 2 * ManagedObjectContext.streamChunk + 5, limit: 1))[0]
        held.lastName = "Changed"
        var request = Self.byAge()
        request.includesPendingChanges = false
        let people = try context.fetch(request)
        #expect(people.count == Self.count)
        let same = people[2 * ManagedObjectContext.streamChunk + 5]
        #expect(same === held && same.lastName == "Changed")
        #expect(people.enumerated().allSatisfy { $1.age == Int32($0) })
    }
}
