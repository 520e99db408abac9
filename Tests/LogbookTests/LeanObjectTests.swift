import Foundation
import LogbookGraph
import LogbookTestSupport
import Testing

#if os(Linux)
    /// glibc's size of the chunk behind a pointer malloc gave (`<malloc.h>`, which the Glibc
    /// module does not bring in).
    @_silgen_name("malloc_usable_size")
    private func mallocUsableSize(_ pointer: UnsafeMutableRawPointer?) -> Int
#endif

/// What an object costs (issue 48): each typed property holds its name in one word, and an
/// object's memory is what malloc gives for it.
@Suite struct LeanObjectTests {
    @Test func aTypedPropertyTakesOneWordInEachObject() {
        #expect(MemoryLayout<Managed<String>>.size == 8)
        #expect(MemoryLayout<ToOne<Manager>>.size == 8)
        #expect(MemoryLayout<ToMany<Manager>>.size == 8)
        #expect(MemoryLayout<OrderedToMany<Manager>>.size == 8)
        #expect(MemoryLayout<Transformable<Data>>.size == 8)
        // The name reads back, from a literal or from a String made at run time.
        let built = ["man", "ager"].joined()
        #expect(ToOne<Manager>("manager").key == "manager" && ToOne<Manager>(built).key == "manager")
        #expect(ToMany<Manager>(built).key == "manager" && OrderedToMany<Manager>("steps").key == "steps")
        #expect(Transformable<Data>("color").key == "color")
    }

    #if os(Linux)
        /// An employee (three attributes, a to-one, a to-many) in a 144-byte malloc chunk: 16
        /// bytes less than when each relationship property held a `String` (two words).
        @Test func anEmployeeTakesA144ByteChunk() throws {
            let store = TemporaryStore()
            let container = try makeContainer(store)
            let context = container.newContext(concurrencyType: .confinement)
            let employee = try context.insert(Employee.self)
            let usable = mallocUsableSize(Unmanaged.passUnretained(employee).toOpaque())
            #expect(usable == 136, "malloc gave \(usable) usable bytes")
            try container.close()
        }
    #endif
}
