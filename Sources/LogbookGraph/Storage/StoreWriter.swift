import LogbookEngine

/// The one door from the object layer to the engine's commits: every write of a container —
/// a context's save, a batch request, a history purge — goes through `commit(_:history:)`
/// under the save lock, and the writes made while a container opens (the recorded schema, a
/// migration, the model's version) through `commit(_:to:)`.
///
/// ```swift
/// let version = try container.writer.withSaveLock { recent in
///     // compare what the save read with `recent`, then:
///     var transaction = Transaction()
///     transaction.put(key, value: bytes)
///     let version = try container.writer.commit(&transaction) { historyRecordBytes }
///     recent.record([key], version: version)
///     return version
/// }
/// ```
package final class StoreWriter: Sendable {
    /// The container's store.
    let store: Store
    /// Whether commits carry a history record (`ContainerOptions.persistentHistoryTracking`).
    let historyTracking: Bool
    /// Whether history records name each to-many change's members
    /// (`ContainerOptions.historyRecordsMemberChanges`).
    let memberChanges: Bool
    /// Held from a save's conflict check to its commit; holds the keys recent saves replaced.
    private let recentWrites = Locked(RecentWrites())

    init(store: Store, historyTracking: Bool, memberChanges: Bool = false) {
        self.store = store
        self.historyTracking = historyTracking
        self.memberChanges = memberChanges
    }

    /// Runs `body` under the save lock: a conflict check and the commit it allows, with no
    /// other save of the container in between — nor a commit of another process: the store's
    /// commit lock is held from before the check (after reading what other processes
    /// committed) to after the commit. Objects read before another process's last commit are
    /// compared with the store at the check (`RecentWrites.horizon`), as after a large write.
    func withSaveLock<R>(_ body: (inout RecentWrites) throws -> R) throws -> R {
        try recentWrites.withLock { recent in
            do {
                return try store.withCommitLockHeld {
                    recent.sawWrites(before: store.remoteVersion)
                    return try body(&recent)
                }
            } catch let error as EngineError {
                throw LogbookError.wrap(error)
            }
        }
    }

    /// Commits `transaction` (call under the save lock), with its history record when the
    /// container tracks history: the record is keyed by the version this commit will get (no
    /// other commit of the container can come first under the save lock, and the store refuses
    /// the commit, writing nothing, if one did). Returns the version committed.
    func commit(_ transaction: inout Transaction, history: () throws -> [UInt8]) throws -> UInt64 {
        var expected: UInt64?
        if historyTracking {
            let next = store.version + 1
            transaction.put(HistoryRecord.key(version: next), value: try history())
            expected = next
        }
        // The store takes the transaction's compressed blocks: left here too, they would all
        // stay in memory until the commit returns, instead of going as each is applied.
        do { return try store.commit(taking: &transaction, expectingVersion: expected) } catch {
            throw LogbookError.wrap(error)
        }
    }

    /// Commits a transaction with no history record: the writes made while a container opens
    /// (the recorded schema, a migration, the model's version) and purges of history itself.
    @discardableResult
    package static func commit(_ transaction: Transaction, to store: Store) throws -> UInt64 {
        do { return try store.commit(transaction) } catch { throw LogbookError.wrap(error) }
    }
}
