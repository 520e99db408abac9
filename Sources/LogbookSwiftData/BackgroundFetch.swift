import Foundation
import LogbookEngine
import LogbookGraph

/// How far a background fetch has got (a `Sendable` snapshot of its `FetchProgress`).
public struct ModelFetchProgress: Sendable, Hashable {
    /// Records examined so far.
    public var completedUnitCount: Int64
    /// Records to examine (0 while unknown).
    public var totalUnitCount: Int64
    /// Whether the fetch has ended.
    public var isFinished: Bool
}

/// A fetch running in the background (`ModelContainer.startFetch(_:)`): its identifiers when it
/// ends, its progress as an asynchronous sequence, and a way to stop it.
///
/// ```swift
/// let fetch = try container.startFetch(FetchDescriptor<Book>(predicate: #Predicate { $0.pages > 500 }))
/// Task { for await p in fetch.progress { print(p.completedUnitCount, "of", p.totalUnitCount) } }
/// let ids = try await fetch.identifiers          // throws CancellationError when cancelled
/// let books = ids.map { context.model(for: $0) as! Book }
/// ```
public final class ModelFetch<T: PersistentModel>: Sendable {
    private let running: Locked<AsynchronousFetchResult<ManagedObject>?>
    private let state = BackgroundFetchState()
    // The context the fetch runs in: kept alive until it ends.
    private let context: UncheckedSendable<ManagedObjectContext>

    init(container: ModelContainer, request: FetchRequest<ManagedObject>) throws {
        let context = container.persistentContainer.newContext(concurrencyType: .privateQueue)
        self.context = UncheckedSendable(context)
        running = Locked(nil)
        let state = self.state
        let asynchronous = AsynchronousFetchRequest(fetchRequest: request) { result in
            // On the fetch context's queue: the objects become identifiers there.
            let ids: Result<[PersistentIdentifier], any Error>
            if let objects = result.finalResult {
                ids = .success(objects.map { PersistentIdentifier(objectID: $0.objectID) })
            } else if result.error?.code == .cancelled {
                ids = .failure(CancellationError())
            } else {
                ids = .failure(result.error ?? LogbookError(.store, "the fetch ended without a result"))
            }
            state.finish(ids)
        }
        let started = try context.performAndWait { try context.execute(asynchronous) }
        running.withLock { $0 = started }
        started.progress.observe { p in state.report(p) }
    }

    /// The identifiers of the objects found, in the descriptor's order, once the fetch ends.
    /// Cancelling the waiting task cancels the fetch.
    public var identifiers: [PersistentIdentifier] {
        get async throws {
            let running = self.running
            return try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { continuation in
                    let done = self.state.outcome.withLock { state -> Result<[PersistentIdentifier], any Error>? in
                        if let r = state.result { return r }
                        state.waiters.append(continuation)
                        return nil
                    }
                    if let done { continuation.resume(with: done) }
                }
            } onCancel: {
                running.withLock { $0?.cancel() }
            }
        }
    }

    /// The fetch's progress: the current state at once, then each step, ending when the fetch
    /// ends.
    public var progress: AsyncStream<ModelFetchProgress> {
        let (stream, continuation) = AsyncStream.makeStream(of: ModelFetchProgress.self)
        let last = state.progress.withLock { p in
            if !p.last.isFinished { p.streams.append(continuation) }
            return p.last
        }
        continuation.yield(last)
        if last.isFinished { continuation.finish() }
        return stream
    }

    /// Stops the fetch; `identifiers` then throws `CancellationError`.
    public func cancel() { running.withLock { $0?.cancel() } }
}

/// The outcome and progress of a background fetch, shared with the closures that end it.
final class BackgroundFetchState: Sendable {
    let outcome = Locked<
        (
            result: Result<[PersistentIdentifier], any Error>?,
            waiters: [CheckedContinuation<[PersistentIdentifier], any Error>]
        )
    >((nil, []))
    let progress = Locked<(last: ModelFetchProgress, streams: [AsyncStream<ModelFetchProgress>.Continuation])>(
        (ModelFetchProgress(completedUnitCount: 0, totalUnitCount: 0, isFinished: false), []))

    func report(_ p: FetchProgress) {
        let snapshot = ModelFetchProgress(
            completedUnitCount: p.completedUnitCount, totalUnitCount: p.totalUnitCount, isFinished: p.isFinished)
        let streams = progress.withLock { state in
            state.last = snapshot
            let s = state.streams
            if snapshot.isFinished { state.streams = [] }
            return s
        }
        for s in streams {
            s.yield(snapshot)
            if snapshot.isFinished { s.finish() }
        }
    }

    func finish(_ result: Result<[PersistentIdentifier], any Error>) {
        let waiters = outcome.withLock { state in
            state.result = result
            defer { state.waiters = [] }
            return state.waiters
        }
        for w in waiters { w.resume(with: result) }
        let streams = progress.withLock { state in
            state.last.isFinished = true
            defer { state.streams = [] }
            return state.streams
        }
        for s in streams { s.finish() }
    }
}

extension ModelContainer {
    /// Starts a fetch on a context of its own, off every caller's thread, from one snapshot of
    /// the store (Core Data's asynchronous fetch in this layer): identifiers, not objects, come
    /// back, for any context to turn into its objects.
    public func startFetch<T: PersistentModel>(_ descriptor: FetchDescriptor<T>) throws -> ModelFetch<T> {
        try ModelFetch(container: self, request: try descriptor.request(try info(for: T.self), in: self))
    }

    /// The identifiers of the objects the descriptor asks for, fetched in the background;
    /// cancelling the task cancels the fetch.
    ///
    /// ```swift
    /// let ids = try await container.fetchIdentifiers(FetchDescriptor<Book>(sortBy: [SortDescriptor(\.title)]))
    /// ```
    public func fetchIdentifiers<T: PersistentModel>(_ descriptor: FetchDescriptor<T>) async throws
        -> [PersistentIdentifier]
    {
        try await startFetch(descriptor).identifiers
    }
}
