/// What a compaction did.
public struct CompactionReport: Sendable {
    /// Bytes of the segment files before.
    public var bytesBefore: Int
    /// Bytes of the segment files after.
    public var bytesAfter: Int
    /// Uncompressed bytes of live operations copied into the new segments.
    public var liveBytesRewritten: Int
    /// Segments replaced (their files go once no snapshot reads them).
    public var segmentsRemoved: Int
    /// New segments written.
    public var segmentsWritten: Int
    /// The whole compaction, including the fresh checkpoint written at its end.
    public var seconds: Double
    /// Of `seconds`, the time spent writing that checkpoint (the rest rewrote the records).
    public var checkpointSeconds: Double = 0
    /// How long the switch held the writer's lock (a commit arriving then waits this long at
    /// most): the new manifest, and the locations of the records moved.
    public var switchSeconds: Double = 0

    /// A compaction that found nothing to rewrite.
    static let nothing = CompactionReport(
        bytesBefore: 0, bytesAfter: 0, liveBytesRewritten: 0, segmentsRemoved: 0, segmentsWritten: 0, seconds: 0)
}
