import Foundation
import LogbookEngine
import Synchronization

/// The name of the attribute or relationship a typed property (`@Managed`, `@ToOne`, …)
/// stands for, held in two bytes: a number given to each distinct name once per process.
///
/// Every object holds one for each of its typed properties, so their size is the objects'
/// (issue 48): a `String` took 16 bytes, a pointer to the name's bytes 8, and an object of
/// three such properties fits an 80-byte malloc chunk only with 2. An entity's layout knows
/// the numbers of its own names, so a property finds its slot by comparing numbers.
///
/// Making one from a literal costs a look-up by the literal's address in a table read
/// without a lock (each object's initializer makes one for each typed property); a new
/// literal, or a name given as a `String`, takes a lock once.
@usableFromInline
struct PropertyName: Equatable, Sendable {
    @usableFromInline let id: UInt16

    init(_ literal: StaticString) {
        id =
            literal.hasPointerRepresentation
            ? PropertyNames.id(literal: literal) : PropertyNames.id(literal.description)
    }

    init(_ string: String) { id = PropertyNames.id(string) }

    /// The name as a `String`.
    var string: String { PropertyNames.name(id) }
}

/// The process's table of property names (see `PropertyName`).
enum PropertyNames {
    /// At most this many distinct names in a process (ids are 16 bits).
    static let capacity = 1 << 16
    /// The literal table's size (a power of two) and how far a look-up probes.
    private static let tableBits = 13
    private static let probes = 16

    private final class Table: @unchecked Sendable {
        // @unchecked: `names[i]` and `ids[i]`/`counts[i]` are written once, under `lock`,
        // before the id or the address that leads to them is published (the address with a
        // releasing store, read with an acquiring load); then only read.
        let names = UnsafeMutablePointer<UnsafePointer<CChar>?>.allocate(capacity: PropertyNames.capacity)
        let addresses = UnsafeMutablePointer<Atomic<UInt>>.allocate(capacity: 1 << PropertyNames.tableBits)
        let ids = UnsafeMutablePointer<UInt16>.allocate(capacity: 1 << PropertyNames.tableBits)
        let counts = UnsafeMutablePointer<Int>.allocate(capacity: 1 << PropertyNames.tableBits)
        /// Ids by name; every write happens under it.
        let byName = Locked<[String: UInt16]>([:])

        init() {
            names.initialize(repeating: nil, count: PropertyNames.capacity)
            for i in 0..<(1 << PropertyNames.tableBits) { (addresses + i).initialize(to: Atomic(0)) }
            ids.initialize(repeating: 0, count: 1 << PropertyNames.tableBits)
            counts.initialize(repeating: 0, count: 1 << PropertyNames.tableBits)
        }
    }

    private static let table = Table()

    /// The place in the table where the probes for a literal at `address` begin.
    @inline(__always)
    private static func home(of address: UInt) -> Int {
        Int(truncatingIfNeeded: (address &* 0x9E37_79B9_7F4A_7C15) >> UInt(UInt.bitWidth - tableBits))
    }

    /// The id of the name a literal holds: found by its address, without a lock, once seen.
    @inline(__always)
    static func id(literal: StaticString) -> UInt16 {
        let address = UInt(bitPattern: literal.utf8Start)
        let count = literal.utf8CodeUnitCount
        let mask = (1 << tableBits) - 1
        var h = home(of: address)
        for _ in 0..<probes {
            let seen = table.addresses[h].load(ordering: .acquiring)
            if seen == address && table.counts[h] == count { return table.ids[h] }
            if seen == 0 { break }
            h = (h + 1) & mask
        }
        return firstSight(literal, address: address)
    }

    /// A literal not in the table yet: its name's id, and its address added (when a place is
    /// free within the probes; else each look-up takes this path, correct but slower).
    @inline(never)
    private static func firstSight(_ literal: StaticString, address: UInt) -> UInt16 {
        let name = literal.description
        return table.byName.withLock { byName in
            let id = intern(name, &byName)
            let mask = (1 << tableBits) - 1
            var h = home(of: address)
            for _ in 0..<probes {
                let seen = table.addresses[h].load(ordering: .acquiring)
                if seen == address && table.counts[h] == literal.utf8CodeUnitCount { break }
                if seen == 0 {
                    table.ids[h] = id
                    table.counts[h] = literal.utf8CodeUnitCount
                    table.addresses[h].store(address, ordering: .releasing)
                    break
                }
                h = (h + 1) & mask
            }
            return id
        }
    }

    /// The id of `name` (given one when it has none yet).
    static func id(_ name: String) -> UInt16 {
        table.byName.withLock { intern(name, &$0) }
    }

    private static func intern(_ name: String, _ byName: inout [String: UInt16]) -> UInt16 {
        if let id = byName[name] { return id }
        precondition(byName.count < capacity, "more than \(capacity) distinct property names in one process")
        let id = UInt16(byName.count)
        table.names[Int(id)] = UnsafePointer(strdup(name)!)
        byName[name] = id
        return id
    }

    /// The name an id stands for.
    static func name(_ id: UInt16) -> String {
        guard let bytes = table.names[Int(id)] else { return "" }
        return String(cString: bytes)
    }
}
