import Foundation
import LogbookEngine

#if canImport(Glibc)
    import Glibc
#endif

extension PersistentHistoryTransaction {
    /// The transaction's changes by object ID, to merge into a context with
    /// `mergeChanges(fromContextDidSave:)` (Core Data's `objectIDNotification()`): registered
    /// objects it updated are refreshed, those it deleted go.
    ///
    /// ```swift
    /// for try await transaction in container.remoteChanges() {
    ///     context.mergeChanges(fromContextDidSave: transaction.contextChanges)
    /// }
    /// ```
    public var contextChanges: ContextChanges {
        var changes = ContextChanges(version: token.version)
        for change in self.changes {
            switch change.changeType {
            case .insert: changes.inserted.insert(change.changedObjectID)
            case .update: changes.updated.insert(change.changedObjectID)
            case .delete: changes.deleted.insert(change.changedObjectID)
            }
        }
        return changes
    }
}

extension PersistentContainer {
    /// The transactions committed after `token` (nil: after the current version), as they are
    /// committed — by this container's contexts, or, for a container opened `readOnly`, by
    /// the process that writes the store (Core Data's remote change notifications, with the
    /// history they point to).
    ///
    /// A read-only container follows the writer without polling the store: it waits for the
    /// store's files to change (inotify on Linux; every `pollInterval` where that is not
    /// available), then reads only what was committed since (`Store.refresh()`) and the new
    /// history records. Readers take no lock: the writer never waits for them. The sequence
    /// delivers every recorded transaction once, in order, across segment rollovers and
    /// compactions; it needs the writer to record history
    /// (`ContainerOptions.persistentHistoryTracking`), and one purged (by `deleteHistory` or
    /// the retention) before the follower read it is not delivered. It ends when the task
    /// iterating it is cancelled, and throws if the store cannot be read.
    ///
    /// ```swift
    /// var options = ContainerOptions()
    /// options.readOnly = true
    /// let follower = try PersistentContainer(name: "Notes", model: model, directory: path, options: options)
    /// let context = follower.newContext(concurrencyType: .confinement)
    /// for try await transaction in follower.remoteChanges(after: lastSeen) {
    ///     context.mergeChanges(fromContextDidSave: transaction.contextChanges)
    ///     lastSeen = transaction.token        // persist it to resume after a restart
    /// }
    /// ```
    public func remoteChanges(
        after token: PersistentHistoryToken? = nil, pollInterval: Duration = .milliseconds(500)
    ) -> AsyncThrowingStream<PersistentHistoryTransaction, any Error> {
        let (stream, continuation) = AsyncThrowingStream<PersistentHistoryTransaction, any Error>.makeStream()
        let watcher = DirectoryWatcher(storeDirectory)
        let start = token ?? currentHistoryToken
        continuation.onTermination = { _ in watcher.stop() }
        let pollMilliseconds = Int32(
            clamping: pollInterval.components.seconds * 1000
                + pollInterval.components.attoseconds / 1_000_000_000_000_000)
        let thread = Thread { [self] in
            var last = start
            while !watcher.isStopped {
                do {
                    if store.isReadOnly { try store.refresh() }
                    for transaction in try history(after: last) {
                        continuation.yield(transaction)
                        last = transaction.token
                    }
                } catch {
                    continuation.finish(throwing: error)
                    return
                }
                watcher.wait(milliseconds: pollMilliseconds)
            }
            continuation.finish()
        }
        thread.name = "logbook.remote-changes"
        thread.start()
        return stream
    }
}

/// Waits for a directory's files to change: inotify where there is one (Linux), else a
/// timeout; `stop()` wakes a waiter (through a pipe) and ends the watch.
///
/// `@unchecked Sendable`: the descriptors are set once in `init` and closed in `deinit`; the
/// stopped flag is behind a lock. Two threads use it: the one that waits, and the one that
/// stops it.
final class DirectoryWatcher: @unchecked Sendable {
    private let notify: Int32
    private let wake: (read: Int32, write: Int32)
    private let stopped = Locked(false)

    init(_ directory: String) {
        #if os(Linux)
            let fd = inotify_init1(Int32(IN_CLOEXEC | IN_NONBLOCK))
            if fd >= 0 {
                let mask = UInt32(IN_MODIFY | IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE)
                if inotify_add_watch(fd, directory, mask) < 0 {
                    close(fd)
                    notify = -1
                } else {
                    notify = fd
                }
            } else {
                notify = -1
            }
        #else
            notify = -1
        #endif
        var fds: [Int32] = [-1, -1]
        if pipe(&fds) != 0 { fds = [-1, -1] }
        wake = (fds[0], fds[1])
    }

    deinit {
        for fd in [notify, wake.read, wake.write] where fd >= 0 { close(fd) }
    }

    var isStopped: Bool { stopped.withLock { $0 } }

    func stop() {
        stopped.withLock { $0 = true }
        if wake.write >= 0 {
            var byte: UInt8 = 1
            _ = write(wake.write, &byte, 1)
        }
    }

    /// Returns when a file of the directory changed, `stop()` was called, or after
    /// `milliseconds`. Events that came together are taken as one.
    func wait(milliseconds: Int32) {
        var fds = [pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0)]
        if notify >= 0 { fds.append(pollfd(fd: notify, events: Int16(POLLIN), revents: 0)) }
        guard !isStopped else { return }
        _ = poll(&fds, nfds_t(fds.count), milliseconds)
        if notify >= 0 {
            // Drain the events (non-blocking): what changed does not matter, only that
            // something did.
            var buffer = [UInt8](repeating: 0, count: 4096)
            while read(notify, &buffer, buffer.count) > 0 {}
        }
    }
}
