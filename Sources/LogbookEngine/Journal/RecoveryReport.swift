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
    /// The offset in `truncatedFile` where the tail was cut.
    public var truncatedOffset: Int?
    /// Why the tail was cut (a torn frame, a checksum mismatch after the last commit…).
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
