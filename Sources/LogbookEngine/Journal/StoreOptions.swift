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
    /// A segment is sealed and a new one started once it reaches this size (between transactions).
    public var segmentSize: Int = 64 << 20
    /// A checkpoint of the indexes is written in the background after this many journal bytes
    /// (0: only on `close()` and `checkpoint()`).
    public var checkpointInterval: Int = 32 << 20
    /// Write a checkpoint on `close()` when anything was committed since the last one.
    public var checkpointOnClose = true
    /// When the store compacts itself (`.default`: in the background, at half dead bytes).
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

    /// The default options: full durability, 64 MiB segments, 32 MiB checkpoint interval, automatic compaction.
    public init() {}
}
