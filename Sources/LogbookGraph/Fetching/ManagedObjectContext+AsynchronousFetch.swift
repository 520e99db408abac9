import Dispatch
import Foundation
import LogbookEngine

extension ManagedObjectContext {
    /// Starts an asynchronous fetch and returns at once. The records are read and filtered on
    /// another thread, from one snapshot of the store; the completion then runs on this
    /// context's queue with the objects, which load batch by batch as they are touched, so the
    /// queue is never held for long. Objects this context holds come back as they are, with
    /// their unsaved changes; objects it inserted meanwhile that match are included.
    ///
    /// Only contexts with a queue can fetch asynchronously: a `.confinement` context throws
    /// `.wrongConcurrencyType`.
    @discardableResult
    public func execute<T: ManagedObject>(_ request: AsynchronousFetchRequest<T>) throws -> AsynchronousFetchResult<T> {
        guard let queue else {
            throw LogbookError(
                .wrongConcurrencyType,
                "an asynchronous fetch needs a context with a queue (.mainQueue or .privateQueue); this context is confined to the thread that made it"
            )
        }
        let fetch = request.fetchRequest
        if try parent != nil || spansSubentities(fetch, model.layout(named: fetch.entityName)) {
            // A child's view is its parents' unsaved state over the store, and a fetch across
            // sub-entities merges several entities: both are fetched on the context's queue.
            return fetchOnQueue(request, queue: queue)
        }
        let layout = try model.layout(named: fetch.entityName)
        guard layout.managedClass is T.Type else {
            throw LogbookError(
                .typeMismatch, "\(layout.name) objects are \(layout.managedClass), not \(T.self)", entity: layout.name)
        }
        let sortKeys = try SortKey.resolve(fetch.sortDescriptors, layout: layout, model: model, allowsPaths: false)
        let plan = try plan(fetch, layout: layout)
        // What other writing processes committed is read first, as a fetch reads it.
        try catchUpWithOtherWriters()
        let snapshot = readSnapshot()
        let result = AsynchronousFetchResult<T>(progress: FetchProgress(), queue: queue)
        // A context of its own reads on the worker thread (objects never cross threads).
        let worker = container.newContext(concurrencyType: .confinement)
        let job = UncheckedSendable((self, worker, request, result))
        DispatchQueue.global(qos: .userInitiated).async {
            let (context, worker, request, result) = job.value
            let outcome: Swift.Result<FoundRows, LogbookError>
            do {
                outcome = .success(
                    try worker.readInBatches(
                        fetch, plan: plan, sortKeys: sortKeys, layout: layout,
                        snapshot: snapshot, progress: result.progress))
            } catch let e as LogbookError {
                outcome = .failure(e)
            } catch {
                outcome = .failure(LogbookError(.store, "\(error)"))
            }
            let rows = UncheckedSendable(outcome)
            queue.async {
                switch rows.value {
                case .success(let found):
                    context.handOver(
                        found, request: request, sortKeys: sortKeys, layout: layout, snapshot: snapshot, result: result,
                        queue: queue)
                    return
                case .failure(let e):
                    result.error = e
                }
                result.progress.update(finished: true)
                request.completion(result)
            }
        }
        return result
    }

    /// An asynchronous fetch run whole on the context's queue (a child context, or a fetch
    /// across sub-entities).
    private func fetchOnQueue<T: ManagedObject>(_ request: AsynchronousFetchRequest<T>, queue: DispatchQueue)
        -> AsynchronousFetchResult<T>
    {
        let result = AsynchronousFetchResult<T>(progress: FetchProgress(), queue: queue)
        let job = UncheckedSendable((self, request, result))
        queue.async {
            let (context, request, result) = job.value
            do { result.finalResult = try context.fetch(request.fetchRequest) } catch let e as LogbookError {
                result.error = e
            } catch {
                result.error = LogbookError(.store, "\(error)")
            }
            result.progress.update(finished: true)
            request.completion(result)
        }
        return result
    }

    /// Hands the rows a worker found to the context on its queue: the objects are made in steps
    /// of `handOverStep`, each a block of its own on the queue, so that the queue is never held
    /// for long; the completion runs after the last.
    private func handOver<T: ManagedObject>(
        _ found: FoundRows, request: AsynchronousFetchRequest<T>, sortKeys: [SortKey], layout: EntityLayout,
        snapshot: Snapshot, result: AsynchronousFetchResult<T>, queue: DispatchQueue
    ) {
        let fetch = request.fetchRequest
        let context = UncheckedSendable(self)
        // The objects read the store as this context sees it now, not as the worker's snapshot
        // held it: a save merged here while the worker ran is in what they read (their keys
        // and order are the snapshot's).
        let snapshot = readSnapshot()
        let keys = finalKeys(found, request: request.fetchRequest, sortKeys: sortKeys, layout: layout)
        let built = UncheckedSendable(Box<[T]>([]))
        built.value.value.reserveCapacity(keys.count)
        var paged = fetch
        paged.fetchBatchSize = max(fetch.fetchBatchSize, 1000)
        paged.window = .all
        let step = max(
            paged.fetchBatchSize, Self.handOverStep / paged.fetchBatchSize * paged.fetchBatchSize)
        let pagedRequest = paged
        @Sendable func handOver(from start: Int) {
            let end = min(start + step, keys.count)
            // Typed a step at a time too (a check of each object in debug builds: 80 ms for a
            // million in the last block, when it was done once at the end).
            built.value.value.append(
                contentsOf: Self.typed(
                    context.value.batchedFaults(
                        Array(keys[start..<end]), request: pagedRequest, layout: layout, snapshot: snapshot),
                    as: T.self))
            if end < keys.count {
                queue.async { handOver(from: end) }
                return
            }
            result.finalResult = built.value.value
            result.progress.update(finished: true)
            request.completion(result)
        }
        handOver(from: 0)
    }

    /// What the worker of an asynchronous fetch found: keys in order and their sort values,
    /// `width` per key, in one flat array (a million rows are two allocations, not a million).
    struct FoundRows {
        var keys: [UInt64] = []
        var values: [FieldValue] = []
        var width = 0

        func value(_ row: Int, _ n: Int) -> FieldValue { values[row * width + n] }
    }

    /// On the worker: the keys that match, with their sort values, read 2,000 at a time.
    func readInBatches<T>(
        _ fetch: FetchRequest<T>, plan: ExecutionPlan, sortKeys: [SortKey], layout: EntityLayout,
        snapshot: Snapshot, progress: FetchProgress
    ) throws -> FoundRows {
        let keys = try candidateKeys(plan, layout: layout, snapshot: snapshot, stopAfter: nil)
        progress.update(completed: 0, total: Int64(keys.count))
        var found = FoundRows(width: sortKeys.count)
        if plan.residual == nil {
            found.keys.reserveCapacity(keys.count)
            found.values.reserveCapacity(keys.count * sortKeys.count)
        }
        var evaluator = PredicateEvaluator(format: fetch.predicate?.format ?? "")
        var done = 0
        while done < keys.count {
            if progress.isCancelled {
                throw LogbookError(.cancelled, "the fetch was cancelled after \(done) of \(keys.count) records")
            }
            let chunk = Array(keys[done..<min(done + 2000, keys.count)])
            // Only the first chunk's blocks go to the shared cache (a large fetch reads each
            // block once: see `FaultStream.flush`).
            for o in try materialize(chunk, layout: layout, snapshot: snapshot, caching: done == 0 ? nil : false) {
                if let residual = plan.residual, try !evaluator.test(residual, object: o) { continue }
                found.keys.append(o.engineKey)
                for k in sortKeys { found.values.append(o.slots[k.slot]) }
            }
            reset()
            done += chunk.count
            progress.update(completed: Int64(done))
        }
        if !sortKeys.isEmpty && !plan.orderFromIndex {
            var order = Array(found.keys.indices)
            order.sort { a, b in
                for (n, k) in sortKeys.enumerated() {
                    let c = SortKey.compare(found.value(a, n), found.value(b, n), k.comparison)
                    if c != 0 { return k.ascending ? c < 0 : c > 0 }
                }
                return found.keys[a] < found.keys[b]
            }
            var sorted = FoundRows(width: found.width)
            sorted.keys = order.map { found.keys[$0] }
            sorted.values.reserveCapacity(found.values.count)
            for i in order { for n in 0..<found.width { sorted.values.append(found.value(i, n)) } }
            found = sorted
        }
        return found
    }

    /// How many objects an asynchronous fetch's hand-over makes in one block on the queue
    /// (10,000: about 35 ms in a debug build, a few in a release build; blocks sent to the
    /// queue meanwhile wait at most that long).
    static let handOverStep = 10_000

    /// On the context's queue: the keys of the result, with the context's own unsaved inserts
    /// that match placed in order and its deletions left out, after offset and limit.
    func finalKeys<T>(
        _ found: FoundRows, request: FetchRequest<T>, sortKeys: [SortKey], layout: EntityLayout
    ) -> [UInt64] {
        var keys = found.keys
        // Inserted objects that match, placed by binary search among the found rows.
        var placed: [(at: Int, key: UInt64)] = []
        var evaluator = PredicateEvaluator(format: request.predicate?.format ?? "")
        for o in inserted.values where o.layout === layout {
            if let p = request.predicate, (try? evaluator.test(p.node, object: o)) != true { continue }
            let values = sortKeys.map { o.slots[$0.slot] }
            let at = found.keys.indices.partitioningIndex { row in
                for (n, k) in sortKeys.enumerated() {
                    let c = SortKey.compare(found.value(row, n), values[n], k.comparison)
                    if c != 0 { return k.ascending ? c > 0 : c < 0 }
                }
                return found.keys[row] > o.engineKey
            }
            placed.append((at, o.engineKey))
        }
        if !placed.isEmpty {
            // Inserted from the back, so that earlier positions stay valid.
            for p in placed.sorted(by: { ($0.at, $0.key) > ($1.at, $1.key) }) { keys.insert(p.key, at: p.at) }
        }
        if !deleted.isEmpty { keys.removeAll { deleted[$0] != nil } }
        let slice = request.window.apply(to: keys)
        return Array(slice)
    }
}
