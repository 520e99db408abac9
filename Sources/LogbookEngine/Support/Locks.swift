import Dispatch
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A flag that can be set once, from any thread.
final class AtomicFlag: Sendable {
    private let value = Atomic<Bool>(false)
    /// Sets the flag; returns true for the one caller that set it.
    func setOnce() -> Bool {
        value.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged
    }
    var isSet: Bool { value.load(ordering: .acquiring) }
}

/// A mutex with a condition variable, for the group commit's waiting committers.
/// `Synchronization.Mutex` has no condition variable, so this wraps pthreads.
final class ConditionLock: @unchecked Sendable {
    // The pthread objects are heap-allocated so they never move; they guard whatever the
    // caller touches between lock() and unlock() (documented at each use).
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let condition: UnsafeMutablePointer<pthread_cond_t>

    init() {
        mutex = .allocate(capacity: 1)
        condition = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(condition, nil)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
        condition.deallocate()
    }

    func lock() { pthread_mutex_lock(mutex) }
    func unlock() { pthread_mutex_unlock(mutex) }
    func wait() { pthread_cond_wait(condition, mutex) }
    func broadcast() { pthread_cond_broadcast(condition) }

    func withLock<R>(_ body: () throws -> R) rethrows -> R {
        lock()
        defer { unlock() }
        return try body()
    }
}

/// Work begun on a global queue whose result one thread takes later (`result()`); when no
/// worker has begun it by then, that thread runs it itself, so that a busy global queue never
/// keeps the taker waiting.
///
/// ```swift
/// let next = StealableWork { try decode(part) }
/// apply(current)
/// let decoded = try next.result()
/// ```
///
/// Thread safety: `body` and `outcome` are touched only by the thread that claimed the work
/// (`claimed`), which lets go of `body` once it has run; `outcome` is written before `done` is
/// signalled, and `result()` reads it after that signal, or on the thread that ran the work
/// itself. `result()` is called once, by one thread.
final class StealableWork<Value: Sendable>: @unchecked Sendable {
    private let claimed = Atomic<Bool>(false)
    private let done = DispatchSemaphore(value: 0)
    private var body: (@Sendable () throws -> Value)?
    private var outcome: Result<Value, any Error>?

    init(_ body: @escaping @Sendable () throws -> Value) {
        self.body = body
        DispatchQueue.global().async { [self] in
            guard claim() else { return }
            run()
            done.signal()
        }
    }

    private func claim() -> Bool {
        claimed.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged
    }

    /// Runs the work and drops it: a block still queued when the taker ran the work itself
    /// keeps this object until it runs, but no longer the work's inputs (a part of a commit,
    /// about 1 MB).
    private func run() {
        let work = body!
        body = nil
        outcome = Result { try work() }
    }

    /// The work's value (or its error); runs the work here when no worker has begun it.
    func result() throws -> Value {
        if claim() { run() } else { done.wait() }
        return try outcome!.get()
    }
}
