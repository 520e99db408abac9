import Foundation
import LogbookTestSupport
import Testing

@testable import LogbookGraph

#if os(Linux)
    /// glibc's size of the chunk behind a pointer malloc gave (`<malloc.h>`, which the Glibc
    /// module does not bring in).
    @_silgen_name("malloc_usable_size")
    private func mallocUsableSize(_ pointer: UnsafeMutableRawPointer?) -> Int
#endif

/// What an object costs (issue 48): each typed property holds its name in two bytes, the
/// object's less-used state is one reference, and an object's memory is what malloc gives
/// for it.
@Suite struct LeanObjectTests {
    /// `count` people saved by a context of `container`: first names P0, P1…
    private func savePeople(_ count: Int, in container: PersistentContainer, lastName: (Int) -> String) throws {
        let writer = container.newContext(concurrencyType: .confinement)
        for i in 0..<count {
            let p = try writer.insert(Person.self)
            p.firstName = "P\(i)"
            p.lastName = lastName(i)
        }
        try writer.save()
    }

    @Test func aTypedPropertyTakesTwoBytesInEachObject() {
        #expect(MemoryLayout<Managed<String>>.size == 2)
        #expect(MemoryLayout<ToOne<Manager>>.size == 2)
        #expect(MemoryLayout<ToMany<Manager>>.size == 2)
        #expect(MemoryLayout<OrderedToMany<Manager>>.size == 2)
        #expect(MemoryLayout<Transformable<Data>>.size == 2)
        // The name reads back, from a literal or from a String made at run time.
        let built = ["man", "ager"].joined()
        #expect(ToOne<Manager>("manager").key == "manager" && ToOne<Manager>(built).key == "manager")
        #expect(ToMany<Manager>(built).key == "manager" && OrderedToMany<Manager>("steps").key == "steps")
        #expect(Transformable<Data>("color").key == "color")
        // One name, one id, however it was given; another name, another id.
        #expect(PropertyName("manager") == PropertyName(built))
        #expect(PropertyName("manager") != PropertyName("managers"))
        #expect(PropertyName(StaticString("manager")).string == "manager")
    }

    /// Names made on many threads at once get one id each, and every thread sees the same.
    @Test func namesMadeOnManyThreadsAgree() async {
        let names = (0..<200).map { "property\($0)" }
        let seen = await withTaskGroup(of: [UInt16].self) { group in
            for _ in 0..<8 { group.addTask { names.map { PropertyName($0).id } } }
            var all: [[UInt16]] = []
            for await ids in group { all.append(ids) }
            return all
        }
        #expect(Set(seen).count == 1)
        #expect(Set(seen[0]).count == names.count)
        #expect(zip(seen[0], names).allSatisfy { PropertyNames.name($0) == $1 })
    }

    #if os(Linux)
        /// The smallest chunk malloc gave any of `objects` (usable bytes): what an object asks
        /// for, rounded up to malloc's sizes. One object alone may get a larger chunk (a free
        /// one whose remainder would be too small to split off), so many are looked at.
        private func smallestChunk(_ objects: [ManagedObject]) -> Int {
            objects.map { mallocUsableSize(Unmanaged.passUnretained($0).toOpaque()) }.min() ?? 0
        }

        /// An employee (three attributes, a to-one, a to-many: five names) in an 80-byte malloc
        /// chunk: 144 when its side state took five fields of its own and each name a word, 160
        /// when each relationship property held a `String` (two words).
        @Test func anEmployeeTakesAn80ByteChunk() throws {
            let store = TemporaryStore()
            let container = try makeContainer(store)
            let context = container.newContext(concurrencyType: .confinement)
            let employees = try (0..<200).map { _ in try context.insert(Employee.self) }
            let usable = smallestChunk(employees)
            #expect(usable == 72, "malloc gave \(usable) usable bytes")
            try container.close()
        }

        /// A fetched person (three attributes, the shape of the benchmarks' Item) in a 64-byte
        /// malloc chunk (56 bytes asked): 128 before its side state went into one reference and
        /// its names into two bytes each, 80 before its layout and token went into one binding
        /// and its values and its place in its side into one word.
        @Test func aFetchedPersonTakesA64ByteChunk() throws {
            let store = TemporaryStore()
            let container = try makeContainer(store)
            let writer = container.newContext(concurrencyType: .confinement)
            for i in 0..<200 {
                let p = try writer.insert(Person.self)
                p.firstName = "Ada \(i)"
                p.lastName = "Lovelace"
            }
            try writer.save()
            let reader = container.newContext(concurrencyType: .confinement)
            let fetched = try reader.fetch(FetchRequest<Person>())
            #expect(fetched.count == 200 && fetched.allSatisfy { $0.isFault })
            let usable = smallestChunk(fetched)
            #expect(usable == 56, "malloc gave \(usable) usable bytes")
            try container.close()
        }
    #endif

    /// A fetched object keeps its record's place and its version in the fetch's arena, and
    /// gets a box of its own only when it changes: what it read, the version it read it at and
    /// the conflict check all stay as they were.
    @Test func theSideStateOfAFetchedObjectFollowsItsLife() throws {
        let store = TemporaryStore()
        let container = try makeContainer(store)
        let writer = container.newContext(concurrencyType: .confinement)
        for name in ["Ada", "Edsger", "Grace"] {
            let p = try writer.insert(Person.self)
            p.firstName = name
            p.lastName = "L"
        }
        try writer.save()

        let reader = container.newContext(concurrencyType: .confinement)
        // In key order (the order of insertion): straight from the records.
        let request = FetchRequest<Person>()
        let people = try reader.fetch(request)
        #expect(people.map(\.firstName) == ["Ada", "Edsger", "Grace"])
        // Typed reads came from the arena: still faults, each with its record's index there.
        #expect(people.allSatisfy { $0.isFault && $0.sideKind == .arena })
        #expect(people.map(\.rawIndex) == [0, 1, 2])
        let version = people[0].baseVersion
        #expect(version != 0 && people.allSatisfy { $0.baseVersion == version && $0.committed == nil })

        // Loaded whole (as any access the arena cannot answer alone loads it): a tag for the
        // version, one for the objects read at it.
        try reader.fulfill(people[0])
        try reader.fulfill(people[1])
        #expect(!people[0].isFault && people[0].sideKind == .version && people[0].baseVersion == version)
        #expect(people[0].side === people[1].side)

        // Changed: its own box, the values as fetched kept for the save's checks.
        people[2].firstName = "Grace H."
        #expect(people[2].sideKind == .extras && people[2].baseVersion == version)
        #expect(people[2].committed?.first == .string("Grace"))

        // Another context saves the same object after the fetch: the save sees the conflict.
        let other = container.newContext(concurrencyType: .confinement)
        let same = try #require(try other.fetch(request).last)
        same.lastName = "Hopper"
        try other.save()
        #expect {
            try reader.save()
        } throws: { ($0 as? LogbookError)?.code == .mergeConflict }
        try container.close()
    }

    /// A batched fetch's faults hold their batch and their place in it in the side's two
    /// fields; loading one loads its batch, and each then holds only the version it read.
    @Test func aBatchedFaultHoldsItsBatchAndPlace() throws {
        let store = TemporaryStore()
        let container = try makeContainer(store)
        try savePeople(5, in: container) { _ in "L" }
        let reader = container.newContext(concurrencyType: .confinement)
        var request = FetchRequest<Person>()
        request.fetchBatchSize = 2
        let people = try reader.fetch(request)
        #expect(people.map { $0.sideKind } == [.batch, .batch, .batch, .batch, .batch])
        #expect(people.map(\.batchSlot) == [0, 1, 0, 1, 0])
        #expect(people[0].batch === people[1].batch && people[1].batch !== people[2].batch)
        #expect(people.allSatisfy { $0.baseVersion == 0 })
        #expect(people[1].firstName == "P1")
        #expect(!people[0].isFault && !people[1].isFault && people[2].isFault)
        #expect(people[0].batch == nil && people[0].sideKind == .version && people[0].baseVersion != 0)
        try container.close()
    }

    /// A fault's place in its arena or batch and an object's values share one word: values
    /// given to a fault that still has a place move the place to the object's own box first,
    /// so the batch still finds it (and forgets it when the object goes), and the arena's
    /// record is still read from the right place.
    @Test func valuesGivenToAFaultWithAPlaceKeepThePlace() throws {
        let store = TemporaryStore()
        let container = try makeContainer(store)
        try savePeople(4, in: container) { "L\($0)" }
        let reader = container.newContext(concurrencyType: .confinement)
        var request = FetchRequest<Person>()
        request.fetchBatchSize = 4
        var people: [Person]? = try reader.fetch(request)
        let batch = try #require(people![2].batch)
        people![2].slots = [.string("Given"), .string("Values"), .null]
        #expect(people![2].sideKind == .extras && people![2].batchSlot == 2 && people![2].batch === batch)
        #expect(people![3].sideKind == .batch && people![3].batchSlot == 3 && people![3].slots.isEmpty)
        // Each object, going, leaves the batch through its place, wherever it is held.
        people = nil
        #expect(batch.take().isEmpty)
        // A batch loads its faults, which then hold values and no place.
        let again = try reader.fetch(request)
        #expect(again[0].firstName == "P0" && again[3].lastName == "L3")
        #expect(again[3].sideKind == .version && again[3].slots.count == 3)

        // An arena fault given values: the place moves to its box.
        let fresh = container.newContext(concurrencyType: .confinement)
        let direct = try fresh.fetch(FetchRequest<Person>())
        direct[1].slots = [.string("X"), .string("Y"), .null]
        #expect(direct[1].sideKind == .extras && direct[1].rawIndex == 1)
        // Still a fault: it loads its record from its place, which the box kept.
        #expect(direct.map(\.firstName) == ["P0", "P1", "P2", "P3"])
        // Loaded from the arena: the arena left before the values came, so no box was made.
        try fresh.fulfill(direct[2])
        #expect(direct[2].sideKind == .version && direct[2].slots.first == .string("P2"))
        try container.close()
    }
}
