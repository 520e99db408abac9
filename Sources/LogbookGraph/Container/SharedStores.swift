import Foundation
import LogbookEngine

/// One store as the containers of this process share it: a second `PersistentContainer` (or
/// `ModelContainer`) on a store that is open here uses the same engine store, save lock,
/// serial numbers and order pages, and the saves of every container's contexts reach the
/// contexts of the others, as those of one container do (SQLite's connections of one process,
/// Core Data's coordinators on one file). The engine store closes with its last container.
final class SharedStore: Sendable {
    let store: Store
    let writer: StoreWriter
    /// The schema the store was opened with: another container shares it only with the same.
    let schema: StoredSchema
    /// The options that must agree between the containers sharing the store.
    let fingerprint: SharedStores.Options
    /// Next serial number per inheritance tree, by the keyspace of the tree's root entity.
    let counters: Locked<[UInt16: UInt64]>
    /// The next page number of each order keyspace (under the save lock; found on first use).
    let orderPages = Locked<[UInt16: UInt64]>([:])
    private let state = Locked<State>(State())

    struct State {
        var containers: [WeakContainer] = []
        var open = 0
    }

    struct WeakContainer: @unchecked Sendable {
        // A weak reference only; read under the `state` lock.
        weak var container: PersistentContainer?
    }

    init(
        store: Store, writer: StoreWriter, schema: StoredSchema, fingerprint: SharedStores.Options,
        counters: [UInt16: UInt64]
    ) {
        self.store = store
        self.writer = writer
        self.schema = schema
        self.fingerprint = fingerprint
        self.counters = Locked(counters)
    }

    /// Adds a container to those that hear of saves (its use is counted already).
    func attach(_ container: PersistentContainer) {
        state.withLock { s in
            s.containers.removeAll { $0.container == nil }
            s.containers.append(WeakContainer(container: container))
        }
    }

    /// The containers alive.
    var containers: [PersistentContainer] { state.withLock { $0.containers.compactMap(\.container) } }

    /// Counts one more container using the store (under the registry's lock).
    fileprivate func retain() { state.withLock { $0.open += 1 } }

    /// Counts one container fewer (under the registry's lock); true when it was the last.
    fileprivate func release() -> Bool {
        state.withLock { s in
            s.open -= 1
            return s.open <= 0
        }
    }

    /// A container closes: the engine store closes with the last one.
    func leave() throws {
        try SharedStores.shared.release(self)
    }
}

/// The stores open in this process, by directory (in-memory stores are each their own).
package final class SharedStores: Sendable {
    package static let shared = SharedStores()
    private let open = Locked<[String: Weak]>([:])

    struct Weak: @unchecked Sendable {
        // A weak reference only; read under the `open` lock.
        weak var store: SharedStore?
    }

    /// What containers sharing a store must agree on.
    struct Options: Hashable, Sendable {
        var readOnly: Bool
        var durability: Durability
        var historyTracking: Bool
        var historyRetention: HistoryRetention
        var memberChanges: Bool
    }

    /// The key of a store's directory: its absolute path with symbolic links resolved.
    static func key(_ directory: String) -> String {
        URL(fileURLWithPath: directory).standardizedFileURL.resolvingSymlinksInPath().path
    }

    /// The shared store of `directory` with one more use counted, opened by `make` when this
    /// process has none open. Opening and closing happen under the registry's lock, so two
    /// containers opening at once open it once, and none finds one that is closing.
    /// `unshared` (an in-memory store, `ContainerOptions.opensItsOwnStore`): a store of its
    /// own, never shared.
    func store(at directory: String, unshared: Bool, readOnly: Bool, make: () throws -> SharedStore) throws
        -> SharedStore
    {
        try open.withLock { table in
            // Read-only containers share a follower of their own, beside the writer's store.
            let key = Self.key(directory) + (readOnly ? "\u{0}read-only" : "")
            if !unshared, let existing = table[key]?.store {
                existing.retain()
                return existing
            }
            let made = try make()
            made.retain()
            if !unshared { table[key] = Weak(store: made) }
            return made
        }
    }

    /// Whether a container of this process has the store in `directory` open (for writing).
    package func isOpen(_ directory: String) -> Bool {
        open.withLock { $0[Self.key(directory)]?.store != nil }
    }

    /// One use of `store` ends; the last closes the engine store.
    func release(_ store: SharedStore) throws {
        try open.withLock { table in
            guard store.release() else { return }
            for (key, entry) in table where entry.store == nil || entry.store === store { table[key] = nil }
            do { try store.store.close() } catch { throw LogbookError.wrap(error) }
        }
    }
}
