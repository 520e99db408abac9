/// When a commit is durable.
public enum Durability: String, Sendable, CaseIterable {
    /// `fdatasync` before `commit` returns. The default.
    case full
    /// Group commit: a commit still waits for a sync, but concurrent commits share one.
    case normal
    /// No sync: a commit survives a crash of the process, not a power loss.
    case none
}

/// When the store compacts itself.
public enum CompactionPolicy: Sendable, Equatable {
    /// Only when `Store.compact()` is called.
    case manual
    /// In the background after a commit, when dead bytes exceed `deadRatio` of all operation
    /// bytes and the store holds at least `minimumBytes`.
    case automatic(deadRatio: Double, minimumBytes: Int)

    public static let `default` = CompactionPolicy.automatic(deadRatio: 0.5, minimumBytes: 32 << 20)
}

/// How to open a store.
///
/// ```swift
/// var options = StoreOptions()
/// options.durability = .normal
/// options.segmentSize = 16 << 20
/// let store = try Store.open(at: "/tmp/items.logbook", options: options)
/// ```
public struct StoreOptions: Sendable {
    public var durability: Durability = .full
    /// A segment is sealed and a new one started once it reaches this size (between transactions).
    public var segmentSize: Int = 64 << 20
    /// A checkpoint of the indexes is written in the background after this many journal bytes
    /// (0: only on `close()` and `checkpoint()`).
    public var checkpointInterval: Int = 32 << 20
    /// Write a checkpoint on `close()` when anything was committed since the last one.
    public var checkpointOnClose = true
    public var compaction: CompactionPolicy = .default
    /// Open without writing anything and without the writer's lock.
    public var readOnly = false
    /// Open read-only even if committed data is damaged, with everything before the damage.
    public var salvage = false
    /// Create the directory and an empty store if there is none.
    public var createIfMissing = true
    /// Bytes of decoded blocks kept in memory for reads.
    public var cacheSize: Int = 32 << 20
    /// Replay the whole journal instead of starting from the checkpoint (what `verify` compares).
    var ignoresCheckpoint = false

    public init() {}
}

/// What opening the store found and did.
public struct RecoveryReport: Sendable, CustomStringConvertible {
    /// The checkpoint the open started from, if any.
    public var checkpoint: UInt64?
    /// Why a checkpoint could not be used (the open then replayed the whole journal).
    public var checkpointProblem: String?
    /// Commits replayed from the journal after the checkpoint.
    public var commitsReplayed = 0
    /// The version of the last commit.
    public var version: UInt64 = 0
    /// Bytes cut from the end of the last segment: an incomplete or damaged tail after the last commit.
    public var truncatedBytes = 0
    /// The file and offset where the tail was cut, and why.
    public var truncatedFile: String?
    public var truncatedOffset: Int?
    public var truncationReason: String?
    /// Files left by an interrupted checkpoint, compaction or rollover that were removed.
    public var removedFiles: [String] = []
    /// In salvage mode: the damage where reading stopped.
    public var salvageStop: EngineError?

    public var description: String {
        var parts = ["version \(version)", "\(commitsReplayed) commits replayed"]
        if let checkpoint { parts.append("from checkpoint \(checkpoint)") }
        if let checkpointProblem { parts.append("checkpoint unusable: \(checkpointProblem)") }
        if truncatedBytes > 0, let file = truncatedFile, let offset = truncatedOffset {
            parts.append("cut \(truncatedBytes) bytes at \(file):\(offset) (\(truncationReason ?? "torn tail"))")
        }
        if !removedFiles.isEmpty { parts.append("removed \(removedFiles.joined(separator: ", "))") }
        if let salvageStop { parts.append("salvage stopped at: \(salvageStop)") }
        return parts.joined(separator: "; ")
    }
}

/// Sizes and counts of a store.
public struct StoreStatistics: Sendable {
    public struct Segment: Sendable {
        public var number: UInt64
        public var bytes: Int
    }
    public var version: UInt64
    public var segments: [Segment]
    /// Bytes of all segment files.
    public var fileBytes: Int
    /// Uncompressed operation bytes still live, and in all (live + superseded).
    public var liveBytes: Int
    public var totalBytes: Int
    public var deadBytes: Int { max(0, totalBytes - liveBytes) }
    public var keyCount: Int
    /// Keys per keyspace (the high 16 bits of a key).
    public var keysPerKeyspace: [UInt16: Int]
    /// Entries per secondary index.
    public var indexEntries: [UInt32: Int]
    public var setCount: Int
    /// Estimated bytes of memory the indexes take.
    public var indexMemoryBytes: Int
    public var pinnedSnapshots: Int
    /// Seconds since the oldest pinned snapshot was taken.
    public var oldestSnapshotAge: Double?
    public var checkpoint: UInt64?
    public var checkpointVersion: UInt64?
}

/// What a compaction did.
public struct CompactionReport: Sendable {
    public var bytesBefore: Int
    public var bytesAfter: Int
    public var liveBytesRewritten: Int
    public var segmentsRemoved: Int
    public var segmentsWritten: Int
    /// The whole compaction, including the fresh checkpoint written at its end.
    public var seconds: Double
    /// Of `seconds`, the time spent writing that checkpoint (the rest rewrote the records).
    public var checkpointSeconds: Double = 0
}
