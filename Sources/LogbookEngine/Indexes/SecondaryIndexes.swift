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
/// An open reads the checkpoint's secondary-index section only to check it (a version-3
/// checkpoint's after the open has returned: `DeferredIndexes`); the indexes are
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
    ///
    /// Only after `check()` has not thrown: indexes that could not be had (`DeferredIndexes`)
    /// stop the process here, where every path that reaches this has checked them first.
    var all: [UInt32: OrderedIndex] {
        get {
            guard let deferred else { return stored }
            do { return try deferred.load() } catch {
                preconditionFailure("secondary indexes read without check(): \(error)")
            }
        }
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

    /// Whether reads in place have decoded enough entries to start the build (tests).
    var readsStartedBuild: Bool { deferred?.readsStartedBuild ?? false }

    /// Waits for the check of deferred indexes, and throws when they could not be had: their
    /// section failed its check and the journal could not give them either
    /// (`DeferredIndexes`). What reads or changes `all` calls this first.
    func check() throws(EngineError) { try deferred?.check() }

    /// What the check of deferred indexes found wrong, waiting for it (`Store.verify`).
    func checkProblem() -> String? { deferred?.problem() }

    /// One index for a read, without waiting for a deferred build (`DeferredIndexes.reader`).
    func reader(_ id: UInt32) throws(EngineError) -> IndexReader? {
        if let deferred { return try deferred.reader(id) }
        return stored[id].map(IndexReader.built)
    }

    /// The ids of the indexes, without building deferred ones.
    func ids() throws(EngineError) -> [UInt32] {
        if let deferred { return try deferred.ids() }
        return Array(stored.keys)
    }

    /// Each index's entry count and the bytes held for the indexes while they are still
    /// deferred and not built (their seek points, and the chunks of the encoded section that
    /// reads in place kept: `EncodedChunks`), without building them; nil once they are built (or replaced from the journal),
    /// or when the check failed. For `Store.statistics()`, which reported memory by building
    /// every index (200 MB at 10,000,000 objects) to count it.
    func unbuiltSummary() -> (entries: [UInt32: Int], bytes: Int)? { deferred?.unbuiltSummary() }

    /// Waits for a deferred build that reads started, or makes it (tests use it to see the
    /// built indexes).
    func waitUntilBuilt() { _ = try? deferred?.load() }

    private mutating func materialize() {
        guard deferred != nil else { return }
        stored = all
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
/// state that holds them. `Sendable`: the outcome of the check, the encoded form and the
/// built indexes are behind locks (`Locked`, which the thread sanitizer sees), and a built
/// `OrderedIndex` is a persistent value.
///
/// A read of one index (`reader(_:)`) does not wait for a build: it decodes what it needs
/// from the encoded bytes (`EncodedIndex`), so the first indexed queries of a process cost
/// about what they read. Once the reads have decoded an eighth as many entries as the indexes
/// hold (a build costs a few decodes of every entry: as in renting before buying, a process
/// pays for the build once its reads have cost a good part of it), the build starts on
/// another thread, and later reads find the indexes built. What needs every index, or
/// changes one (`load()`), waits for the build, or makes it.
///
/// The encoded section is checked before any of that (every entry decoded, restart points
/// recorded: `Checkpoint.skipIndexes`): by the open itself, or — for a checkpoint of version
/// 3, whose secondary indexes come last — on another thread that the open starts and does
/// not wait for (`init(checking:fallback:stream:)`). Whatever needs the section then waits
/// for that check. A section that fails it (its frames' checksums were right: a writer's
/// bug or a crafted file) is replaced by the indexes that the journal gives up to the
/// checkpoint's version (`fallback`), as an open replays the journal when a checkpoint
/// fails; when the journal cannot give them either, every use of the indexes throws that
/// error (`check()`), as the open would have thrown it — a commit too, before it writes
/// anything (`Store.commit`), and the application of a transaction (`IndexState.apply`) —
/// and the rest of the store (its records, keys and sets) stays readable.
final class DeferredIndexes: Sendable {
    /// What the check of the encoded section found.
    private enum Outcome: Sendable {
        /// Each index's entry count and restart points, and where the section lies in the stream.
        case checked([Checkpoint.IndexSection], Range<Int>)
        /// The section failed its check (why); these indexes came from the journal instead.
        case replaced([UInt32: OrderedIndex], Checkpoint.Malformed)
        /// Neither the section nor the journal gave the indexes.
        case failed(EngineError)
    }

    /// Gives the checkpoint stream again (its secondary-index section at least).
    private let stream: @Sendable (Range<Int>) -> [UInt8]
    /// Set once, by the open or by the check on another thread.
    private let outcome: Locked<Outcome?>
    /// Left when the check on another thread has set `outcome`.
    private let checking = DispatchGroup()
    /// The check until it begins: run once, by its thread or by the first thread that needs
    /// it before then (`runCheckOnce()`), and let go then (it holds the open's segments and
    /// the checkpoint's stream).
    private let pendingCheck: Locked<(@Sendable () -> Void)?>
    /// The built indexes; the build runs under this lock, once.
    private let built: Locked<[UInt32: OrderedIndex]?>
    /// The stream's chunks, as reads in place decompress them (`EncodedChunks`): from the
    /// checkpoint file's frames (`chunks`), or the stream `stream` gives, as one chunk.
    private let chunks: EncodedChunks?
    /// The chunks the reads in place use, from the first such read until the build has
    /// finished (then let go, with the chunks they kept).
    private let encoded: Locked<EncodedChunks?>
    /// Entries decoded by reads in place so far, and whether a build on another thread has
    /// been started.
    private let reads = Locked((decoded: 0, started: false))

    /// `stream` gives the encoded indexes whose checked `sections` it holds at `range`. It is
    /// read at most twice (once if the build comes first), and the build must not fail: the
    /// caller checked the encoded form.
    init(
        sections: [Checkpoint.IndexSection], range: Range<Int>,
        stream: @escaping @Sendable (Range<Int>) -> [UInt8], chunks: EncodedChunks? = nil
    ) {
        self.stream = stream
        self.chunks = chunks
        outcome = Locked(.checked(sections, range))
        built = Locked(nil)
        encoded = Locked(nil)
        pendingCheck = Locked(nil)
    }

    /// Starts `check` on another thread and returns (runs it before returning when
    /// `atOnce`): it checks the encoded section, and gives its indexes' sections and where it
    /// lies in what `stream` gives. When it throws, `fallback` gives the indexes instead (on
    /// that thread too), or the error that every use of them will throw.
    init(
        checking check: @escaping @Sendable () throws(Checkpoint.Malformed) -> ([Checkpoint.IndexSection], Range<Int>),
        fallback: @escaping @Sendable (Checkpoint.Malformed) throws(EngineError) -> [UInt32: OrderedIndex],
        stream: @escaping @Sendable (Range<Int>) -> [UInt8], chunks: EncodedChunks? = nil, atOnce: Bool = false
    ) {
        self.stream = stream
        self.chunks = chunks
        outcome = Locked(nil)
        built = Locked(nil)
        encoded = Locked(nil)
        checking.enter()
        let work: @Sendable () -> Void = { [outcome, checking] in
            let found: Outcome
            do throws(Checkpoint.Malformed) {
                let (sections, range) = try check()
                found = .checked(sections, range)
            } catch {
                do throws(EngineError) { found = .replaced(try fallback(error), error) } catch let failure {
                    found = .failed(failure)
                }
            }
            outcome.withLock { $0 = found }
            checking.leave()
        }
        pendingCheck = Locked(work)
        // Begun a little after the open, so that it does not take the opening thread's core
        // while the open and the container's set-up finish (begun at once on a global queue,
        // it made half the opens of a 1M store twice as long on two cores). A thread that
        // needs the check before then runs it itself (`checked()`), where it would have
        // waited for it. (At the lowest priority instead, a thread waiting for the check
        // waited for a thread that a busy machine gave no core: minutes under the tests.)
        if atOnce {
            runCheckOnce()
        } else {
            DispatchQueue.global().asyncAfter(deadline: .now() + Self.checkDelay) { self.runCheckOnce() }
        }
    }

    /// How long after an open its check begins unless something needs it sooner.
    static let checkDelay = DispatchTimeInterval.milliseconds(20)

    /// Runs the check unless another thread has begun it.
    private func runCheckOnce() {
        let check = pendingCheck.withLock { pending in
            defer { pending = nil }
            return pending
        }
        check?()
    }

    /// The check's outcome, waiting for it (running it here when it has not begun).
    private func checked() -> Outcome {
        if let known = outcome.withLock({ $0 }) { return known }
        runCheckOnce()
        checking.wait()
        return outcome.withLock { $0 }!
    }

    /// Waits for the check; throws when the indexes could not be had.
    func check() throws(EngineError) {
        if case .failed(let error) = checked() { throw error }
    }

    /// Waits for the check; what the section failed it for, if it did.
    func problem() -> String? {
        switch checked() {
        case .checked: nil
        case .replaced(_, let malformed): "secondary indexes replaced from the journal: \(malformed)"
        case .failed(let error): "\(error)"
        }
    }

    /// Every index, built (waiting for the check, and for a build in progress or making it:
    /// on every core, or on this thread alone when not `parallel`).
    func load(parallel: Bool = true) throws(EngineError) -> [UInt32: OrderedIndex] {
        let (sections, range): ([Checkpoint.IndexSection], Range<Int>)
        switch checked() {
        case .failed(let error): throw error
        case .replaced(let indexes, _): return indexes
        case .checked(let s, let r): (sections, range) = (s, r)
        }
        return built.withLock { built in
            if let built { return built }
            let bytes = stream(range)
            let indexes = bytes.withUnsafeBytes { Checkpoint.buildIndexes($0, sections, parallel: parallel) }
            built = indexes
            encoded.withLock { $0 = nil }
            return indexes
        }
    }

    /// One index for a read: built if the build has finished, else read in place (the reads
    /// start the build once they have decoded many entries: `noteDecoded`). Nil for an index
    /// the checkpoint does not name.
    func reader(_ id: UInt32) throws(EngineError) -> IndexReader? {
        let (sections, range): ([Checkpoint.IndexSection], Range<Int>)
        switch checked() {
        case .failed(let error): throw error
        case .replaced(let indexes, _): return indexes[id].map(IndexReader.built)
        case .checked(let s, let r): (sections, range) = (s, r)
        }
        if let indexes = built.tryWithLock({ $0 }) ?? nil {
            return indexes[id].map(IndexReader.built)
        }
        guard let section = sections.first(where: { $0.id == id }) else { return nil }
        let source = encoded.withLock { source in
            if let source { return source }
            let fresh = chunks ?? EncodedChunks(stream(range))
            source = fresh
            return fresh
        }
        return .encoded(EncodedIndex(chunks: source, section: section, owner: self))
    }

    /// See `SecondaryIndexes.unbuiltSummary()` (waits for the check; a build in progress
    /// counts as built: the caller then waits for it).
    func unbuiltSummary() -> (entries: [UInt32: Int], bytes: Int)? {
        guard case .checked(let sections, _) = checked(), built.tryWithLock({ $0 == nil }) == true else { return nil }
        var entries: [UInt32: Int] = [:]
        var bytes = encoded.withLock { $0?.keptBytes ?? 0 }
        for section in sections {
            entries[section.id, default: 0] += section.count
            bytes += section.seeks.estimatedBytes
        }
        return (entries, bytes)
    }

    /// Whether the reads in place have started the build (`noteDecoded`).
    var readsStartedBuild: Bool { reads.withLock { $0.started } }

    /// Counts the entries a read in place decoded, and starts the build once they are many
    /// (an eighth of all the entries).
    func noteDecoded(_ entries: Int) {
        guard case .checked(let sections, _) = outcome.withLock({ $0 }) else { return }
        let buildAfter = max(1, sections.reduce(0) { $0 + $1.count } / 8)
        let start = reads.withLock { reads in
            reads.decoded += entries
            guard !reads.started && reads.decoded >= buildAfter else { return false }
            reads.started = true
            return true
        }
        if start {
            // One thread at the lowest priority: the reads in the foreground keep the cores
            // they are using, and the build takes what they leave.
            runAtLowPriority { _ = try? self.load(parallel: false) }
        }
    }

    /// The ids of the indexes, without building them (waiting for the check).
    func ids() throws(EngineError) -> [UInt32] {
        switch checked() {
        case .failed(let error): throw error
        case .replaced(let indexes, _): return Array(indexes.keys)
        case .checked(let sections, _): return sections.map(\.id)
        }
    }

    /// Whether the indexes are built: by a build, or by the journal after a failed check.
    var isBuilt: Bool {
        if case .replaced = outcome.withLock({ $0 }) { return true }
        return built.tryWithLock { $0 != nil } ?? false
    }
}

/// Runs `body` on a new thread at the lowest priority (nice 19: it runs whenever a core is
/// free, and never takes one from the threads in the foreground), or on a global queue when
/// no thread can be made.
func runAtLowPriority(_ body: @escaping @Sendable () -> Void) {
    final class Work: Sendable {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }
    let context = Unmanaged.passRetained(Work(body)).toOpaque()
    let entry: @convention(c) (UnsafeMutableRawPointer?) -> Void = { context in
        Unmanaged<Work>.fromOpaque(context!).takeRetainedValue().body()
    }
    if logbook_run_at_low_priority(entry, context) != 0 {
        Unmanaged<Work>.fromOpaque(context).release()
        DispatchQueue.global(qos: .utility).async(execute: body)
    }
}
