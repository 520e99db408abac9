import Foundation
import LogbookEngine

extension ManagedObjectContext {
    /// Calls `handler` on the context's queue with each event of the context, until the
    /// returned observation is cancelled or released.
    ///
    /// ```swift
    /// let observation = context.observeEvents { event in
    ///     if case .didSave(let changes) = event { print(changes.inserted.count, "inserted") }
    /// }
    /// ```
    public func observeEvents(_ handler: @escaping (ContextEvent) -> Void) -> ContextObservation {
        let n = eventObservers.withLock { list in
            nextObserver += 1
            list[nextObserver] = handler
            return nextObserver
        }
        let observers = eventObservers
        return ContextObservation { _ = observers.withLock { $0.removeValue(forKey: n) } }
    }

    /// The context's events as an asynchronous sequence; it ends when the task iterating it
    /// is cancelled.
    ///
    /// ```swift
    /// for await event in context.events() {
    ///     if case .objectsDidChange(let changes) = event { reload(changes.refreshed) }
    /// }
    /// ```
    public func events() -> AsyncStream<ContextEvent> {
        let (stream, continuation) = AsyncStream.makeStream(of: ContextEvent.self)
        let observation = UncheckedSendable(observeEvents { continuation.yield($0) })
        continuation.onTermination = { _ in observation.value.cancel() }
        return stream
    }

    var hasObservers: Bool { !changeObservers.isEmpty || eventObservers.withLock { !$0.isEmpty } }

    /// Tells every observer (on the context's queue).
    func post(_ event: ContextEvent) {
        let handlers = eventObservers.withLock { Array($0.sorted { $0.key < $1.key }.map(\.value)) }
        for h in handlers { h(event) }
    }
}
