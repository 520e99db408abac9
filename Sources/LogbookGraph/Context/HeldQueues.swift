import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The context queues the current thread holds while it waits in `performAndWait`: their work
/// may run inline from inside (Core Data's `performAndWait` is reentrant the same way).
///
/// `DispatchQueue.sync` runs its block on the waiting thread, and while it runs, that thread
/// still holds every queue it entered on the way: the main queue (which, after `dispatchMain`,
/// is drained by a worker thread, not the main thread), a parent's private queue. A
/// queue-specific value names only the innermost queue, so a child's read of its parent from
/// inside the child's `performAndWait` would `sync` onto a queue its own thread holds (a
/// deadlock that libdispatch turns into a crash). This records the outer ones per thread.
enum HeldQueues {
    /// What one thread holds: the main queue, and the contexts whose queues it entered.
    final class State {
        var main = 0
        var contexts: [ObjectIdentifier] = []
    }

    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key) { pointer in
            if let pointer { Unmanaged<State>.fromOpaque(pointer).release() }
        }
        return key
    }()

    /// The current thread's state (made on first use).
    static var current: State {
        if let pointer = pthread_getspecific(key) { return Unmanaged<State>.fromOpaque(pointer).takeUnretainedValue() }
        let state = State()
        pthread_setspecific(key, Unmanaged.passRetained(state).toOpaque())
        return state
    }

    /// The current thread's state, when it has one (nothing made).
    static var existing: State? {
        pthread_getspecific(key).map { Unmanaged<State>.fromOpaque($0).takeUnretainedValue() }
    }

    /// Runs `body` (the block of a `sync` onto `queue`'s context) with what the waiting thread
    /// held outside recorded as held, when the block runs on that thread.
    static func holding<T>(main: Bool, context: ObjectIdentifier?, caller: pthread_t, _ body: () throws -> T) rethrows
        -> T
    {
        guard pthread_equal(pthread_self(), caller) != 0, main || context != nil else { return try body() }
        let state = current
        if main { state.main += 1 }
        if let context { state.contexts.append(context) }
        defer {
            if main { state.main -= 1 }
            if context != nil { state.contexts.removeLast() }
        }
        return try body()
    }
}
