#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// How to open a store.
///
/// ```swift
/// var options = StoreOptions()
/// options.durability = .normal
/// options.segmentSize = 16 << 20
/// let store = try Store.open(at: "/tmp/items.logbook", options: options)
/// ```
public struct StoreOptions: Sendable {
    /// When a commit is durable (`.full` by default).
    public var durability: Durability = .full
    /// A segment is sealed and a new one started once it reaches this size (between
    /// transactions). From `StoreOptions.minimumSegmentSize` (64 KiB) to
    /// `JournalFormat.maxSegmentSize` (1 GiB, what a record's location can address). A store
    /// holds at most `JournalFormat.maxSegmentNumber` (262,143) segments at once, so the size
    /// bounds what it can hold: 16 GiB at the minimum, 16 TiB at the default.
    public var segmentSize: Int = 64 << 20
    /// The smallest `segmentSize` a store takes: below it a store fills its file numbers
    /// before it holds much (1 KiB segments: 256 MiB), and every commit of any size rolls over.
    public static let minimumSegmentSize = 64 << 10
    /// Segments down to `JournalFormat.minSegmentSize` (1 KiB): for tests that need many
    /// rollovers from a few commits.
    package var allowsTinySegments = false
    /// A checkpoint of the indexes is written in the background after this many journal bytes
    /// (0: only on `close()` and `checkpoint()`).
    public var checkpointInterval: Int = 32 << 20
    /// Write a checkpoint on `close()` when anything was committed since the last one.
    public var checkpointOnClose = true
    /// When the store compacts itself (`.default`: in the background, at half dead bytes).
    public var compaction: CompactionPolicy = .default
    /// Open without writing anything and without the writer's lock.
    public var readOnly = false
    /// Keep the store in memory, not in files: the same journal, indexes, checkpoints and
    /// compaction, gone when the store is closed (tests, previews, SwiftData's
    /// `isStoredInMemoryOnly`). The directory is then only a name; every open is a new, empty
    /// store.
    public var inMemory = false
    /// Open read-only even if committed data is damaged, with everything before the damage.
    public var salvage = false
    /// Create the directory and an empty store if there is none.
    public var createIfMissing = true
    /// The key of an encrypted store (an `EncryptionKey`, or a provider that fetches it from a
    /// keyring when the store opens). A new store opened with one is encrypted; an encrypted
    /// store cannot be opened without it (`keyRequired`), nor with another (`wrongKey`), and an
    /// unencrypted one is not opened with one (`notEncrypted`: `Store.changeKey` encrypts it).
    ///
    /// ```swift
    /// options.encryptionKey = try EncryptionKey(contentsOfFile: "/run/secrets/items.key")
    /// ```
    public var encryptionKey: (any EncryptionKeyProvider)?
    /// Bytes of decoded blocks kept in memory for reads (shared by every snapshot of the
    /// store; first in, first out). Reads of many keys at once, scans, compactions, batch
    /// updates and verification read around it, so that they do not push out the blocks of
    /// the reads that come back to them (`Snapshot.forEachValue(forKeys:caching:_:)`);
    /// `StoreStatistics.blockCacheBytes` says what it holds.
    public var cacheSize: Int = 32 << 20
    /// Where the store reports what it cannot report by throwing: a background checkpoint
    /// or compaction that failed (with when it will try again). Standard error by default;
    /// nil for silence. The same failures show in `Store.statistics()`.
    public var log: (@Sendable (String) -> Void)? = StoreOptions.standardError
    /// Called on the compaction's thread as a compaction starts, before it seals the active
    /// segment: what it commits is compacted with the rest. It returns the versions that must
    /// stay readable (`Store.snapshot(asOf:)`): every version after the one it returns, or
    /// none with nil. The object graph applies its history retention here (a purge of the
    /// history records the retention lets go) and keeps the versions of the history it keeps.
    ///
    /// With a version returned, a compaction folds only the oldest segments whose commits are
    /// all at or before it (none, if the first segment has a later one), so that every later
    /// version can still be replayed.
    public var beforeCompaction: (@Sendable () -> UInt64?)?
    /// Tests: called by a compaction once it has remapped its copy of the primary index,
    /// before its switch (commits made here are the ones the switch must carry over).
    var beforeCompactionSwitch: (@Sendable () -> Void)?
    /// Tests: called at each `StorePausePoint` a commit, checkpoint or compaction passes, on
    /// its thread. The crash tests stop a process there (the helper's `HELPER_PAUSE`) and kill
    /// it: holding the commit lock, half-way through a commit, a checkpoint or a compaction.
    package var pausePoint: (@Sendable (StorePausePoint) -> Void)?
    /// Replay the whole journal instead of starting from the checkpoint (what `verify` compares).
    var ignoresCheckpoint = false
    /// The most bytes a segment may hold (`JournalFormat.maxSegmentSize`; tests lower it to
    /// reach the limit without writing a gigabyte).
    var segmentLimit = JournalFormat.maxSegmentSize

    /// The default options: full durability, 64 MiB segments, 32 MiB checkpoint interval, automatic compaction.
    public init() {}

    /// Writes a line to standard error.
    public static let standardError: @Sendable (String) -> Void = { line in
        var text = line
        if !text.hasSuffix("\n") { text += "\n" }
        // One write(2) to descriptor 2: a line is never interleaved with another thread's.
        _ = text.withCString { write(2, $0, strlen($0)) }
    }

    /// Throws `invalidArgument` naming the first option out of its range.
    func validate() throws {
        func invalid(_ message: String) -> EngineError { EngineError(.invalidArgument, message) }
        let smallest = allowsTinySegments ? JournalFormat.minSegmentSize : Self.minimumSegmentSize
        guard (smallest...JournalFormat.maxSegmentSize).contains(segmentSize) else {
            throw invalid(
                "segmentSize \(segmentSize) is out of range: from \(smallest) to \(JournalFormat.maxSegmentSize) bytes"
            )
        }
        guard checkpointInterval >= 0 else { throw invalid("checkpointInterval \(checkpointInterval) is negative") }
        guard cacheSize >= 0 else { throw invalid("cacheSize \(cacheSize) is negative") }
        if case .automatic(let ratio, let minimum) = compaction {
            guard ratio > 0 && ratio <= 1 else {
                throw invalid("the compaction's deadRatio \(ratio) is out of range: above 0, at most 1")
            }
            guard minimum >= 0 else { throw invalid("the compaction's minimumBytes \(minimum) is negative") }
        }
    }
}

/// Places in the engine's work where a test may stop a process and kill it there
/// (`StoreOptions.pausePoint`; Tests/LogbookEngineTests/CrashRecoveryTests.swift).
package enum StorePausePoint: String, Sendable, CaseIterable {
    /// The commit lock is held (after the catch-up), nothing written yet.
    case commitLockTaken = "commit-lock"
    /// A commit's frames are written and not yet synced or acknowledged; the lock is held.
    case commitWritten = "commit-written"
    /// A checkpoint's temporary file is half-written.
    case checkpointWriting = "checkpoint-writing"
    /// A checkpoint's file is written and named; the manifest does not name it yet.
    case checkpointWritten = "checkpoint-written"
    /// A compaction has written its new segments and not yet switched (no lock held).
    case compactionRewritten = "compaction-rewritten"
    /// A compaction holds the commit lock to switch; the manifest naming its segments is not
    /// written yet.
    case compactionSwitching = "compaction-switching"
}
