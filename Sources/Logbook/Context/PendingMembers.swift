import LogbookEngine

/// The members a context added to one set (a to-many relationship's side) since its last save.
///
/// New objects get ascending serials, so members mostly arrive in ascending order: the list
/// is kept sorted by appending, without hashing (a manager that gains a thousand employees
/// costs a thousand appends, and a lookup is a binary search). A member that arrives out of
/// order goes in at its place while the list is short; a longer list turns into a hash set
/// then, so that no order of insertions costs more than a set would.
struct PendingMembers: Sequence, ExpressibleByArrayLiteral {
    private enum Storage {
        /// Ascending, without duplicates.
        case sorted([UInt64])
        case hashed(Set<UInt64>)
    }

    private var storage: Storage

    /// Out-of-order insertions and removals shift a sorted list of at most this many members;
    /// past it the list becomes a set.
    private static var shiftLimit: Int { 64 }

    init() { storage = .sorted([]) }

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
        case .sorted(let list): list.isEmpty
        case .hashed(let set): set.isEmpty
        }
    }

    var count: Int {
        switch storage {
        case .sorted(let list): list.count
        case .hashed(let set): set.count
        }
    }

    func contains(_ member: UInt64) -> Bool {
        switch storage {
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

    /// Removes `member`; returns it when it was there.
    @discardableResult
    mutating func remove(_ member: UInt64) -> UInt64? {
        switch storage {
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
        case .sorted(let list): list
        case .hashed(let set): set.sorted()
        }
    }

    struct Iterator: IteratorProtocol {
        fileprivate var list: IndexingIterator<[UInt64]>?
        fileprivate var set: Set<UInt64>.Iterator?

        mutating func next() -> UInt64? {
            if list != nil { return list!.next() }
            return set?.next()
        }
    }

    /// The members, ascending while the list is sorted, in no particular order once hashed.
    func makeIterator() -> Iterator {
        switch storage {
        case .sorted(let list): Iterator(list: list.makeIterator(), set: nil)
        case .hashed(let set): Iterator(list: nil, set: set.makeIterator())
        }
    }

    var underestimatedCount: Int { count }
}
