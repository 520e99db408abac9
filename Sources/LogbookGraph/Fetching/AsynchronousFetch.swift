import Dispatch
import Foundation
import LogbookEngine

/// The progress of an asynchronous fetch: how many records it has examined so far, how many
/// there are once known, and a way to cancel it. Safe to read and cancel from any thread.
///
/// ```swift
/// result.progress.observe { p in print("\(p.completedUnitCount) of \(p.totalUnitCount)") }
/// result.progress.cancel()
/// ```
public final class FetchProgress: Sendable {
    private struct State {
        var completed: Int64 = 0
        var total: Int64 = -1
        var cancelled = false
        var finished = false
        var observers: [@Sendable (FetchProgress) -> Void] = []
    }
    private let state = Locked(State())

    /// A progress at zero, total unknown.
    public init() {}

    /// Records examined so far.
    public var completedUnitCount: Int64 { state.withLock { $0.completed } }
    /// Records to examine: -1 until the fetch knows (as Core Data's fetches report it).
    public var totalUnitCount: Int64 { state.withLock { $0.total } }
    /// Whether `cancel()` was called.
    public var isCancelled: Bool { state.withLock { $0.cancelled } }
    /// True once the fetch ended (done, failed or cancelled).
    public var isFinished: Bool { state.withLock { $0.finished } }
    /// `completedUnitCount / totalUnitCount`, 0 while the total is unknown.
    public var fractionCompleted: Double {
        state.withLock { $0.total > 0 ? Double($0.completed) / Double($0.total) : 0 }
    }

    /// Stops the fetch as soon as it next looks (between batches of records); its completion
    /// then reports `.cancelled`.
    public func cancel() { state.withLock { $0.cancelled = true } }

    /// Calls `handler` (on the fetching thread) whenever the counts change.
    public func observe(_ handler: @escaping @Sendable (FetchProgress) -> Void) {
        state.withLock { $0.observers.append(handler) }
    }

    func update(completed: Int64? = nil, total: Int64? = nil, finished: Bool = false) {
        let observers = state.withLock { s -> [@Sendable (FetchProgress) -> Void] in
            if let completed { s.completed = completed }
            if let total { s.total = total }
            if finished { s.finished = true }
            return s.observers
        }
        for o in observers { o(self) }
    }
}

/// A fetch that runs in the background and hands its result to a completion on the context's
/// queue (Core Data's `NSAsynchronousFetchRequest`).
///
/// ```swift
/// var items = FetchRequest<Item>()
/// items.sortDescriptors = [FetchSortDescriptor(key: "createdAt")]
/// let request = AsynchronousFetchRequest(fetchRequest: items) { result in
///     guard let items = result.finalResult else { return }   // on the context's queue
///     show(items)
/// }
/// let running = try context.execute(request)   // returns at once
/// running.progress.observe { print($0.completedUnitCount) }
/// ```
public final class AsynchronousFetchRequest<Result: ManagedObject>: Sendable {
    /// The request the fetch runs.
    public let fetchRequest: FetchRequest<Result>
    let completion: @Sendable (AsynchronousFetchResult<Result>) -> Void

    /// A request whose `completion` runs on the context's queue with the result (or the
    /// error). The completion is `@Sendable`: it is made where the fetch starts and runs on
    /// the context's queue, which may be another thread.
    public init(
        fetchRequest: FetchRequest<Result>, completion: @escaping @Sendable (AsynchronousFetchResult<Result>) -> Void
    ) {
        self.fetchRequest = fetchRequest
        self.completion = completion
    }
}

/// A running or finished asynchronous fetch.
public final class AsynchronousFetchResult<Result: ManagedObject>: @unchecked Sendable {
    // @unchecked: `finalResult` and `error` are written once, on the context's queue, before
    // the completion runs there; read them on that queue. `progress` is Sendable. The result
    // may still be released on any thread (it is returned, and kept, by code anywhere): its
    // objects are then released on their context's queue (`deinit`), where their context
    // looks them up, so that no lookup can find an object in the middle of its deinit.
    /// How many records the fetch has examined; cancel through it.
    public let progress: FetchProgress
    /// The objects, in the request's order, once the fetch succeeded (objects of the context,
    /// loaded batch by batch as they are touched).
    public internal(set) var finalResult: [Result]?
    /// Why the fetch produced no result (`.cancelled` when it was cancelled).
    public internal(set) var error: LogbookError?

    /// The queue of the context the objects belong to (nil for a confined context).
    let queue: DispatchQueue?

    init(progress: FetchProgress, queue: DispatchQueue? = nil) {
        self.progress = progress
        self.queue = queue
    }

    deinit {
        guard let queue, let objects = finalResult, !objects.isEmpty else { return }
        finalResult = nil
        // The last references go on the context's queue (the objects leave its registry there).
        let release = UncheckedSendable(objects)
        queue.async { _ = release }
    }

    /// Cancels the fetch (see `FetchProgress.cancel()`).
    public func cancel() { progress.cancel() }
}

/// A mutable value shared by the steps of a hand-over (all on one queue).
final class Box<Value> {
    var value: Value
    init(_ value: Value) { self.value = value }
}

extension RandomAccessCollection where Index == Int {
    /// The first index whose element satisfies `belongsAfter` (which must be false, then true).
    func partitioningIndex(where belongsAfter: (Element) -> Bool) -> Int {
        var low = startIndex
        var high = endIndex
        while low < high {
            let mid = (low + high) / 2
            if belongsAfter(self[mid]) { high = mid } else { low = mid + 1 }
        }
        return low
    }
}
