import Foundation
import LogbookEngine

extension ManagedObjectContext {
    /// The members of an ordered relationship, in order, with unsaved changes.
    func orderedKeys(_ owner: UInt64, _ layout: EntityLayout, _ r: Int) throws -> [UInt64] {
        let k = setKey(owner, layout, r)
        let pending = orderOverrides[k]
        let members = relatedKeys(owner, layout, r)
        if let pending, pending.count == members.count, pending.allSatisfy(members.contains) { return pending }
        var stored: [UInt64]
        if let parent {
            stored = try parent.performAndWait { try parent.orderedKeys(owner, layout, r) }
        } else if let directoryKey = storeLayout.orderKey(entity: layout.index, relationship: r, owner: owner) {
            stored = try storedOrder(directoryKey, snapshot: readSnapshot()).flatMap(\.members)
        } else {
            stored = []
        }
        if let pending {
            // A pending order that no longer has every member (a merge, or a child's save,
            // brought others): the others keep their places next to their stored neighbours.
            return Self.reconcileOrder(pending, with: stored, members: members)
        }
        var seen = Set<UInt64>()
        var result: [UInt64] = []
        result.reserveCapacity(members.count)
        for key in stored where members.contains(key) && seen.insert(key).inserted { result.append(key) }
        if result.count < members.count {
            result += members.subtracting(seen).sorted()
        }
        return result
    }

    /// An order of exactly `members`: `mine` (without what is no longer a member), and each
    /// member it does not place put after the member that precedes it in `theirs` (first when
    /// none does), the rest last in key order. Orders merge member by member this way: one
    /// side's moves and the other side's insertions are both kept.
    static func reconcileOrder(_ mine: [UInt64], with theirs: [UInt64], members: Set<UInt64>) -> [UInt64] {
        var result: [UInt64] = []
        var placed = Set<UInt64>()
        for key in mine where members.contains(key) && placed.insert(key).inserted { result.append(key) }
        guard placed.count < members.count else { return result }
        var previous: UInt64?
        for key in theirs where members.contains(key) {
            defer { previous = key }
            guard placed.insert(key).inserted else { continue }
            if let previous, let at = result.firstIndex(of: previous) {
                result.insert(key, at: at + 1)
            } else {
                result.insert(key, at: 0)
            }
        }
        if placed.count < members.count { result += members.subtracting(placed).sorted() }
        return result
    }

    /// The stored pages of an order, in order: each page's number and members.
    func storedOrder(_ directoryKey: UInt64, snapshot: Snapshot) throws -> [(number: UInt64, members: [UInt64])] {
        do {
            guard let directory = try snapshot.withValue(forKey: directoryKey, OrderPages.decodeDirectory) else {
                return []
            }
            let keyspace = EngineKey(rawValue: directoryKey).keyspace
            return try directory.pages.map { page in
                let key = EngineKey(keyspace: keyspace, id: OrderPages.pageBase | page.number).rawValue
                let members = try snapshot.withValue(forKey: key) { raw in try Self.decodeOrder(raw) } ?? []
                return (page.number, members)
            }
        } catch let e as LogbookError {
            throw e
        } catch {
            throw LogbookError(.store, "the order of an ordered relationship is malformed")
        }
    }

    static func decodeOrder(_ raw: UnsafeRawBufferPointer) throws -> [UInt64] {
        var o = 0
        do {
            let count = try RecordCodec.length(raw, &o)
            guard count <= raw.count else { throw RecordCodec.Malformed() }
            var keys: [UInt64] = []
            keys.reserveCapacity(count)
            for _ in 0..<count {
                let code = try RecordCodec.varint(raw, &o)
                keys.append(EngineKey(keyspace: UInt16(truncatingIfNeeded: code), id: code >> 16).rawValue)
            }
            return keys
        } catch {
            throw LogbookError(.store, "a page of an ordered relationship is malformed")
        }
    }

    static func encodeOrder(_ keys: ArraySlice<UInt64>) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(keys.count * 3 + 4)
        RecordCodec.appendVarint(UInt64(keys.count), &out)
        for k in keys { RecordCodec.appendVarint(RecordCodec.objectCode(k, .anyObject), &out) }
        return out
    }

    /// Makes `keys` the members of an ordered relationship, in this order: members leave and
    /// join through the usual paths (inverses follow), then the order is recorded.
    ///
    /// `before`: the members the caller's list was made from (an insertion, a removal or a
    /// replacement at an index): only those it took out leave. The set is read from the store
    /// at each access, and another process's save may add a member between the caller's read
    /// and this one; that member stays (its place follows its stored neighbours). Without
    /// `before` (the whole relationship set at once), every member not in `objects` leaves.
    /// (Found by the contention test of real processes: an insertion took out a member another
    /// process had just added, leaving the member's to-one naming the owner.)
    func setOrder(_ owner: ManagedObject, _ r: Int, _ objects: [ManagedObject], changing before: [ManagedObject]? = nil)
        throws
    {
        var seen = Set<UInt64>()
        let unique = objects.filter { seen.insert($0.engineKey).inserted }
        for o in unique { try checkRelated(owner, r, o) }
        let current = Set(try orderedKeys(owner.engineKey, owner.layout, r))
        let leaving = before.map { Set($0.map(\.engineKey)).intersection(current) } ?? current
        let gone = try leaving.subtracting(seen).map { try object(forKey: $0) }
        if !gone.isEmpty { try removeRelated(owner, relationship: r, gone) }
        let joining = unique.filter { !current.contains($0.engineKey) }
        if !joining.isEmpty { try addRelated(owner, relationship: r, joining) }
        orderOverrides[setKey(owner.engineKey, owner.layout, r)] = unique.map(\.engineKey)
        touch(owner)
    }

    /// Keeps a pending order in step when a member joins or leaves from elsewhere (the inverse
    /// side): a new member goes last.
    func orderMemberAdded(_ member: UInt64, setKey k: UInt64) {
        guard orderOverrides[k] != nil, !orderOverrides[k]!.contains(member) else { return }
        orderOverrides[k]!.append(member)
    }

    func orderMemberRemoved(_ member: UInt64, setKey k: UInt64) {
        orderOverrides[k]?.removeAll { $0 == member }
    }

    /// The order pages a save writes: for each pending order, the pages whose run of members
    /// changed and the directory; pages no longer used are deleted. Runs under the save lock.
    func writeOrders(into t: inout Transaction, skipping deletedSets: Set<UInt64>) throws {
        guard !orderOverrides.isEmpty else { return }
        let snapshot = container.store.snapshot()
        for (k, pending) in orderOverrides where !deletedSets.contains(k) {
            guard let directoryKey = orderKey(ofSet: k) else { continue }
            let keyspace = EngineKey(rawValue: directoryKey).keyspace
            let old = try storedOrder(directoryKey, snapshot: snapshot)
            // The order written has exactly the members the set will have after this save
            // (another save may have added or removed some since this context's order was made).
            var members = Set(snapshot.members(ofSet: k))
            if let removed = setRemoves[k] { members.subtract(removed) }
            if let added = setAdds[k] { members.formUnion(added) }
            let keys =
                pending.count == members.count && pending.allSatisfy(members.contains)
                ? pending : Self.reconcileOrder(pending, with: old.flatMap(\.members), members: members)
            var startOf: [UInt64: Int] = [:]
            for (i, page) in old.enumerated() { if let first = page.members.first { startOf[first] = i } }
            var directory = OrderPages.Directory()
            var used = Set<UInt64>()
            var dirty: [UInt64] = []
            func flush() {
                var start = 0
                while start < dirty.count {
                    // A run a little longer than a page stays one page (an insertion into a full
                    // page rewrites that page, not two).
                    let rest = dirty.count - start
                    let end = rest <= OrderPages.pageSize * 3 / 2 ? dirty.count : start + OrderPages.pageSize
                    let number = container.nextOrderPage(keyspace: keyspace, snapshot: snapshot)
                    t.put(
                        EngineKey(keyspace: keyspace, id: OrderPages.pageBase | number).rawValue,
                        value: Self.encodeOrder(dirty[start..<end]))
                    directory.pages.append((number, end - start))
                    start = end
                }
                dirty.removeAll(keepingCapacity: true)
            }
            var p = 0
            var nextOld = 0
            while p < keys.count {
                // A stored page whose members come next, unchanged, is kept as it is.
                if let j = startOf[keys[p]], j >= nextOld {
                    let page = old[j].members
                    if p + page.count <= keys.count && keys[p..<(p + page.count)].elementsEqual(page) {
                        flush()
                        directory.pages.append((old[j].number, page.count))
                        used.insert(old[j].number)
                        p += page.count
                        nextOld = j + 1
                        continue
                    }
                }
                dirty.append(keys[p])
                p += 1
            }
            flush()
            for page in old where !used.contains(page.number) {
                t.delete(EngineKey(keyspace: keyspace, id: OrderPages.pageBase | page.number).rawValue)
            }
            t.put(directoryKey, value: OrderPages.encodeDirectory(directory))
        }
    }

    /// Deletes an owner's order (its directory and pages). Runs under the save lock.
    func deleteOrder(_ directoryKey: UInt64, snapshot: Snapshot, into t: inout Transaction) throws {
        let keyspace = EngineKey(rawValue: directoryKey).keyspace
        for page in try storedOrder(directoryKey, snapshot: snapshot) {
            t.delete(EngineKey(keyspace: keyspace, id: OrderPages.pageBase | page.number).rawValue)
        }
        if snapshot.contains(directoryKey) { t.delete(directoryKey) }
    }

    /// The order record's key for a set key (same owner serial, the relationship's order keyspace).
    func orderKey(ofSet k: UInt64) -> UInt64? {
        let ks = EngineKey(rawValue: k).keyspace
        for (e, sets) in storeLayout.setKeyspace.enumerated() {
            for (r, s) in sets.enumerated() where s == ks {
                if let o = storeLayout.orderKeyspace[e][r] { return EngineKey(rawValue: k).inKeyspace(o).rawValue }
            }
        }
        return nil
    }
}

extension ManagedObjectContext {
    /// A fetched property's value: the objects of its destination that match its predicate,
    /// with `$FETCH_SOURCE` standing for `source` (evaluated each time it is read).
    func evaluate(_ fetched: FetchedPropertyDescription, source: ManagedObject) throws -> [ManagedObject] {
        var request = FetchRequest<ManagedObject>(entityName: fetched.destination)
        if let format = fetched.predicateFormat {
            request.predicate = try FetchPredicate(format: format).substituting(["FETCH_SOURCE": source])
        }
        return try fetch(request)
    }
}
