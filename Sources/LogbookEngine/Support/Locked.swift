#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A value behind a lock: the package's mutex (in the engine and the object layer alike).
///
/// A pthread mutex rather than `Synchronization.Mutex`: as fast uncontended (one atomic
/// exchange each way), and the thread sanitizer sees it, which it does not see in the
/// standard library's futex-based `Mutex` on Linux (every access it guards then looks like a
/// race, and the real ones drown).
///
/// ```swift
/// let counter = Locked(0)
/// counter.withLock { $0 += 1 }
/// ```
package final class Locked<Value>: @unchecked Sendable {
    // @unchecked: `value` is touched only between `pthread_mutex_lock` and `_unlock` of
    // `mutex`; like `Mutex`, it hands the value to one thread at a time.
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    // The value lives behind a pointer rather than in a stored property: only `withLock`
    // touches it, under the lock, and a class property's dynamic exclusivity markers (which
    // the thread sanitizer reports as races whatever lock orders them) are not needed.
    private let value: UnsafeMutablePointer<Value>

    package init(_ value: Value) {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
        self.value = .allocate(capacity: 1)
        self.value.initialize(to: value)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        mutex.deallocate()
        value.deinitialize(count: 1)
        value.deallocate()
    }

    /// Runs `body` with the value, holding the lock.
    @inline(__always)
    package func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value.pointee)
    }

    /// Runs `body` with the value if the lock is free now; nil, without waiting, if another
    /// thread holds it.
    package func tryWithLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result? {
        guard pthread_mutex_trylock(mutex) == 0 else { return nil }
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value.pointee)
    }
}
