import Foundation
import LogbookEngine

/// What a container learns when another process commits to its store (Core Data's
/// `NSPersistentStoreRemoteChange` notification): the newest version, as a history token, and
/// the recorded transactions since the last one it learned (empty when the writer does not
/// record history: then contexts refresh all their objects).
public struct RemoteChange: Sendable {
    /// The store's version after the commits (`NSPersistentHistoryTokenKey`).
    public var historyToken: PersistentHistoryToken
    /// The store's directory (`NSPersistentStoreURLKey`).
    public var storeURL: URL
    /// The transactions committed since the previous remote change, oldest first.
    public var transactions: [PersistentHistoryTransaction]
}

extension PersistentContainer {
    /// Posted to `NotificationCenter.default`, with the container as its object, when another
    /// process's commits reached it (`ContainerOptions.observesRemoteChanges`); `userInfo` holds
    /// the `RemoteChange` under `remoteChangeKey`, its token under `historyTokenKey`.
    ///
    /// ```swift
    /// NotificationCenter.default.addObserver(
    ///     forName: PersistentContainer.remoteChangeNotification, object: container, queue: nil) { note in
    ///     let token = note.userInfo?[PersistentContainer.historyTokenKey] as? PersistentHistoryToken
    /// }
    /// ```
    public static let remoteChangeNotification = Notification.Name("NSPersistentStoreRemoteChangeNotification")
    /// The `userInfo` key of the history token (Core Data's `NSPersistentHistoryTokenKey`).
    public static let historyTokenKey = "historyToken"
    /// The `userInfo` key of the `RemoteChange`.
    public static let remoteChangeKey = "remoteChange"

    /// Calls `handler` (on the follower's thread) with each remote change, until the returned
    /// observation is cancelled or released.
    public func observeRemoteChanges(_ handler: @escaping @Sendable (RemoteChange) -> Void) -> ContextObservation {
        let n = remote.add(handler)
        let state = remote
        return ContextObservation { state.remove(n) }
    }

    /// The remote changes as an asynchronous sequence; it ends when the task iterating it is
    /// cancelled.
    ///
    /// ```swift
    /// for await change in container.remoteChangeNotifications() { reload(after: change.historyToken) }
    /// ```
    public func remoteChangeNotifications() -> AsyncStream<RemoteChange> {
        let (stream, continuation) = AsyncStream.makeStream(of: RemoteChange.self)
        let observation = observeRemoteChanges { continuation.yield($0) }
        continuation.onTermination = { _ in observation.cancel() }
        return stream
    }

    /// Starts the thread that follows the writer (read-only containers).
    func startFollowing() {
        let watcher = DirectoryWatcher(storeDirectory)
        remote.watcher.withLock { $0 = watcher }
        let start = store.version
        let thread = Thread { [weak self] in
            var last = start
            while !watcher.isStopped {
                guard let container = self else { return }
                last = container.deliverRemoteChanges(after: last)
                watcher.wait(milliseconds: 500)
            }
        }
        thread.name = "logbook.remote-change-follower"
        thread.start()
    }

    func stopFollowing() {
        remote.watcher.withLock { w in
            w?.stop()
            w = nil
        }
    }

    /// Reads what was committed after version `last`, tells everyone, returns the new version.
    func deliverRemoteChanges(after last: UInt64) -> UInt64 {
        do { try store.refresh() } catch {
            StoreOptions.standardError("logbook: could not follow the store's writer: \(error)")
            return last
        }
        let now = store.version
        guard now > last else { return last }
        let transactions: [PersistentHistoryTransaction]
        if store.isReadOnly {
            transactions = (try? history(after: PersistentHistoryToken(version: last))) ?? []
        } else {
            // A writer: only the versions other processes committed (its own saves reached its
            // contexts as saves), read since the last time.
            let ranges = store.takeRemoteVersions()
            guard !ranges.isEmpty else { return now }
            var found: [PersistentHistoryTransaction] = []
            for range in ranges {
                let after = (try? history(after: PersistentHistoryToken(version: range.lowerBound - 1))) ?? []
                found += after.filter { $0.token.version <= range.upperBound }
            }
            transactions = found
        }
        let change = RemoteChange(
            historyToken: PersistentHistoryToken(version: now), storeURL: URL(fileURLWithPath: storeDirectory),
            transactions: transactions)
        if transactions.isEmpty {
            mergeRemote(nil)
        } else {
            for t in transactions { mergeRemote(t.contextChanges) }
        }
        remote.tell(change)
        NotificationCenter.default.post(
            name: Self.remoteChangeNotification, object: self,
            userInfo: [Self.historyTokenKey: change.historyToken, Self.remoteChangeKey: change])
        return now
    }
}

/// The follower's watcher and the remote-change handlers of a container.
final class RemoteChangeState: Sendable {
    let watcher = Locked<DirectoryWatcher?>(nil)
    private let handlers = Locked<(next: Int, all: [Int: @Sendable (RemoteChange) -> Void])>((0, [:]))

    func add(_ handler: @escaping @Sendable (RemoteChange) -> Void) -> Int {
        handlers.withLock { h in
            h.next += 1
            h.all[h.next] = handler
            return h.next
        }
    }

    func remove(_ n: Int) { _ = handlers.withLock { $0.all.removeValue(forKey: n) } }

    func tell(_ change: RemoteChange) {
        for handler in handlers.withLock({ $0.all.sorted { $0.key < $1.key }.map(\.value) }) { handler(change) }
    }
}
