// The on-disk format, as constants. This file mirrors docs/journal-format.md: change both together.
// All integers are little-endian unless said otherwise.

/// Constants of the Logbook journal format (see `docs/journal-format.md`).
public enum JournalFormat {
    /// The format version written in every file header and manifest. Version 2 added the
    /// transaction checksum and the synced offset to commit records.
    public static let version: UInt16 = 2
    /// The versions this build reads. A store of version 1 is read as it is; the first commit
    /// after opening it for writing starts a version-2 segment, so no segment mixes versions.
    public static let readableVersions: ClosedRange<UInt16> = 1...2
    /// The manifest of an encrypted store: version 3 (its key salt, key check and signature
    /// follow the segment numbers), which builds before encryption refuse.
    public static let encryptedManifestVersion: UInt16 = 3
    /// An encrypted checkpoint file is sealed in chunks of this many bytes of its plain form.
    public static let sealedChunkSize = 16 << 10

    // MARK: Files of a store directory

    /// The advisory lock file (empty). Every writing process holds `flock(LOCK_SH)` on it; a
    /// writer that finds itself alone at its open holds `LOCK_EX` while it recovers (cuts a
    /// torn tail, removes leftovers); readers take no lock.
    public static let lockFileName = "LOCK"
    /// The commit lock and the end of the last commit (`TailHint`): a writer holds
    /// `flock(LOCK_EX)` on it from the moment it catches up with other processes' commits to
    /// the end of its own commit.
    public static let tailFileName = "TAIL"
    /// How far the writer's last sync reached (`SyncedHint`): what a reader in another
    /// process may read of the active segment.
    public static let syncedFileName = "SYNCED"
    /// The sync lock (empty): a LogbookSync engine holds `flock(LOCK_EX)` on it for each push,
    /// pull or status read, so that two engines (in one process or several) never sync one
    /// store at once. The engine creates it; the store's own opens never take it.
    public static let syncLockFileName = "SYNCLOCK"
    /// The current manifest: which segments make up the store and which checkpoint is current.
    public static let manifestFileName = "MANIFEST"
    /// Suffix of files being written before an atomic rename; removed by recovery.
    public static let temporarySuffix = ".tmp"
    /// Segment file name: `journal-` + 12 lowercase hex digits of the segment number + `.lbj`.
    public static let segmentPrefix = "journal-"
    /// The extension of segment file names.
    public static let segmentSuffix = ".lbj"
    /// Checkpoint file name: `checkpoint-` + 12 lowercase hex digits + `.lbc`.
    public static let checkpointPrefix = "checkpoint-"
    /// The extension of checkpoint file names.
    public static let checkpointSuffix = ".lbc"
    /// Permission bits of every file the engine creates.
    public static let fileMode: UInt32 = 0o600
    /// Permission bits of a store directory the engine creates.
    public static let directoryMode: UInt32 = 0o700

    // MARK: File headers (32 bytes)

    /// Magic of a segment file: "LBKJRNL" followed by a zero byte.
    public static let segmentMagic: [UInt8] = Array("LBKJRNL".utf8) + [0]
    /// Magic of a checkpoint file: "LBKCKPT" followed by a zero byte.
    public static let checkpointMagic: [UInt8] = Array("LBKCKPT".utf8) + [0]
    /// The version written in a checkpoint file's header. Version 3 keeps the primary index's
    /// well-filled leaves whole, uncompressed, in `checkpointSlots` frames that an open uses in
    /// place; versions 1 and 2 hold every primary entry in the compressed stream.
    public static let checkpointVersion: UInt16 = 3
    /// The checkpoint versions this build reads.
    public static let readableCheckpointVersions: ClosedRange<UInt16> = 1...3
    /// A leaf of the primary index with at least this many of its 64 keys present is written
    /// whole into a checkpoint's `checkpointSlots` frames (8 bytes a slot, 16 bytes a key at
    /// worst); a sparser one's keys go into the stream.
    public static let wholeLeafMinimumKeys = 32
    /// Bytes of one whole leaf in a `checkpointSlots` frame: 64 locations of 8 bytes.
    public static let wholeLeafSize = 512
    /// Magic of the manifest: "LBKMANI" followed by a zero byte.
    public static let manifestMagic: [UInt8] = Array("LBKMANI".utf8) + [0]
    /// Size of the segment and checkpoint file header.
    /// Layout: magic[8] · version u16 · headerSize u16 · reserved u32 · fileNumber u64 · salt u32 · crc32c u32
    /// (the CRC covers bytes 0..<28).
    public static let fileHeaderSize = 32

    // MARK: Frames

    /// Size of a frame header. Layout: crc32c u32 · payloadLength u32 · type u8 · codec u8 · reserved u16.
    /// The CRC covers the file's salt (4 bytes), header bytes 4..<12 and the stored payload.
    public static let frameHeaderSize = 12
    /// Largest stored payload of one frame; checked before any allocation.
    public static let maxFramePayload = 16 << 20
    /// Largest uncompressed payload an LZ4 frame may declare; checked before any allocation.
    public static let maxUncompressedPayload = 16 << 20
    /// Operations are packed into blocks of about this many bytes before a block becomes a frame.
    /// Every operation starts below this offset of its block, so 16 bits locate it.
    public static let blockTargetSize = 60 << 10

    /// Frame types. Zero is reserved as invalid so that zero fill ends a scan.
    public enum FrameType: UInt8, Sendable {
        /// Never written: a zero type byte ends a scan (zero fill after a crash).
        case invalid = 0
        /// A block of operations of a transaction (see `OperationCode`).
        case operations = 1
        /// The commit record that ends a transaction. Payload: `CommitRecord`.
        case commit = 2
        /// A chunk of a checkpoint's serialized index state.
        case checkpointData = 3
        /// The last frame of a checkpoint. Payload: chunk count u32 · total raw length u64;
        /// from checkpoint version 3, then slot frame count u32 · whole leaves u64.
        case checkpointEnd = 4
        /// Whole leaves of a checkpoint's primary index, stored raw (version 3). Payload:
        /// padding u16 · that many zero bytes (so that the leaves start at a multiple of 512
        /// bytes in the file) · leaves, 512 bytes each (64 locations, u64 each, 0 = absent).
        case checkpointSlots = 5
    }

    /// Payload codecs.
    public enum Codec: UInt8, Sendable {
        /// Payload stored as is.
        case raw = 0
        /// Payload = uncompressedLength u32 · LZ4 block (decoded with `LZ4_decompress_safe`).
        case lz4 = 1
    }

    /// Size of a commit record's payload (version 2):
    /// version u64 · operationFrames u32 · operations u32 · firstFrameOffset u64 · timestampMillis u64 ·
    /// syncedOffset u64 · transactionCRC u32.
    ///
    /// `syncedOffset`: the offset of the segment up to which every byte was synced when this
    /// record was written (what recovery uses to tell a torn tail from damage to synced data).
    /// `transactionCRC`: CRC-32C (seed 0) of the transaction's operation frames as stored,
    /// headers included, from `firstFrameOffset` to the commit frame.
    public static let commitPayloadSize = 44
    /// Size of a version-1 commit record's payload (no synced offset, no transaction checksum).
    public static let commitPayloadSizeVersion1 = 32

    /// Operation codes inside an operations block. A `key` is written as two uvarints,
    /// keyspace (high 16 bits) then id (low 48 bits).
    public enum OperationCode: UInt8, Sendable {
        /// key · valueLength uvarint · value · indexKeyCount uvarint ·
        /// (index uvarint · keyLength uvarint · key)*
        case put = 1
        /// key
        case delete = 2
        /// setKey (a key) · count uvarint · first member (a key) · (delta uvarint ≥ 1)*
        case setAdd = 3
        /// Same layout as `setAdd`; removes the members.
        case setRemove = 4
        /// Same layout as `setAdd`; the members become the whole set (count 0 removes the set).
        case setReplace = 5
    }

    // MARK: Limits (the writer refuses what breaks them; the reader checks them before allocating)

    /// Largest key of a secondary index entry, in bytes.
    public static let maxIndexKeyLength = 1024
    /// Largest value of one `put`, in bytes.
    public static let maxValueLength = 8 << 20
    /// Most index keys one `put` carries.
    public static let maxIndexKeysPerPut = 1 << 16
    /// Largest encoded operation, in bytes: an operation and the rest of its block must fit
    /// in one frame (`maxFramePayload`), and a block is finished once it passes
    /// `blockTargetSize`.
    public static let maxOperationSize = maxFramePayload - blockTargetSize - 64
    /// Smallest `StoreOptions.segmentSize`: room for a header and a small transaction.
    public static let minSegmentSize = 1 << 10

    // MARK: Locations

    /// A record's location packs segment number (18 bits) · frame offset (30 bits) ·
    /// offset in the frame's uncompressed block (16 bits) into 64 bits.
    /// (Computed so that they fold into constants where `Location` and `EngineKey` use them.)
    @inlinable public static var locationSegmentBits: Int { 18 }
    @inlinable public static var locationFrameOffsetBits: Int { 30 }
    @inlinable public static var locationBlockOffsetBits: Int { 16 }
    /// Largest segment number a location can name.
    public static let maxSegmentNumber: UInt64 = (1 << UInt64(locationSegmentBits)) - 1
    /// Largest size a segment may reach (a transaction never spans two segments).
    public static let maxSegmentSize = 1 << locationFrameOffsetBits

    // MARK: Keys

    /// Keys are 64-bit. The high 16 bits name a keyspace; the engine counts keys per keyspace.
    /// `EngineKey` packs and unpacks keys with it.
    @inlinable public static var keyspaceShift: Int { 48 }
}
