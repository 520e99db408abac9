/// Sizes and counts of a store.
public struct StoreStatistics: Sendable {
    /// One segment file of the store.
    public struct Segment: Sendable {
        /// The segment's number (its file name is `journal-` + 12 hex digits of it).
        public var number: UInt64
        /// The file's size in bytes.
        public var bytes: Int
    }
    /// The version of the last commit.
    public var version: UInt64
    /// The segments of the store, oldest first.
    public var segments: [Segment]
    /// Bytes of all segment files.
    public var fileBytes: Int
    /// Uncompressed operation bytes still live, and in all (live + superseded).
    public var liveBytes: Int
    /// Uncompressed bytes of all operations in the segments, live and superseded.
    public var totalBytes: Int
    /// Bytes of superseded operations: what a compaction would reclaim (before compression).
    public var deadBytes: Int { max(0, totalBytes - liveBytes) }
    /// The number of keys with a value.
    public var keyCount: Int
    /// Keys per keyspace (the high 16 bits of a key).
    public var keysPerKeyspace: [UInt16: Int]
    /// Entries per secondary index.
    public var indexEntries: [IndexID: Int]
    /// The number of non-empty membership sets.
    public var setCount: Int
    /// Estimated bytes of memory the indexes take: the primary index, the membership sets,
    /// and the secondary indexes — built ones by their trees, ones still in the checkpoint by
    /// what is held for them (their seek points, and the encoded section once a read in place
    /// has read it). Asking does not build them.
    public var indexMemoryBytes: Int
    /// Bytes of decoded blocks held in the store's shared block cache now (at most about
    /// `StoreOptions.cacheSize`).
    public var blockCacheBytes = 0
    /// Snapshots alive now (each keeps the segments it reads).
    public var pinnedSnapshots: Int
    /// Seconds since the oldest pinned snapshot was taken.
    public var oldestSnapshotAge: Double?
    /// The number of the current checkpoint file, if any.
    public var checkpoint: UInt64?
    /// The version the current checkpoint covers.
    public var checkpointVersion: UInt64?
    /// Background checkpoints or compactions that failed in a row (0 once one succeeds).
    public var maintenanceFailures = 0
    /// Why the last background checkpoint or compaction failed, if one did.
    public var lastMaintenanceFailure: EngineError?
}
