/// The replay of one segment: its frames read and checked, each whole transaction applied at
/// its commit record, and the damage that ends it judged (a torn tail cut, or corruption).
extension Recovery {
    /// Replays the committed transactions of one segment from `offset`; returns the end of
    /// its last commit. Cuts a torn tail of the last segment; throws `.corruption` for
    /// damage before the last commit.
    mutating func replaySegment(
        _ file: SegmentFile, from offset: Int, isLast: Bool,
        state: inout IndexState, reader: BlockReader, durableEnd: Int? = nil
    ) throws -> Int {
        // A reader beside a writer reads no further than the writer's last sync reached
        // (`SyncedHint`): what lies past it may still be cut.
        let size = min(try file.handle.size(), durableEnd ?? .max)
        // Only what follows `offset` is read (after a checkpoint, usually little or nothing);
        // `base` turns positions in the file into positions in `data`. Never past the largest
        // size a segment may have: a length read from disk is not trusted (a sparse file of a
        // terabyte would have been read whole); what lies beyond is judged as damage.
        let base = min(offset, size)
        let readable = min(size, options.segmentLimit + Store.preallocationBytes)
        let data = try file.handle.read(count: max(0, readable - base), at: base)
        // The frames of the transaction being read, not their blocks: those are inflated a
        // part at a time once its commit record is found (a transaction of a gigabyte was held
        // inflated whole).
        var pending: [(Int, Frame.Parsed)] = []
        var pendingOperations = 0
        var lastCommitEnd = offset
        // Where the last commit record replayed here begins (its bytes are kept below).
        var lastCommitStart: Int?
        var position = offset
        var damage: (Int, String)?
        try data.withUnsafeBytes { raw in
            scan: while true {
                switch Frame.parse(raw, at: position - base, salt: file.salt) {
                case .end:
                    if !pending.isEmpty { damage = (lastCommitEnd, "a transaction without its commit record") }
                    break scan
                case .invalid(let reason):
                    damage = (position, reason)
                    break scan
                case .frame(let frame):
                    switch frame.type {
                    case .operations:
                        guard
                            frame.codec == .raw || file.cipher != nil
                                || LZ4.declaredLength(UnsafeRawBufferPointer(rebasing: raw[frame.payload])) != nil
                        else {
                            damage = (position, "malformed LZ4 payload")
                            break scan
                        }
                        pending.append((position, frame))
                    case .commit:
                        // Sealed, in an encrypted store: a frame whose checksum holds and whose tag
                        // does not was changed by someone (never by a torn write).
                        guard
                            let opened = Frame.withOpened(
                                raw, frame, cipher: file.cipher, position: position, { CommitRecord($0) })
                        else {
                            throw EngineError.corruption(
                                "a commit record does not authenticate", path: file.path, offset: position)
                        }
                        guard let commit = opened,
                            commit.operationFrames == pending.count,
                            commit.firstFrameOffset == (pending.first?.0 ?? position),
                            commit.version >= state.version
                        else {
                            throw EngineError.corruption(
                                "a commit record does not match its transaction", path: file.path, offset: position)
                        }
                        // Version 2: the record proves its whole transaction. Frames that each
                        // verify but do not add up to it (stale frames of another write) are
                        // damage at the transaction's start, judged like any other below.
                        if let expected = commit.transactionCRC {
                            let frames = UnsafeRawBufferPointer(
                                rebasing: raw[(commit.firstFrameOffset - base)..<(position - base)])
                            if CRC32C.checksum(frames) != expected {
                                damage = (
                                    commit.firstFrameOffset, "the transaction's frames do not match its commit record"
                                )
                                break scan
                            }
                        }
                        if firstVersion == nil { firstVersion = commit.version }
                        if let lastVersion, commit.version > lastVersion {
                            stopped = true
                            break scan
                        }
                        let before = options.salvage ? state : nil
                        do {
                            try applyTransaction(pending, from: raw, file: file, state: &state, reader: reader)
                        } catch {
                            if let before { state = before }
                            throw error
                        }
                        pendingOperations += commit.operations
                        state.version = commit.version
                        pending.removeAll()
                        report.commitsReplayed += 1
                        lastCommitEnd = frame.end + base
                        lastCommitStart = position
                        lastSyncedClaim = (file.number, commit.syncedOffset ?? lastCommitEnd)
                    default:
                        damage = (position, "a \(frame.type) frame inside a segment")
                        break scan
                    }
                    position = frame.end + base
                }
            }
        }
        if let start = lastCommitStart {
            lastCommitFrame = Store.CommitFrame(
                segment: file.number, start: start, bytes: Array(data[(start - base)..<(lastCommitEnd - base)]))
        }
        guard let (at, reason) = damage else { return lastCommitEnd }
        if following && isLast { return lastCommitEnd }
        return try judgeDamage(
            at: at, reason: reason, in: file, data: data, base: base, size: size, lastCommitEnd: lastCommitEnd,
            isLast: isLast)
    }

    /// Applies a transaction whose commit record matched its frames: its blocks inflated and
    /// applied `Store.applyPartBlocks` at a time (as a commit applies a large one), so that at
    /// most one part is in memory inflated. A block that does not inflate, its frame's
    /// checksum and the transaction's notwithstanding, is corruption.
    private mutating func applyTransaction(
        _ frames: [(Int, Frame.Parsed)], from raw: UnsafeRawBufferPointer, file: SegmentFile,
        state: inout IndexState, reader: BlockReader
    ) throws {
        var start = 0
        var ordinal = 0
        while start < frames.count {
            let end = min(frames.count, start + Store.applyPartBlocks)
            var blocks: [(frameOffset: Int, block: [UInt8])] = []
            blocks.reserveCapacity(end - start)
            for (position, frame) in frames[start..<end] {
                guard let block = Frame.decode(raw, frame, cipher: file.cipher, position: position) else {
                    throw EngineError.corruption(
                        file.cipher != nil ? "a frame does not authenticate" : "malformed LZ4 payload",
                        path: file.path, offset: position)
                }
                blocks.append((position, block))
            }
            let table = try IndexState.operationTable(blocks, path: file.path)
            try state.apply(
                transaction: blocks, manifest: table, firstOrdinal: ordinal, segment: file.number, reader: reader)
            ordinal += table.count
            if touchedKeys != nil { for i in 0..<table.count { touchedKeys!.append(table.key(i)) } }
            start = end
        }
    }

    /// Where the replay of a segment ends when its scan stopped at damage: zeros after the last
    /// commit (space allocated ahead) are its end; in a sealed segment, or before a commit
    /// record that proves the damaged bytes were synced, the damage is corruption; otherwise it
    /// is a torn tail, cut back to the last whole commit. Returns the segment's end.
    private mutating func judgeDamage(
        at: Int, reason: String, in file: SegmentFile, data: [UInt8], base: Int, size: Int, lastCommitEnd: Int,
        isLast: Bool
    ) throws -> Int {
        // Zeros from the end of the last commit to the end of the last segment are space the
        // writer allocated ahead of its commits (`Store.preallocate`), left by a process that
        // did not close the store: its end, not damage. (Zeros after frames of a transaction
        // without its commit record are its torn tail, cut below.)
        if isLast && at == lastCommitEnd && at >= base && at - base <= data.count
            && data.withUnsafeBytes({ Self.isZero(UnsafeRawBufferPointer(rebasing: $0[(at - base)...])) })
        {
            return lastCommitEnd
        }
        // Damage. In a sealed segment (synced whole when it was sealed) it is corruption. In
        // the last one it is corruption when a later commit record proves that the damaged
        // bytes had been synced (its synced offset lies past them, or it is a version-1
        // record, which proves nothing and so is taken at its word); otherwise it is what a
        // power loss leaves of unsynced writes, whose pages reach the disk in any order: a
        // torn tail, cut back to the last whole commit.
        if !isLast {
            throw EngineError.corruption("\(reason) in a sealed segment", path: file.path, offset: at)
        }
        let proof = data.withUnsafeBytes { raw in
            Self.commitRecords(in: raw, after: at - base, salt: file.salt, cipher: file.cipher, base: base).first {
                record in
                record.syncedOffset.map { $0 > at } ?? true
            }
        }
        if proof != nil {
            throw EngineError.corruption("\(reason) before the last commit", path: file.path, offset: at)
        }
        if size > lastCommitEnd {
            if !readOnly {
                try file.handle.truncate(to: lastCommitEnd)
                try file.handle.sync()
            }
            noteCut(file: file.path, at: lastCommitEnd, bytes: size - lastCommitEnd, reason: reason)
        }
        return lastCommitEnd
    }

    /// Whether every byte of `bytes` is zero.
    static func isZero(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var i = 0
        while i + 8 <= bytes.count {
            if bytes.loadUnaligned(fromByteOffset: i, as: UInt64.self) != 0 { return false }
            i += 8
        }
        while i < bytes.count {
            if bytes[i] != 0 { return false }
            i += 1
        }
        return true
    }

    /// The commit records of valid commit frames after `offset` (found byte by byte: the
    /// frames between may be damaged), in order.
    /// In an encrypted store (`cipher`), a record counts only when its frame authenticates at
    /// its position (`base` plus its offset in `raw`).
    static func commitRecords(
        in raw: UnsafeRawBufferPointer, after offset: Int, salt: UInt32, cipher: FileCipher? = nil, base: Int = 0
    ) -> [CommitRecord] {
        var records: [CommitRecord] = []
        let tag = cipher == nil ? 0 : FileCipher.tagSize
        let smallest = JournalFormat.frameHeaderSize + JournalFormat.commitPayloadSizeVersion1 + tag
        guard raw.count >= smallest else { return [] }
        var o = offset + 1
        while o <= raw.count - smallest {
            let length = raw.loadLE(at: o + 4, as: UInt32.self)
            if raw[o + 8] == JournalFormat.FrameType.commit.rawValue && raw[o + 9] == 0
                && (length == UInt32(JournalFormat.commitPayloadSize + tag)
                    || length == UInt32(JournalFormat.commitPayloadSizeVersion1 + tag)),
                case .frame(let frame) = Frame.parse(raw, at: o, salt: salt),
                let opened = Frame.withOpened(raw, frame, cipher: cipher, position: base + o, { CommitRecord($0) }),
                let record = opened
            {
                records.append(record)
            }
            o += 1
        }
        return records
    }
}
