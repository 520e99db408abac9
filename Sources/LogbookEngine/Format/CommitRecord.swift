/// The payload of a commit frame (see `JournalFormat.commitPayloadSize`).
struct CommitRecord {
    var version: UInt64
    var operationFrames: Int
    var operations: Int
    var firstFrameOffset: Int
    var timestampMillis: UInt64
    /// Every byte of the segment before this offset was synced when the record was written;
    /// nil in a version-1 record (which says nothing about syncs).
    var syncedOffset: Int?
    /// CRC-32C of the transaction's operation frames as stored; nil in a version-1 record.
    var transactionCRC: UInt32?

    init(
        version: UInt64, operationFrames: Int, operations: Int, firstFrameOffset: Int, timestampMillis: UInt64,
        syncedOffset: Int, transactionCRC: UInt32
    ) {
        self.version = version
        self.operationFrames = operationFrames
        self.operations = operations
        self.firstFrameOffset = firstFrameOffset
        self.timestampMillis = timestampMillis
        self.syncedOffset = syncedOffset
        self.transactionCRC = transactionCRC
    }

    /// A record of either version (told apart by the payload's size); nil when it is neither
    /// or names offsets that cannot be.
    init?(_ raw: UnsafeRawBufferPointer) {
        guard raw.count == JournalFormat.commitPayloadSize || raw.count == JournalFormat.commitPayloadSizeVersion1
        else { return nil }
        version = raw.loadLE(at: 0, as: UInt64.self)
        operationFrames = Int(raw.loadLE(at: 8, as: UInt32.self))
        operations = Int(raw.loadLE(at: 12, as: UInt32.self))
        let first = raw.loadLE(at: 16, as: UInt64.self)
        guard first <= UInt64(JournalFormat.maxSegmentSize) else { return nil }
        firstFrameOffset = Int(first)
        timestampMillis = raw.loadLE(at: 24, as: UInt64.self)
        if raw.count == JournalFormat.commitPayloadSize {
            let synced = raw.loadLE(at: 32, as: UInt64.self)
            guard synced <= first else { return nil }
            syncedOffset = Int(synced)
            transactionCRC = raw.loadLE(at: 40, as: UInt32.self)
        }
    }

    func encoded() -> [UInt8] {
        var w = ByteWriter(capacity: JournalFormat.commitPayloadSize)
        w.appendLE(version)
        w.appendLE(UInt32(operationFrames))
        w.appendLE(UInt32(truncatingIfNeeded: operations))
        w.appendLE(UInt64(firstFrameOffset))
        w.appendLE(timestampMillis)
        w.appendLE(UInt64(syncedOffset ?? 0))
        w.appendLE(transactionCRC ?? 0)
        return w.bytes
    }
}
