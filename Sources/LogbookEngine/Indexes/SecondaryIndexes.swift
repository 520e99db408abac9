import CLogbookSupport
import Dispatch

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

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

    /// One index for a read, without waiting for a deferred build (`DeferredIndexes.reader`).
    func reader(_ id: UInt32) -> IndexReader? {
        if let deferred { return deferred.reader(id) }
        return stored[id].map(IndexReader.built)
    }

    /// The ids of the indexes, without building deferred ones.
    var ids: [UInt32] { deferred?.ids ?? Array(stored.keys) }

    /// Waits for a deferred build that reads started, or makes it (tests use it to see the
    /// built indexes).
    func waitUntilBuilt() { _ = deferred?.load() }

    private mutating func materialize() {
        guard let d = deferred else { return }
        stored = d.load()
        deferred = nil
    }
}

/// One index as a read sees it: built, or still encoded in the checkpoint (its reads decode
/// in place, `EncodedIndex`). Both answer the same questions with the same results.
enum IndexReader {
    case built(OrderedIndex)
    case encoded(EncodedIndex)

    func count(from lower: IndexBound?, to upper: IndexBound?) -> Int {
        switch self {
        case .built(let index): index.count(from: lower, to: upper)
        case .encoded(let index): index.count(from: lower, to: upper)
        }
    }

    func forEach(
        from lower: IndexBound?, to upper: IndexBound?, reverse: Bool,
        _ body: (UnsafeRawBufferPointer, UInt64) throws -> Bool
    ) rethrows {
        switch self {
        case .built(let index): try index.forEach(from: lower, to: upper, reverse: reverse, body)
        case .encoded(let index): try index.forEach(from: lower, to: upper, reverse: reverse, body)
        }
    }

    func primaryKeys(from lower: IndexBound?, to upper: IndexBound?, reverse: Bool, limit: Int?) -> [UInt64] {
        switch self {
        case .built(let index): index.primaryKeys(from: lower, to: upper, reverse: reverse, limit: limit)
        case .encoded(let index): index.primaryKeys(from: lower, to: upper, reverse: reverse, limit: limit)
        }
    }
}

/// Secondary indexes that are built from their encoded form on first use, once, for every
/// state that holds them. `Sendable`: the encoded form and the built indexes are behind
/// locks (`Locked`, which the thread sanitizer sees), and a built `OrderedIndex` is a
/// persistent value.
///
/// A read of one index (`reader(_:)`) does not wait for a build: it decodes what it needs
/// from the encoded bytes (`EncodedIndex`), so the first indexed queries of a process cost
/// about what they read. Once the reads have decoded an eighth as many entries as the indexes
/// hold (a build costs a few decodes of every entry: as in renting before buying, a process
/// pays for the build once its reads have cost a good part of it), the build starts on
/// another thread, and later reads find the indexes built. What needs every index, or
/// changes one (`load()`), waits for the build, or makes it.
final class DeferredIndexes: Sendable {
    /// The checked section: each index's entry count and restart points.
    private let sections: [Checkpoint.IndexSection]
    /// Gives the checkpoint stream again (its secondary-index section at least).
    private let stream: @Sendable () -> [UInt8]
    /// The built indexes; the build runs under this lock, once.
    private let built: Locked<[UInt32: OrderedIndex]?>
    /// The stream, kept from the first in-place read until the build has finished.
    private let encoded: Locked<[UInt8]?>
    /// Entries decoded by reads in place so far, and whether a build on another thread has
    /// been started.
    private let reads = Locked((decoded: 0, started: false))
    /// Decoded entries after which a build starts (an eighth of all the entries).
    private let buildAfter: Int

    /// `stream` gives the encoded indexes whose checked `sections` it holds. It is read at
    /// most twice (once if the build comes first), and the build must not fail: the caller
    /// checks the encoded form before deferring it.
    init(sections: [Checkpoint.IndexSection], stream: @escaping @Sendable () -> [UInt8]) {
        self.sections = sections
        self.stream = stream
        built = Locked(nil)
        encoded = Locked(nil)
        buildAfter = max(1, sections.reduce(0) { $0 + $1.count } / 8)
    }

    /// Every index, built (waiting for a build in progress, or making it: on every core, or
    /// on this thread alone when not `parallel`).
    func load(parallel: Bool = true) -> [UInt32: OrderedIndex] {
        built.withLock { built in
            if let built { return built }
            let bytes = encoded.withLock { $0 } ?? stream()
            let indexes = bytes.withUnsafeBytes { Checkpoint.buildIndexes($0, sections, parallel: parallel) }
            built = indexes
            encoded.withLock { $0 = nil }
            return indexes
        }
    }

    /// One index for a read: built if the build has finished, else read in place (the reads
    /// start the build once they have decoded many entries: `noteDecoded`). Nil for an index
    /// the checkpoint does not name.
    func reader(_ id: UInt32) -> IndexReader? {
        if let indexes = built.tryWithLock({ $0 }) ?? nil {
            return indexes[id].map(IndexReader.built)
        }
        guard let section = sections.first(where: { $0.id == id }) else { return nil }
        let bytes = encoded.withLock { bytes in
            if let bytes { return bytes }
            let fresh = stream()
            bytes = fresh
            return fresh
        }
        return .encoded(EncodedIndex(bytes: bytes, section: section, owner: self))
    }

    /// Counts the entries a read in place decoded, and starts the build once they are many.
    func noteDecoded(_ entries: Int) {
        let start = reads.withLock { reads in
            reads.decoded += entries
            guard !reads.started && reads.decoded >= buildAfter else { return false }
            reads.started = true
            return true
        }
        if start {
            // One thread at the lowest priority: the reads in the foreground keep the cores
            // they are using, and the build takes what they leave.
            let context = Unmanaged.passRetained(self).toOpaque()
            let body: @convention(c) (UnsafeMutableRawPointer?) -> Void = { context in
                let indexes = Unmanaged<DeferredIndexes>.fromOpaque(context!).takeRetainedValue()
                _ = indexes.load(parallel: false)
            }
            if logbook_run_at_low_priority(body, context) != 0 {
                Unmanaged<DeferredIndexes>.fromOpaque(context).release()
                DispatchQueue.global(qos: .utility).async { _ = self.load(parallel: false) }
            }
        }
    }

    /// The ids of the indexes, without building them.
    var ids: [UInt32] { sections.map(\.id) }

    var isBuilt: Bool { built.tryWithLock { $0 != nil } ?? false }
}
