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
