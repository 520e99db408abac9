import Foundation
import LogbookEngine

// The fetch's entry paths, each planned by `plan(_:layout:)` (`ManagedObjectContext+Plan.swift`,
// then `FetchPlanner`) and windowed by `ResultWindow`:
//
// - `fetch(_:)` → `fetchDirectly` (the index or key order gives the result: objects made
//   straight from the records) or `fetchObjects` (everything else: candidates from
//   `storeMatches`/`candidateKeys`, registered objects and unsaved changes merged, sorted);
//   `fetchObjects` hands sub-entity trees to `fetchAcross` (below) and child contexts to
//   `fetchInChild` (`ManagedObjectContext+ChildFetch.swift`).
// - `fetchObjectIDs(_:)` and `count(for:)`: from the index or the records' filter without
//   making objects where they can, else through `fetchObjects`.
// - `fetchDictionaries(_:)` (`ManagedObjectContext+Dictionaries.swift`), `enumerateObjects`
//   (below), asynchronous fetches (`ManagedObjectContext+AsynchronousFetch.swift`) and the
//   fetched-results controller (`FetchedResultsController.swift`, through `fetch`).
// - Batch updates and deletes find their records with `candidateKeys` too
//   (`Requests/`).
//
// Scans of records (split across cores, each record tested by a compiled `RecordFilter`) are
// in `StoreScan.swift`; objects are made from records by `recordFault` and `RecordCodec`.

extension ManagedObjectContext {
    /// The objects a request asks for. An unknown entity is an error; no match is an empty array.
    ///
    /// Conditions on indexed attributes are answered from the store's ordered index (see
    /// `explain`); the rest are checked on each object. Unsaved inserts, changes and deletions
    /// of the context are taken into account.
    public func fetch<T: ManagedObject>(_ request: FetchRequest<T>) throws -> [T] {
        try catchUpWithOtherWriters()
        let layout = try model.layout(named: request.entityName)
        for l in spans(request, layout) where !(l.managedClass is T.Type) {
            throw LogbookError(
                .typeMismatch, "\(l.name) objects are \(l.managedClass), not \(T.self)", entity: l.name)
        }
        // Planned once (a plan may run sub-fetches for key paths through relationships).
        let plan = try plan(request, layout: layout)
        if let direct = try fetchDirectly(request, layout: layout, plan: plan) { return direct }
        return Self.typed(try fetchObjects(request, layout: layout, plan: plan), as: T.self)
    }

    /// A fetch of a root context that is not pinned to a version reads what other writing
    /// processes committed too, as a fetch over SQLite reads the database as it is (one read
    /// of `TAIL` when none did).
    func catchUpWithOtherWriters() throws {
        guard parent == nil, pinnedSnapshot == nil, !container.store.isReadOnly else { return }
        do { try container.store.catchUpIfOthersCommitted() } catch { throw LogbookError.wrap(error) }
    }

    /// The common case made cheap: when the index (or key order) gives the result and its
    /// order, nothing is unsaved and the context holds none of the objects, they are read
    /// straight into the result, in order, with no intermediate array. Nil when it does not apply.
    func fetchDirectly<T: ManagedObject>(_ request: FetchRequest<T>, layout: EntityLayout, plan: ExecutionPlan) throws
        -> [T]?
    {
        guard request.fetchBatchSize == 0, !spansSubentities(request, layout), !considersPendingChanges(request, layout)
        else { return nil }
        guard plan.objectResidual == nil, plan.orderFromIndex || request.sortDescriptors.isEmpty else { return nil }
        _ = try SortKey.resolve(request.sortDescriptors, layout: layout, model: model)
        let snapshot = readSnapshot()
        let stopAfter = plan.limitPushedDown ? request.window.stopAfter : nil
        if plan.residual != nil || plan.index == nil {
            // A filter on records, or a scan: the matches come with their bytes.
            var matches = try storeMatches(plan, layout: layout, snapshot: snapshot, output: .records, limit: stopAfter)
            matches.apply(request.window)
            let keys = matches.keys
            let held = registry.withLock { table in !table.isEmpty && keys.contains { table[$0] != nil } }
            guard !held else { return nil }
            let objects = faults(matches, layout: layout, snapshot: snapshot)
            lastFetchRecordsRead = matches.examined
            return Self.typed(objects, as: T.self)
        }
        if plan.points == nil, !layout.inTree, let index = plan.index {
            switch try streamedFaults(
                index: index, plan: plan, window: request.window, layout: layout, snapshot: snapshot)
            {
            case .made(let objects):
                lastFetchRecordsRead = objects.count
                return Self.typed(objects, as: T.self)
            case .held: return nil
            case .tooLarge: break  // read below as whole objects
            }
        }
        var keys = try candidateKeys(plan, layout: layout, snapshot: snapshot, stopAfter: stopAfter)
        request.window.apply(to: &keys)
        let held = registry.withLock { table in !table.isEmpty && keys.contains { table[$0] != nil } }
        guard !held else { return nil }
        let objects = try faultsWithRecords(keys, layout: layout, snapshot: snapshot)
        lastFetchRecordsRead = objects.count
        return Self.typed(objects, as: T.self)
    }

    /// An array of objects the caller knows to be `T`s (made from a layout whose class is a
    /// `T`), as `[T]` without copying: arrays of class references share one layout, and an
    /// upcast array is the same storage too. Checked in debug builds.
    static func typed<T: ManagedObject>(_ objects: [ManagedObject], as: T.Type) -> [T] {
        if T.self == ManagedObject.self { return unsafeBitCast(objects, to: [T].self) }
        assert(objects.allSatisfy { $0 is T })
        return unsafeBitCast(objects, to: [T].self)
    }

    /// The IDs of the objects a request asks for; when the index settles the whole predicate
    /// and order, no object is read at all (Core Data's object-ID result type).
    public func fetchObjectIDs<T: ManagedObject>(_ request: FetchRequest<T>) throws -> [ObjectID] {
        try catchUpWithOtherWriters()
        let layout = try model.layout(named: request.entityName)
        let plan = try plan(request, layout: layout)
        if plan.objectResidual == nil && !considersPendingChanges(request, layout) && !spansSubentities(request, layout)
            && (plan.orderFromIndex || request.sortDescriptors.isEmpty)
        {
            // The index, or a scan with the filter on records: no object is made.
            let matches = try storeMatches(
                plan, layout: layout, snapshot: readSnapshot(), output: .keys,
                limit: request.window.stopAfter)
            lastFetchRecordsRead = matches.examined
            return request.window.apply(to: matches.keys).map { ObjectID(store: storeLayout.identity, key: $0) }
        }
        var loading = request
        loading.fetchBatchSize = 0
        return try fetchObjects(loading, layout: layout, plan: plan).map(\.objectID)
    }

    /// The number of objects a request would return: from the index (or the entity's count)
    /// without reading objects when the index settles the predicate and nothing is unsaved.
    public func count<T: ManagedObject>(for request: FetchRequest<T>) throws -> Int {
        try catchUpWithOtherWriters()
        let layout = try model.layout(named: request.entityName)
        let plan = try plan(request, layout: layout)
        var n: Int
        if spansSubentities(request, layout) && plan.residual == nil && !considersPendingChanges(request, layout) {
            // Each entity of the tree counted on its own, without reading objects.
            var part = request
            part.includesSubentities = false
            part.window = .all
            n = 0
            for k in layout.descendants {
                part.entityName = model.layouts[k].name
                n += try count(for: part)
            }
        } else if plan.residual != nil && plan.objectResidual == nil && !considersPendingChanges(request, layout)
            && !spansSubentities(request, layout)
        {
            // The filter compiles to a test on records: counted on the records, no object made.
            let matches = try storeMatches(
                plan, layout: layout, snapshot: readSnapshot(), output: .count,
                limit: request.window.stopAfter)
            n = matches.count
            lastFetchRecordsRead = matches.examined
        } else if plan.residual == nil && !considersPendingChanges(request, layout) {
            let snapshot = readSnapshot()
            if layout.inTree || plan.points != nil, plan.index != nil {
                // The index is shared with the rest of the tree: its keys are filtered.
                n = try candidateKeys(plan, layout: layout, snapshot: snapshot, stopAfter: nil).count
            } else if let index = plan.index {
                n = try snapshot.indexCount(index: index, from: plan.lowerBound, to: plan.upperBound)
            } else {
                n = snapshot.count(inKeyspace: storeLayout.keyspace[layout.index])
            }
            lastFetchRecordsRead = 0
        } else {
            var unlimited = request
            unlimited.window = .all
            unlimited.fetchBatchSize = 0
            n = try fetchObjects(unlimited, layout: layout).count
        }
        return request.window.count(of: n)
    }

    /// Faults for `keys` (after offset and limit), grouped in batches that load together.
    func batchedFaults<T: ManagedObject>(
        _ keys: [UInt64], request: FetchRequest<T>, layout: EntityLayout, snapshot: Snapshot
    ) -> [ManagedObject] {
        let slice = request.window.apply(to: keys)
        var result: [ManagedObject] = []
        result.reserveCapacity(slice.count)
        var batch: FaultBatch?
        for (n, key) in slice.enumerated() {
            if n % request.fetchBatchSize == 0 { batch = makeFaultBatch(snapshot) }
            if let o = registered(key) {
                result.append(o)
                continue
            }
            let o = layout.managedClass.init(
                ManagedObject.Bootstrap(
                    binding: binding(layout), key: key, slots: [], fault: true))
            batch!.append(o)
            register(o)
            result.append(o)
        }
        lastFetchRecordsRead = 0
        return result
    }

    /// Whether a request must take unsaved changes into account (a child context always does:
    /// its parents' unsaved changes are its view of the store).
    func considersPendingChanges<T>(_ request: FetchRequest<T>, _ layout: EntityLayout) -> Bool {
        parent != nil || (request.includesPendingChanges && hasUnsavedChanges(layout))
    }

    func hasUnsavedChanges(_ layout: EntityLayout) -> Bool {
        inserted.values.contains { $0.layout === layout } || updated.values.contains { $0.layout === layout }
            || deleted.values.contains { $0.layout === layout }
    }

    /// The entities a request covers: the entity, and its sub-entities unless excluded.
    func spans<T>(_ request: FetchRequest<T>, _ layout: EntityLayout) -> [EntityLayout] {
        request.includesSubentities ? layout.descendants.map { model.layouts[$0] } : [layout]
    }

    func spansSubentities<T>(_ request: FetchRequest<T>, _ layout: EntityLayout) -> Bool {
        request.includesSubentities && layout.descendants.count > 1
    }

    /// The records of the store that `plan` selects (its index range or a scan of the entity,
    /// then its compiled record filter), read from `snapshot`: at most `limit`, in the plan's
    /// order (index order, else key order).
    func storeMatches(
        _ plan: ExecutionPlan, layout: EntityLayout, snapshot: Snapshot, output: ScanOutput, limit: Int?
    ) throws -> ScanMatches {
        try RecordCodec.readingRecords(of: layout) {
            if plan.index == nil && plan.recordFilter == nil && output != .records {
                // Every key of the entity: the primary index alone answers.
                let keys = snapshot.keys(inKeyspace: storeLayout.keyspace[layout.index], limit: limit)
                return ScanMatches(count: keys.count, keys: output == .keys ? keys : [])
            }
            if plan.index == nil {
                return try StoreScan.scan(
                    snapshot, keyspace: storeLayout.keyspace[layout.index], filter: plan.recordFilter, output: output,
                    limit: limit)
            }
            let keys = try candidateKeys(
                plan, layout: layout, snapshot: snapshot, stopAfter: plan.recordFilter == nil ? limit : nil)
            return try StoreScan.filter(
                keys, snapshot: snapshot, filter: plan.recordFilter, output: output, limit: limit)
        }
    }

    func candidateKeys(_ plan: ExecutionPlan, layout: EntityLayout, snapshot: Snapshot, stopAfter: Int?) throws
        -> [UInt64]
    {
        var keys: [UInt64] = []
        if let index = plan.index, let points = plan.points {
            // Each value's entries, then key order (the points' order means nothing to a user).
            for p in points {
                keys += try snapshot.primaryKeys(
                    index: index, from: IndexBound(p, inclusive: true), to: IndexBound(p, inclusive: true))
            }
            if layout.inTree {
                let keyspace = storeLayout.keyspace[layout.index]
                keys.removeAll { EngineKey(rawValue: $0).keyspace != keyspace }
            }
            keys.sort()
            if let stopAfter, keys.count > stopAfter { keys.removeLast(keys.count - stopAfter) }
        } else if let index = plan.index, layout.inTree {
            // An index of an inheritance tree holds the keys of all its entities: keep this one's.
            let keyspace = storeLayout.keyspace[layout.index]
            keys = try snapshot.primaryKeys(
                index: index, from: plan.lowerBound, to: plan.upperBound, reverse: plan.reverse, limit: nil)
            keys.removeAll { EngineKey(rawValue: $0).keyspace != keyspace }
            if let stopAfter, keys.count > stopAfter { keys.removeLast(keys.count - stopAfter) }
        } else if let index = plan.index {
            keys = try snapshot.primaryKeys(
                index: index, from: plan.lowerBound, to: plan.upperBound, reverse: plan.reverse, limit: stopAfter)
        } else {
            keys = snapshot.keys(inKeyspace: storeLayout.keyspace[layout.index], limit: stopAfter)
        }
        return keys
    }

    /// What `streamedFaults` made.
    enum StreamedFaults {
        /// The objects, registered.
        case made([ManagedObject])
        /// An object of the context is among the keys: nothing registered.
        case held
        /// A chunk's records passed 4 GiB: nothing registered.
        case tooLarge
    }

    /// How many keys `streamedFaults` reads at a time.
    static let streamChunk = 8192

    /// The faults of a fetch whose index gives its keys and order (no filter, nothing unsaved),
    /// made as the index is walked, `streamChunk` keys at a time: each chunk's records are
    /// copied into an arena of their own, packed (`RecordArena`), and the chunk's
    /// objects made from them. No array of every key, every record's span or every record's
    /// location is made, as the general path makes them: 24 bytes an object less at the
    /// fetch's peak, and no arena grown by copying.
    func streamedFaults(
        index: IndexID, plan: ExecutionPlan, window: ResultWindow, layout: EntityLayout, snapshot: Snapshot
    ) throws -> StreamedFaults {
        let expected = window.count(
            of: try snapshot.indexCount(index: index, from: plan.lowerBound, to: plan.upperBound))
        var stream = FaultStream(
            context: self, layout: layout, snapshot: snapshot, window: window, expected: expected,
            checkHeld: registry.withLock { !$0.isEmpty })
        do {
            try snapshot.forEachIndexEntry(
                index: index, from: plan.lowerBound, to: plan.upperBound, reverse: plan.reverse
            ) { _, key in try stream.take(key) }
            if !stream.held { try stream.flush() }
        } catch is FaultStream.TooLarge {
            return .tooLarge
        } catch is RecordCodec.Malformed {
            throw LogbookError(.store, "a record of \(layout.name) is malformed", entity: layout.name)
        }
        if stream.held { return .held }
        register(all: stream.objects)
        return .made(stream.objects)
    }

    /// Objects for keys that no object of the context holds, read from `snapshot` and
    /// registered, in the order of `keys`. `caching` as in `Snapshot.forEachValue(forKeys:caching:_:)`.
    func materialize(
        _ keys: [UInt64], layout: EntityLayout, snapshot: Snapshot, register: Bool = true, caching: Bool? = nil
    ) throws -> [ManagedObject] {
        var created: [ManagedObject] = []
        created.reserveCapacity(keys.count)
        // Values come in storage order, which is the keys' order when they were written in that
        // order: then objects are appended as they come; else they are placed afterwards.
        var inOrder = true
        var stray: [Int] = []
        var strayObjects: [ManagedObject] = []
        // Everything the loop needs, taken out of `self` once.
        let destinations = layout.toOne.map { storeLayout.keyspace[layout.relationshipDestination[$0]] }
        let attributeCount = layout.attributeCount
        let binding = binding(layout)
        let managedClass = layout.managedClass
        let version = snapshot.version
        try RecordCodec.readingRecords(of: layout) {
            try layout.slotKinds.withUnsafeBufferPointer { kinds in
                try snapshot.forEachValue(forKeys: keys, caching: caching) { i, key, raw in
                    let slots = try RecordCodec.decode(raw, kinds: kinds) { destinations[$0 - attributeCount] }
                    let o = managedClass.init(
                        ManagedObject.Bootstrap(
                            binding: binding, key: key, slots: slots, fault: false, version: version))
                    if inOrder && i == created.count {
                        created.append(o)
                    } else {
                        inOrder = false
                        stray.append(i)
                        strayObjects.append(o)
                    }
                }
            }
        }
        if !inOrder {
            var placed = [ManagedObject?](repeating: nil, count: keys.count)
            for (i, o) in created.enumerated() { placed[i] = o }
            for (i, o) in zip(stray, strayObjects) { placed[i] = o }
            created = placed.compactMap { $0 }
        }
        if register { self.register(all: created) }
        return created
    }

    /// Objects for keys no object of the context holds, as faults that keep their record's
    /// bytes (copied into one arena per fetch): a typed property reads its value from them
    /// without decoding the rest, anything else decodes the record once. In the order of `keys`.
    func faultsWithRecords(_ keys: [UInt64], layout: EntityLayout, snapshot: Snapshot) throws -> [ManagedObject] {
        let bytes: [UInt8]
        let spans: [(offset: UInt32, count: UInt32)]
        do {
            (bytes, spans) = try snapshot.copyValues(forKeys: keys)
        } catch let e as EngineError where e.code == .invalidArgument {
            return try materialize(keys, layout: layout, snapshot: snapshot)
        } catch {
            throw LogbookError.wrap(error)
        }
        var found = ScanMatches(bytes: bytes)
        if spans.allSatisfy({ $0.offset != .max }) {
            // Every record found (the common case): the arrays themselves, not copies of them
            // (16 bytes an object less at the fetch's peak).
            found.keys = keys
            found.spans = spans
        } else {
            for i in keys.indices where spans[i].offset != .max {
                found.keys.append(keys[i])
                found.spans.append(spans[i])
            }
        }
        return faults(found, layout: layout, snapshot: snapshot)
    }

    /// Registered faults for a scan's matches, each keeping its record's bytes (in one arena).
    func faults(_ matches: ScanMatches, layout: EntityLayout, snapshot: Snapshot) -> [ManagedObject] {
        let arena = RecordArena(matches.bytes, spans: matches.spans, version: snapshot.version)
        let created = matches.keys.indices.map { recordFault(matches.keys[$0], $0, arena: arena, layout: layout) }
        register(all: created)
        return created
    }

    /// An unregistered fault for `key` that keeps its record's bytes (record `index` of
    /// `arena`, read at the arena's version).
    @inline(__always)
    func recordFault(_ key: UInt64, _ index: Int, arena: RecordArena, layout: EntityLayout) -> ManagedObject {
        Self.recordFault(key, index, arena: arena, binding: binding(layout))
    }

    /// `recordFault` for a caller that holds the binding (without a call on the context).
    @inline(__always)
    static func recordFault(_ key: UInt64, _ index: Int, arena: RecordArena, binding: ObjectBinding) -> ManagedObject {
        let o = binding.layout.managedClass.init(
            ManagedObject.Bootstrap(binding: binding, key: key, slots: [], fault: true))
        o.attachRecord(arena, index: index)
        return o
    }

    /// Visits every saved object of an entity in key order (the order of insertion), reading
    /// `batchSize` records at a time from one snapshot; the objects of a batch are released
    /// after it unless something else holds them, so memory stays bounded for any store size.
    /// Unsaved inserts are not visited; unsaved changes of registered objects are seen.
    ///
    /// ```swift
    /// try context.enumerateObjects(ofEntity: "Item") { item in
    ///     print(try item.value(forKey: "name") ?? "")
    /// }
    /// ```
    public func enumerateObjects(
        ofEntity entityName: String, batchSize: Int = 1000,
        _ body: (ManagedObject) throws -> Void
    ) throws {
        let layout = try model.layout(named: entityName)
        try catchUpWithOtherWriters()
        let snapshot = readSnapshot()
        let keyspace = storeLayout.keyspace[layout.index]
        var next: UInt64 = 0
        var keys: [UInt64] = []
        keys.reserveCapacity(max(1, batchSize))
        while true {
            keys.removeAll(keepingCapacity: true)
            snapshot.forEachKey(inKeyspace: keyspace, from: next) { key in
                keys.append(key)
                return keys.count < max(1, batchSize)
            }
            guard let last = keys.last else { return }
            do {
                let known = registered(keys: keys)
                let missing = keys.indices.filter { known[$0] == nil }.map { keys[$0] }
                let created = try materialize(missing, layout: layout, snapshot: snapshot)
                var c = 0
                for i in keys.indices {
                    let o: ManagedObject
                    if let k = known[i] {
                        o = k
                    } else {
                        o = created[c]
                        c += 1
                    }
                    if o.flags.contains(.deleted) { continue }
                    if o.flags.contains(.fault) { try fulfill(o, from: snapshot) }
                    try body(o)
                }
            }
            next = last + 1
        }
    }

    /// The objects of a request, all read from one snapshot of the store (`snapshot`, or one
    /// taken now).
    /// `plan`: the request's plan when the caller has made it.
    func fetchObjects<T: ManagedObject>(
        _ request: FetchRequest<T>, layout: EntityLayout, snapshot given: Snapshot? = nil,
        plan planned: ExecutionPlan? = nil
    ) throws -> [ManagedObject] {
        let sortKeys = try SortKey.resolve(request.sortDescriptors, layout: layout, model: model)
        let plan = try planned ?? plan(request, layout: layout)
        // Sub-entities first: a child fetches each entity of the tree through its parent.
        if spansSubentities(request, layout) { return try fetchAcross(request, layout: layout, snapshot: given) }
        if let parent { return try fetchInChild(request, layout: layout, parent: parent) }
        let snapshot = given ?? readSnapshot()
        let dirty = considersPendingChanges(request, layout)
        if request.fetchBatchSize > 0 {
            return try fetchInBatches(request, layout: layout, plan: plan, snapshot: snapshot, dirty: dirty)
        }
        let stopAfter = plan.limitPushedDown && !dirty ? request.window.stopAfter : nil
        // The store's records that pass the compiled filter, with their bytes; objects are made
        // for those alone, and the rest of the filter (if any) is checked on them.
        let matches = try storeMatches(plan, layout: layout, snapshot: snapshot, output: .records, limit: stopAfter)
        var evaluator = PredicateEvaluator(format: request.predicate?.format ?? "")
        var objects = try matchedObjects(
            of: matches, request: request, layout: layout, plan: plan, snapshot: snapshot, evaluator: &evaluator)
        lastFetchRecordsRead = matches.examined
        let added = try appendPendingChanges(to: &objects, request: request, layout: layout, evaluator: &evaluator)
        if !sortKeys.isEmpty && (!plan.orderFromIndex || added) {
            // Sorting reads the slots: faults decode their records (the fetch's own, in memory).
            for o in objects where o.flags.contains(.fault) { try fulfill(o, from: snapshot) }
            SortKey.sort(&objects, by: sortKeys)
        } else if sortKeys.isEmpty && added && plan.index == nil {
            objects.sort { $0.engineKey < $1.engineKey }
        }
        let result = request.window.apply(to: objects)
        return Array(result)
    }

    /// A fetch with a batch size: faults handed out in batches that load together as the
    /// result is walked; the keys from the index when it gives the order, else from a fetch of
    /// the values (whose objects nothing else holds are released).
    private func fetchInBatches<T: ManagedObject>(
        _ request: FetchRequest<T>, layout: EntityLayout, plan: ExecutionPlan, snapshot: Snapshot, dirty: Bool
    ) throws -> [ManagedObject] {
        if plan.residual == nil && !dirty && (plan.orderFromIndex || request.sortDescriptors.isEmpty) {
            // The index gives the keys in order: no object is read until the result is walked.
            let stopAfter = plan.limitPushedDown ? request.window.stopAfter : nil
            let keys = try candidateKeys(plan, layout: layout, snapshot: snapshot, stopAfter: stopAfter)
            return batchedFaults(keys, request: request, layout: layout, snapshot: snapshot)
        }
        // Filtering or sorting needs the values: read them, keep only the keys of the result
        // (objects nothing else holds are released here), and hand out faults in batches.
        var loading = request
        loading.fetchBatchSize = 0
        let keys = try fetchObjects(loading, layout: layout, snapshot: snapshot, plan: plan).map(\.engineKey)
        let read = lastFetchRecordsRead
        var rest = request
        rest.window = .all
        let faults = batchedFaults(keys, request: rest, layout: layout, snapshot: snapshot)
        lastFetchRecordsRead = read
        return faults
    }

    /// The objects of the store's matches: those the context holds (judged on their current
    /// values, or on the stored ones when pending changes are not wanted), and faults made
    /// from the records of the others, registered; the filter's object residue checked.
    private func matchedObjects<T: ManagedObject>(
        of matches: ScanMatches, request: FetchRequest<T>, layout: EntityLayout, plan: ExecutionPlan,
        snapshot: Snapshot, evaluator: inout PredicateEvaluator
    ) throws -> [ManagedObject] {
        let keys = matches.keys
        let residual = plan.objectResidual
        var objects: [ManagedObject] = []
        objects.reserveCapacity(keys.count)
        let known = registered(keys: keys)
        let arena = RecordArena(matches.bytes, spans: matches.spans, version: snapshot.version)
        let managedClass = layout.managedClass
        var fresh: [ManagedObject] = []
        for i in keys.indices {
            if let o = known[i] {
                if o.flags.contains(.deleted) || o.flags.contains(.updated) {
                    // Changed objects are judged below on their current values, or here on
                    // the stored ones when pending changes are not wanted.
                    if request.includesPendingChanges { continue }
                    if let residual {
                        let stored = managedClass.init(
                            ManagedObject.Bootstrap(
                                binding: binding(layout), key: o.engineKey, slots: o.committed ?? o.slots,
                                fault: false))
                        if try !evaluator.test(residual, object: stored) { continue }
                    }
                    objects.append(o)
                    continue
                }
                if let residual {
                    if o.flags.contains(.fault) { try fulfill(o, from: snapshot) }
                    if try !evaluator.test(residual, object: o) { continue }
                }
                objects.append(o)
            } else {
                let o = recordFault(keys[i], i, arena: arena, layout: layout)
                fresh.append(o)
                objects.append(o)
            }
        }
        register(all: fresh)
        if let residual {
            // Checked after registering: the condition may follow relationships to other objects.
            let registeredFresh = Set(fresh.map { ObjectIdentifier($0) })
            objects = try objects.filter { o in
                guard registeredFresh.contains(ObjectIdentifier(o)) else { return true }
                return try evaluator.test(residual, object: o)
            }
        }
        return objects
    }

    /// The context's inserted and changed objects of the entity that match the request,
    /// appended (when the request includes pending changes); returns whether any was.
    private func appendPendingChanges<T: ManagedObject>(
        to objects: inout [ManagedObject], request: FetchRequest<T>, layout: EntityLayout,
        evaluator: inout PredicateEvaluator
    ) throws -> Bool {
        var added = false
        let changed =
            !request.includesPendingChanges
            ? []
            : Array(updated.values.filter { $0.layout === layout && !$0.flags.contains(.deleted) })
                + Array(inserted.values.filter { $0.layout === layout })
        for o in changed {
            if o.flags.contains(.fault) { try fulfill(o) }
            if let p = request.predicate, try !evaluator.test(p.node, object: o) { continue }
            objects.append(o)
            added = true
        }
        return added
    }
}

extension ManagedObjectContext {
    /// A fetch of an entity with sub-entities: each entity of the tree fetched on its own (with
    /// its index when the predicate allows), from one snapshot, then merged in the requested
    /// order (key order when none), offset and limit applied to the whole.
    func fetchAcross<T: ManagedObject>(
        _ request: FetchRequest<T>, layout: EntityLayout, snapshot given: Snapshot?
    ) throws -> [ManagedObject] {
        let sortKeys = try SortKey.resolve(request.sortDescriptors, layout: layout, model: model)
        if let p = request.predicate {
            // The predicate's keys are the fetched entity's: tried once on an empty object of it,
            // so that a key only some sub-entities have is an error naming the fetched entity.
            let probe = layout.managedClass.init(
                ManagedObject.Bootstrap(binding: binding(layout), key: 0, slots: layout.defaultSlots, fault: false))
            var evaluator = PredicateEvaluator(format: p.format)
            do { _ = try evaluator.test(p.node, object: probe) } catch let e as LogbookError
                where e.code == .invalidPredicate
            {
                throw e
            } catch {}
        }
        let snapshot = given ?? readSnapshot()
        var part = request
        part.includesSubentities = false
        part.fetchBatchSize = 0
        // Each entity's first offset + limit objects hold the merged result's.
        part.window = ResultWindow(offset: 0, limit: request.window.stopAfter ?? 0)
        var all: [ManagedObject] = []
        var read = 0
        for k in layout.descendants {
            part.entityName = model.layouts[k].name
            all += try fetchObjects(part, layout: model.layouts[k], snapshot: snapshot)
            read += lastFetchRecordsRead
        }
        if sortKeys.isEmpty {
            all.sort { $0.engineKey < $1.engineKey }
        } else {
            for o in all where o.flags.contains(.fault) { try fulfill(o, from: snapshot) }
            SortKey.sort(&all, by: sortKeys, mixedEntities: true)
        }
        let result = request.window.apply(to: all)
        lastFetchRecordsRead = read
        return Array(result)
    }
}

/// The state of `streamedFaults`: the keys of the chunk being gathered, and the objects made.
/// A value the walk's closure changes in place (local variables captured by the closures
/// were checked for exclusive access at run time, on every key).
struct FaultStream {
    struct TooLarge: Error {}

    let context: ManagedObjectContext
    // Unretained, as in `ManagedObject.Bootstrap` (the context holds it while the stream
    // lives): an object made is given it without a retain and release. (Calls on the context
    // itself are made once a chunk: it is weakly referenced, so its count is in a side table,
    // slower to change.)
    unowned(unsafe) let binding: ObjectBinding
    let snapshot: Snapshot
    let checkHeld: Bool
    var objects: [ManagedObject] = []
    /// The chunk's keys, and the offset of each one's record in the chunk's arena.
    var keys: [UInt64] = []
    var offsets: [UInt32]
    /// The records of the chunk, packed (`RecordArena.pack`); copied into its arena at its size.
    var scratch: [UInt8] = []
    var skip: Int
    var remaining: Int
    /// An object of the context is among the keys.
    var held = false

    /// `expected`: how many objects the walk should make (the chunk's arrays are no larger:
    /// a fetch of ten objects does not set aside room for 8,192).
    init(
        context: ManagedObjectContext, layout: EntityLayout, snapshot: Snapshot, window: ResultWindow,
        expected: Int, checkHeld: Bool
    ) {
        self.context = context
        self.binding = context.binding(layout)
        self.snapshot = snapshot
        self.checkHeld = checkHeld
        objects.reserveCapacity(expected)
        let room = min(ManagedObjectContext.streamChunk, max(expected, 1))
        keys.reserveCapacity(room)
        offsets = [UInt32](repeating: .max, count: room)
        skip = window.offset
        remaining = window.limit > 0 ? window.limit : .max
    }

    /// Takes the next key of the walk; false when the walk should stop.
    @inline(__always)
    mutating func take(_ key: UInt64) throws -> Bool {
        if skip > 0 {
            skip -= 1
            return true
        }
        keys.append(key)
        remaining -= 1
        if keys.count == ManagedObjectContext.streamChunk { try flush() }
        return !held && remaining > 0
    }

    /// Reads the chunk's records into an arena of their own and makes its objects.
    mutating func flush() throws {
        guard !keys.isEmpty else { return }
        if checkHeld && context.registry.withLock({ [keys] table in keys.contains { table[$0] != nil } }) {
            held = true
            return
        }
        if offsets.count < keys.count {
            // More keys than the index counted (it cannot: the snapshot does not change).
            offsets += repeatElement(.max, count: keys.count - offsets.count)
        }
        RecordArena.startPacking(&scratch)
        // The first chunk's blocks are cached (as any small read's); the rest are not: a fetch
        // of a whole entity reads each block once, and would push every other out of the
        // shared cache (32 MB at the peak of a fetch of 10,000,000 objects).
        try snapshot.forEachValue(forKeys: keys, caching: objects.isEmpty ? nil : false) { i, _, raw in
            guard scratch.count + raw.count <= Int(UInt32.max) else { throw TooLarge() }
            offsets[i] = UInt32(try RecordArena.pack(raw, into: &scratch))
        }
        // A copy of the chunk's exact size (the scratch buffer is used again).
        let bytes = [UInt8](unsafeUninitializedCapacity: scratch.count) { out, made in
            made = out.initialize(fromContentsOf: scratch)
        }
        let arena = RecordArena(packed: bytes, version: snapshot.version)
        for i in keys.indices where offsets[i] != .max {
            objects.append(
                ManagedObjectContext.recordFault(
                    keys[i], Int(offsets[i]), arena: arena, binding: binding))
            offsets[i] = .max
        }
        keys.removeAll(keepingCapacity: true)
    }
}
