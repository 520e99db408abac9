import Foundation
import LogbookEngine
import LogbookGraph

extension ModelContext {
    /// Posted to `NotificationCenter.default`, with the context as its object, before a save
    /// writes (SwiftData's `ModelContext.willSave`).
    ///
    /// ```swift
    /// let token = NotificationCenter.default.addObserver(
    ///     forName: ModelContext.willSave, object: context, queue: nil) { _ in stampModifiedDates() }
    /// ```
    public static let willSave = Notification.Name("ModelContext.willSave")

    /// Posted to `NotificationCenter.default`, with the context as its object, after a save
    /// wrote; `userInfo` holds the identifiers of the inserted, updated and deleted models under
    /// the raw values of ``NotificationKey`` (SwiftData's `ModelContext.didSave`).
    ///
    /// ```swift
    /// for await note in NotificationCenter.default.notifications(named: ModelContext.didSave) {
    ///     let key = ModelContext.NotificationKey.insertedIdentifiers.rawValue
    ///     let inserted = note.userInfo?[key] as? [PersistentIdentifier] ?? []
    /// }
    /// ```
    public static let didSave = Notification.Name("ModelContext.didSave")

    /// The keys of a save notification's `userInfo` (their raw values are the keys).
    public enum NotificationKey: String, Sendable {
        /// `[PersistentIdentifier]` of the models the save inserted.
        case insertedIdentifiers
        /// `[PersistentIdentifier]` of the models the save changed.
        case updatedIdentifiers
        /// `[PersistentIdentifier]` of the models the save deleted.
        case deletedIdentifiers
        /// Posted by SwiftData when a context's query generation changes; Logbook's save
        /// notifications never carry it (a context reads the newest data unless pinned through
        /// its `managedObjectContext`).
        case queryGeneration
        /// Posted by SwiftData when every model was invalidated; Logbook's save notifications
        /// never carry it.
        case invalidatedAllIdentifiers
    }

    /// Posts the SwiftData notification of a context event (saves only).
    func postNotification(for event: ContextEvent) {
        switch event {
        case .willSave:
            NotificationCenter.default.post(name: Self.willSave, object: self)
        case .didSave(let changes):
            func ids(_ set: Set<ObjectID>) -> [PersistentIdentifier] {
                set.sorted { $0.key < $1.key }.map(PersistentIdentifier.init(objectID:))
            }
            NotificationCenter.default.post(
                name: Self.didSave, object: self,
                userInfo: [
                    NotificationKey.insertedIdentifiers.rawValue: ids(changes.inserted),
                    NotificationKey.updatedIdentifiers.rawValue: ids(changes.updated),
                    NotificationKey.deletedIdentifiers.rawValue: ids(changes.deleted)
                ])
        case .objectsDidChange:
            break
        }
    }
}

#if !canImport(Darwin)
    extension NotificationCenter {
        /// The notifications named `name` (from `object`, when given) as an asynchronous
        /// sequence, as Foundation on Apple platforms offers it (Foundation on Linux does not):
        /// the observation begins when this is called and ends when the iteration ends or its
        /// task is cancelled.
        ///
        /// ```swift
        /// for await note in NotificationCenter.default.notifications(named: ModelContext.didSave) { … }
        /// ```
        public func notifications(named name: Notification.Name, object: AnyObject? = nil) -> Notifications {
            Notifications(center: self, name: name, object: object)
        }

        /// Notifications as an `AsyncSequence` (see `notifications(named:object:)`).
        public struct Notifications: AsyncSequence, @unchecked Sendable {
            public typealias Element = Notification
            // @unchecked: the stream is Sendable; a Notification is handed over as Apple's
            // sequence hands it over (its object and userInfo are the poster's).
            private let stream: AsyncStream<UncheckedSendable<Notification>>

            init(center: NotificationCenter, name: Notification.Name, object: AnyObject?) {
                let (stream, continuation) = AsyncStream.makeStream(of: UncheckedSendable<Notification>.self)
                let token = center.addObserver(forName: name, object: object, queue: nil) { note in
                    continuation.yield(UncheckedSendable(note))
                }
                let held = UncheckedSendable((center, token))
                continuation.onTermination = { _ in held.value.0.removeObserver(held.value.1) }
                self.stream = stream
            }

            public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(base: stream.makeAsyncIterator()) }

            public struct AsyncIterator: AsyncIteratorProtocol {
                var base: AsyncStream<UncheckedSendable<Notification>>.AsyncIterator
                public mutating func next() async -> Notification? { await base.next()?.value }
            }
        }
    }
#endif
