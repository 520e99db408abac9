import LogbookEngine

/// The members a context added to one set (a to-many relationship's side) since its last save.
///
/// Most sets gain a few members (an employee's three managers): up to three are held inline,
/// ascending, without an allocation (a context building a graph holds one of these per new
/// object, and the save reads them all: an array each cost an allocation, a free and a cache
/// miss at the save). New objects get ascending serials, so members mostly arrive in ascending
/// order: a longer list is kept sorted by appending, without hashing (a manager that gains a
/// thousand employees costs a thousand appends, and a lookup is a binary search). A member that
/// arrives out of order goes in at its place while the list is short; a longer list turns into a
/// hash set then, so that no order of insertions costs more than a set would.
struct PendingMembers: Sequence, ExpressibleByArrayLiteral {
    /// Up to three members, ascending, in place.
    fileprivate struct Inline {
        var count: UInt8 = 0
        var members: (UInt64, UInt64, UInt64) = (0, 0, 0)

        static var capacity: Int { 3 }

        subscript(i: Int) -> UInt64 {
            get {
                switch i {
                case 0: members.0
                case 1: members.1
                default: members.2
                }
            }
            set {
                switch i {
                case 0: members.0 = newValue
                case 1: members.1 = newValue
                default: members.2 = newValue
                }
            }
        }

        /// The position of the first member not below `member`.
        func lowerBound(of member: UInt64) -> Int {
            var i = 0
            while i < Int(count) && self[i] < member { i += 1 }
            return i
        }

        var array: [UInt64] { (0..<Int(count)).map { self[$0] } }
    }

    private enum Storage {
        case inline(Inline)
        /// Ascending, without duplicates.
        case sorted([UInt64])
        case hashed(Set<UInt64>)
    }

    private var storage: Storage

    /// Out-of-order insertions and removals shift a sorted list of at most this many members;
    /// past it the list becomes a set.
    private static var shiftLimit: Int { 64 }

    init() { storage = .inline(Inline()) }

    init(arrayLiteral elements: UInt64...) {
        self.init()
        for m in elements { insert(m) }
    }

    init(_ members: some Sequence<UInt64>) {
        self.init()
        for m in members { insert(m) }
    }

    var isEmpty: Bool {
        switch storage {
        case .inline(let few): few.count == 0
        case .sorted(let list): list.isEmpty
        case .hashed(let set): set.isEmpty
        }
    }

    var count: Int {
        switch storage {
        case .inline(let few): Int(few.count)
        case .sorted(let list): list.count
        case .hashed(let set): set.count
        }
    }

    func contains(_ member: UInt64) -> Bool {
        switch storage {
        case .inline(let few):
            let i = few.lowerBound(of: member)
            return i < Int(few.count) && few[i] == member
        case .sorted(let list):
            let i = list.lowerBound(of: member)
            return i < list.count && list[i] == member
        case .hashed(let set): return set.contains(member)
        }
    }

    /// Adds `member`; returns false (and changes nothing) when it is there already.
    @discardableResult
    mutating func insert(_ member: UInt64) -> Bool {
        switch storage {
        case .inline(var few):
            let i = few.lowerBound(of: member)
            let n = Int(few.count)
            if i < n && few[i] == member { return false }
            if n < Inline.capacity {
                var j = n
                while j > i {
                    few[j] = few[j - 1]
                    j -= 1
                }
                few[i] = member
                few.count += 1
                storage = .inline(few)
            } else {
                var list = few.array
                list.reserveCapacity(8)
                list.insert(member, at: i)
                storage = .sorted(list)
            }
            return true
        case .sorted(var list):
            if let last = list.last, member <= last {
                let i = list.lowerBound(of: member)
                if i < list.count && list[i] == member { return false }
                if list.count >= Self.shiftLimit {
                    var set = Set(list)
                    set.insert(member)
                    storage = .hashed(set)
                    return true
                }
                storage = .sorted([])  // the list is uniquely referenced while it changes
                list.insert(member, at: i)
            } else {
                storage = .sorted([])
                list.append(member)
            }
            storage = .sorted(list)
            return true
        case .hashed(var set):
            storage = .sorted([])
            let inserted = set.insert(member).inserted
            storage = .hashed(set)
            return inserted
        }
    }

    /// Adds the keys of up to 64 objects; bit `i` of the result is set when `objects[i]`'s key
    /// was not there before (a set's changes are looked up once for all of them).
    mutating func insert(keysOf objects: [ManagedObject]) -> UInt64 {
        precondition(objects.count <= 64, "at most 64 objects at a time")
        var added: UInt64 = 0
        for (i, o) in objects.enumerated() where insert(o.engineKey) { added |= 1 << UInt64(i) }
        return added
    }

    /// Removes `member`; returns it when it was there.
    @discardableResult
    mutating func remove(_ member: UInt64) -> UInt64? {
        switch storage {
        case .inline(var few):
            let i = few.lowerBound(of: member)
            let n = Int(few.count)
            guard i < n && few[i] == member else { return nil }
            for j in i..<(n - 1) { few[j] = few[j + 1] }
            few.count -= 1
            storage = .inline(few)
            return member
        case .sorted(var list):
            let i = list.lowerBound(of: member)
            guard i < list.count && list[i] == member else { return nil }
            if list.count > Self.shiftLimit {
                var set = Set(list)
                set.remove(member)
                storage = .hashed(set)
                return member
            }
            storage = .sorted([])
            list.remove(at: i)
            storage = .sorted(list)
            return member
        case .hashed(var set):
            storage = .sorted([])
            let removed = set.remove(member)
            storage = .hashed(set)
            return removed
        }
    }

    /// The members in ascending order.
    var ascending: [UInt64] {
        switch storage {
        case .inline(let few): few.array
        case .sorted(let list): list
        case .hashed(let set): set.sorted()
        }
    }

    /// Calls `body` with the members in ascending order, in memory: a save hands them to the
    /// transaction as one copy rather than a member at a time through the iterator.
    func withAscending<R>(_ body: (UnsafeBufferPointer<UInt64>) throws -> R) rethrows -> R {
        switch storage {
        case .inline(let few):
            var members = few.members
            return try withUnsafeBytes(of: &members) { raw in
                try body(
                    UnsafeBufferPointer(
                        start: raw.assumingMemoryBound(to: UInt64.self).baseAddress, count: Int(few.count)))
            }
        case .sorted(let list): return try list.withUnsafeBufferPointer(body)
        case .hashed(let set): return try set.sorted().withUnsafeBufferPointer(body)
        }
    }

    struct Iterator: IteratorProtocol {
        fileprivate var few = Inline()
        fileprivate var position = 0
        fileprivate var list: IndexingIterator<[UInt64]>?
        fileprivate var set: Set<UInt64>.Iterator?

        mutating func next() -> UInt64? {
            if list != nil { return list!.next() }
            if set != nil { return set!.next() }
            guard position < Int(few.count) else { return nil }
            defer { position += 1 }
            return few[position]
        }
    }

    /// The members, ascending while inline or sorted, in no particular order once hashed.
    func makeIterator() -> Iterator {
        switch storage {
        case .inline(let few): Iterator(few: few)
        case .sorted(let list): Iterator(list: list.makeIterator())
        case .hashed(let set): Iterator(set: set.makeIterator())
        }
    }

    var underestimatedCount: Int { count }
}
