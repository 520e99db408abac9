/// The members of one to-many relationship set: sorted, distinct 64-bit keys.
///
/// A value type over a shared, copy-on-write buffer, so that a snapshot's sets cost nothing
/// until the writer changes one of them.
struct MemberSet: RadixSlot {
    final class Storage {
        // Unchecked exclusivity: mutated only by the writer while uniquely referenced (`makeUnique`).
        @exclusivity(unchecked) var members: [UInt64]
        init(_ members: [UInt64]) { self.members = members }
    }

    private(set) var storage: Storage?

    static var absent: MemberSet { MemberSet(storage: nil) }
    var isAbsent: Bool { storage == nil }

    var members: [UInt64] { storage?.members ?? [] }
    var count: Int { storage?.members.count ?? 0 }

    func contains(_ member: UInt64) -> Bool {
        guard let m = storage?.members else { return false }
        let i = m.lowerBound(of: member)
        return i < m.count && m[i] == member
    }

    private mutating func makeUnique() {
        if storage == nil {
            storage = Storage([])
        } else if !isKnownUniquelyReferenced(&storage!) {
            storage = Storage(storage!.members)
        }
    }

    /// Adds sorted, distinct members; returns how many were new.
    @discardableResult
    mutating func add(sorted new: [UInt64]) -> Int {
        guard !new.isEmpty else { return 0 }
        if storage == nil {
            // A new set takes the array it is given (no copy).
            storage = Storage(new)
            return new.count
        }
        makeUnique()
        // Appended in place when the new members all come after the old (the usual case: new
        // objects have the highest serials); nothing else holds the array meanwhile.
        if storage!.members.last.map({ $0 < new.first! }) ?? true {
            storage!.members.append(contentsOf: new)
            return new.count
        }
        let old = storage!.members
        var merged: [UInt64] = []
        merged.reserveCapacity(old.count + new.count)
        var i = 0
        var j = 0
        while i < old.count || j < new.count {
            if j == new.count || (i < old.count && old[i] < new[j]) {
                merged.append(old[i])
                i += 1
            } else if i == old.count || new[j] < old[i] {
                merged.append(new[j])
                j += 1
            } else {
                merged.append(old[i])
                i += 1
                j += 1
            }
        }
        let added = merged.count - old.count
        storage!.members = merged
        return added
    }

    /// Removes sorted members; returns how many were present. An emptied set becomes absent.
    @discardableResult
    mutating func remove(sorted gone: [UInt64]) -> Int {
        guard let current = storage?.members, !current.isEmpty, !gone.isEmpty else { return 0 }
        var kept: [UInt64] = []
        kept.reserveCapacity(current.count)
        var j = 0
        for m in current {
            while j < gone.count && gone[j] < m { j += 1 }
            if j < gone.count && gone[j] == m { continue }
            kept.append(m)
        }
        let removed = current.count - kept.count
        guard removed > 0 else { return 0 }
        if kept.isEmpty {
            storage = nil
            return removed
        }
        makeUnique()
        storage!.members = kept
        return removed
    }

    mutating func replace(sorted members: [UInt64]) {
        storage = members.isEmpty ? nil : Storage(members)
    }
}

// The storage is replaced, never mutated, when it is shared (`makeUnique`).
extension MemberSet: @unchecked Sendable {}

extension [UInt64] {
    /// The first position whose value is not below `value`, in an ascending array (a binary
    /// search): where `value` is, or where it would go.
    @inline(__always)
    package func lowerBound(of value: UInt64) -> Int {
        var low = 0
        var high = count
        while low < high {
            let mid = (low + high) / 2
            if self[mid] < value { low = mid + 1 } else { high = mid }
        }
        return low
    }
}
