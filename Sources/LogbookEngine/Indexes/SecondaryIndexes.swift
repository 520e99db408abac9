/// The secondary indexes of one `IndexState`: in memory, or still encoded in the checkpoint
/// the store was opened from, until something needs them.
///
/// An open reads the checkpoint's secondary-index section only to check it; the indexes are
/// built the first time a read asks an index (a fetch the planner answers from one, a count
/// of a range, statistics) or a commit changes one. A store that is only scanned, or opened
/// to read a few objects by key, never pays for indexes it does not use: neither the time
/// to build them at open nor their memory (about 18–26 bytes an entry). Every state that
/// shares the deferred indexes (the store's state and the snapshots taken before the first
/// use) shares the one copy built then.
struct SecondaryIndexes: Sendable {
    private var stored: [UInt32: OrderedIndex] = [:]
    private var deferred: DeferredIndexes?

    init() {}

    init(_ indexes: [UInt32: OrderedIndex]) { stored = indexes }

    init(deferred: DeferredIndexes) { self.deferred = deferred }

    /// The indexes, by index number; reading or changing them builds deferred ones first.
    var all: [UInt32: OrderedIndex] {
        get { deferred?.load() ?? stored }
        _modify {
            materialize()
            yield &stored
        }
        set {
            deferred = nil
            stored = newValue
        }
    }

    /// Whether the indexes are built (false while they are only in the checkpoint).
    var isBuilt: Bool { deferred?.isBuilt ?? true }

    private mutating func materialize() {
        guard let d = deferred else { return }
        stored = d.load()
        deferred = nil
    }
}

/// Secondary indexes that are built from their encoded form on first use, once, for every
/// state that holds them. `Sendable`: the encoded form and the built indexes are behind a
/// lock (`Locked`, which the thread sanitizer sees), and a built `OrderedIndex` is a
/// persistent value.
final class DeferredIndexes: Sendable {
    private enum Source {
        case encoded(@Sendable () -> [UInt32: OrderedIndex])
        case built([UInt32: OrderedIndex])
    }

    private let source: Locked<Source>

    /// `build` turns the encoded indexes into indexes. It runs at most once, under the lock
    /// (concurrent first users wait for the one build), and must not fail: the caller checks
    /// the encoded form before deferring it.
    init(build: @escaping @Sendable () -> [UInt32: OrderedIndex]) {
        source = Locked(.encoded(build))
    }

    func load() -> [UInt32: OrderedIndex] {
        source.withLock { source in
            switch source {
            case .built(let indexes):
                return indexes
            case .encoded(let build):
                let indexes = build()
                source = .built(indexes)
                return indexes
            }
        }
    }

    var isBuilt: Bool {
        source.withLock { source in
            if case .built = source { return true }
            return false
        }
    }
}
