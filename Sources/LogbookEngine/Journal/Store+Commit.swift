import Dispatch

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

extension Store {
    /// Commits a transaction and returns its version. When this returns, the transaction is
    /// visible to new snapshots and, with `.full` or `.normal` durability, on disk.
    ///
    /// A failed write or sync makes the store refuse all further writes (code `.failed`) until
    /// it is reopened; a commit that throws may or may not survive a crash, but never in part.
    ///
    /// ```swift
    /// var transaction = Transaction()
    /// transaction.put(EngineKey(keyspace: 1, id: 42), value: Array("hello".utf8))
    /// let version = try store.commit(transaction)
    /// ```
    ///
    /// Under the writer lock a commit runs four phases: payloads (compress what the
    /// transaction's background compressor has not), frames (operation frames, then the commit
    /// record, written at the append offset), apply (the sync starts, the indexes take the new
    /// operations meanwhile), and publish (the new state becomes what snapshots see).
    ///
    /// With `expectingVersion`, the commit is refused (`versionMismatch`, nothing written)
    /// unless it would be given that version: a caller that writes records naming the version
    /// of their own transaction (history records, keyed by version) checks that no other
    /// commit came between.
    @discardableResult
    public func commit(_ transaction: Transaction, expectingVersion: UInt64? = nil) throws -> UInt64 {
        var transaction = transaction
        return try commit(taking: &transaction, expectingVersion: expectingVersion)
    }

    /// Commits `transaction` as `commit(_:expectingVersion:)` does, and takes its compressed
    /// blocks: each is freed once written and applied, where a copy left with the caller
    /// would keep them all until the commit returns (16 MB for a million small records).
    /// A large `transaction` is spent (committing it again is a precondition failure).
    @discardableResult
    package func commit(taking transaction: inout Transaction, expectingVersion: UInt64? = nil) throws -> UInt64 {
        precondition(!transaction.isSpent, "a transaction whose blocks a commit took cannot be committed again")
        if isReadOnly { throw EngineError(.readOnly, "the store was opened read-only", path: directory) }
        if let violation = transaction.limitViolation { throw violation }
        let blocks = transaction.commitBlocks()
        if blocks.isEmpty {
            return try writer.withLock { state in
                try state.checkWritable()
                return state.working.version
            }
        }
        let durability = options.durability
        let version: UInt64 = try writer.withLock { state in
            try state.checkWritable()
            // Deferred indexes are checked before anything is written: a transaction whose
            // indexes (or whole leaves) could not be had (`DeferredIndexes`, `SlotCheck`) never
            // reaches the journal. (The first commit after an open waits here for the checks
            // the open left running.)
            try state.working.checkLoaded()
            // Under the commit lock, after the commits of other writers (`withCommitLock`).
            return try withCommitLock(&state) { state in
                // A full segment is sealed; so is one of an older format version (a store of
                // version 1 opened by this build), so that no segment mixes versions.
                // In an encrypted store, the first commit of a writer starts a new segment
                // (`WriterState.needsFreshSegment`).
                if state.appendOffset >= options.segmentSize || state.active?.formatVersion != JournalFormat.version
                    || state.needsFreshSegment
                {
                    try rollover(&state)
                }
                let version = state.working.version + 1
                if let expectingVersion, expectingVersion != version {
                    throw EngineError(
                        .versionMismatch, "the commit would be version \(version), not the expected \(expectingVersion)"
                    )
                }

                var payloads = Self.framePayloads(&transaction, blocks)
                // The size is known before anything is written: a transaction that does not fit
                // what is left of the segment goes into a fresh one, and one that no segment can
                // hold is refused here (it used to be refused after up to a gigabyte was written,
                // and the same transaction committed on a fresh store).
                let needed = Self.encodedSize(blocks, payloads)
                if state.appendOffset + needed > options.segmentLimit {
                    guard JournalFormat.fileHeaderSize + needed <= options.segmentLimit else {
                        throw tooLarge()
                    }
                    try rollover(&state)
                }
                guard let active = state.active else { throw EngineError(.readOnly, "no active segment") }
                let written = try writeFrames(
                    blocks, payloads: &payloads, version: version,
                    operationCount: transaction.operationCount, to: active, state: &state)
                options.pausePoint?(.commitWritten)
                // A large transaction syncs on another thread while the indexes are updated; a small
                // one syncs on this thread afterwards (a handoff would cost more than it saves).
                let sync = durability == .full ? PendingSync(active, overlapped: blocks.count >= 4) : nil
                do {
                    try apply(
                        blocks, stored: &payloads, frameOffsets: written.frameOffsets,
                        manifest: transaction.keepsTable ? transaction.manifest : nil, retained: transaction.retained,
                        segment: active, state: &state)
                } catch {
                    state.recordFailure(error)
                    throw error
                }
                do {
                    try sync?.wait()
                } catch {
                    // The page cache may now hold pages marked clean that never reached the disk:
                    // cut them, so that nothing past the last sync is ever read back.
                    state.fail(error, truncating: active, to: state.syncedOffset)
                    throw error
                }
                publish(version: version, end: written.end, durability: durability, state: &state)
                return version
            }
        }
        if durability == .normal { try waitDurable(version) }
        scheduleMaintenanceIfNeeded()
        return version
    }

    /// Phase 1: the stored payload (codec and bytes) of every block. Blocks compressed in the
    /// background while the transaction was built are ready; the rest are compressed now, on
    /// all cores (each block is independent). A nil payload means "store the block raw".
    private static func framePayloads(_ transaction: inout Transaction, _ blocks: [[UInt8]]) -> [Int: (
        JournalFormat.Codec, [UInt8]?
    )] {
        var stored = transaction.takeStoredBlocks()
        for (i, payload) in transaction.compressor?.finish() ?? [:] { stored[i] = payload }
        let missing = blocks.indices.filter { stored[$0] == nil }
        guard !missing.isEmpty else { return stored }
        var encoded = [(JournalFormat.Codec, [UInt8]?)](repeating: (.raw, nil), count: missing.count)
        encoded.withUnsafeMutableBufferPointer { buffer in
            // Each worker writes distinct elements; the buffer outlives the parallel loop.
            let out = UncheckedSendable(buffer)
            let workers = missing.count >= 16 ? 2 : 1
            let work: @Sendable (Int) -> Void = { worker in
                var j = worker
                while j < missing.count {
                    out.value[j] = blocks[missing[j]].withUnsafeBytes { Frame.encodePayload($0) }
                    j += workers
                }
            }
            if workers == 1 { work(0) } else { DispatchQueue.concurrentPerform(iterations: workers, execute: work) }
        }
        for (j, i) in missing.enumerated() { stored[i] = encoded[j] }
        return stored
    }

    /// Phase 2: the operation frames and the commit record, appended at the append offset.
    /// Returns where each operation frame starts and where the commit record ends.
    ///
    /// The frames go out in writes of about `writeChunk` bytes (1 MiB). Nothing after `appendOffset` counts until a commit
    /// record is there, so an error before the last write leaves the store as it was (the next
    /// commit overwrites the partial frames); a failed write poisons the store like any other.
    private func writeFrames(
        _ blocks: [[UInt8]], payloads: inout [Int: (JournalFormat.Codec, [UInt8]?)],
        version: UInt64, operationCount: Int, to active: SegmentFile,
        state: inout WriterState
    ) throws -> (frameOffsets: [Int], end: Int) {
        let salt = active.salt
        var out: [UInt8] = []
        out.reserveCapacity(
            min(payloads.values.reduce(64) { $0 + ($1.1?.count ?? 0) } + blocks.count * 16, Self.writeChunk + 4096))
        var frameOffsets: [Int] = []
        frameOffsets.reserveCapacity(blocks.count)
        var outStart = state.appendOffset
        var transactionCRC: UInt32 = 0
        /// In an encrypted store: how the next frame is sealed (its nonce is its position).
        func seal() -> FrameSeal? { active.cipher.map { FrameSeal(cipher: $0, base: outStart) } }
        func flush() throws {
            do {
                try active.handle.write(out, at: outStart)
            } catch {
                // A partial transaction must not stay where a later open could read it.
                state.fail(error, truncating: active, to: state.appendOffset)
                throw error
            }
            state.allocatedEnd = max(state.allocatedEnd, outStart + out.count)
            outStart += out.count
            out.removeAll(keepingCapacity: true)
        }
        for i in blocks.indices {
            frameOffsets.append(outStart + out.count)
            let (codec, payload) = payloads[i]!
            if let payload {
                payload.withUnsafeBytes {
                    Frame.append(type: .operations, codec: codec, stored: $0, salt: salt, seal: seal(), to: &out)
                }
            } else {
                blocks[i].withUnsafeBytes {
                    Frame.append(type: .operations, codec: .raw, stored: $0, salt: salt, seal: seal(), to: &out)
                }
            }
            // A block let go before the commit is inflated again from its stored form later.
            if !blocks[i].isEmpty { payloads[i] = nil }
            if out.count >= Self.writeChunk {
                try checkSize(outStart + out.count)
                transactionCRC = CRC32C.checksum(out, seed: transactionCRC)
                try flush()
            }
        }
        transactionCRC = CRC32C.checksum(out, seed: transactionCRC)
        // The record proves its whole transaction (the checksum of its frames) and says how
        // far the segment was synced before it: damage below that offset is not a torn write.
        let record = CommitRecord(
            version: version, operationFrames: blocks.count, operations: operationCount,
            firstFrameOffset: frameOffsets[0], timestampMillis: Self.nowMillis(),
            syncedOffset: state.syncedOffset, transactionCRC: transactionCRC)
        Frame.append(
            type: .commit, payload: record.encoded(), compress: false, salt: salt, seal: seal(), to: &out)
        try checkSize(outStart + out.count)
        if outStart == state.appendOffset { preallocate(active, through: outStart + out.count, state: &state) }
        try flush()
        return (frameOffsets, outStart)
    }

    /// Before a commit written in one write: makes the active segment's file span it, by
    /// allocating `preallocationBytes` ahead (within the segment size) when it does not, so
    /// that the write and its sync change no file length. On ext4 an appending write's
    /// `fdatasync` also commits the inode's new length and blocks to the file system's
    /// journal; inside allocated space it flushes the data alone: a small commit at durability
    /// `full` measured 2.1× faster (see docs/benchmarks.md, W7). The zeros after the last
    /// commit are read as the end of the segment (`Recovery`), and cut when it is sealed or the
    /// store is closed. A transaction written in several writes appends as before: its data
    /// outweighs the inode.
    private func preallocate(_ active: SegmentFile, through end: Int, state: inout WriterState) {
        guard end > state.allocatedEnd else { return }
        let target = min(state.appendOffset + Self.preallocationBytes, options.segmentSize)
        guard target > end else { return }
        if (try? active.handle.preallocate(upTo: target)) == true { state.allocatedEnd = target }
    }

    /// How far ahead of a small commit a segment is allocated: one allocation (and one sync of
    /// the inode) serves thousands of small commits.
    static let preallocationBytes = 1 << 20

    /// Phase 3: the new blocks enter the frame cache and the working index state. A large
    /// transaction is applied a part at a time, each part's blocks inflated from their stored
    /// form (`Transaction.storedBlocks`) and its operations read from them (such a transaction
    /// keeps no table), so that its raw bytes are never all in memory at once; its inflated
    /// blocks are not cached (the cache would keep them).
    private func apply(
        _ blocks: [[UInt8]], stored: inout [Int: (JournalFormat.Codec, [UInt8]?)], frameOffsets: [Int],
        manifest: OperationTable?, retained: RetainedPuts, segment active: SegmentFile, state: inout WriterState
    ) throws {
        let reader = BlockReader(segments: state.segments, cache: cache)
        // A transaction that keeps its table (at most `Transaction.tableBlocks` blocks, all
        // still raw) is applied at once.
        let part = manifest == nil ? Self.applyPartBlocks : blocks.count
        /// A part's blocks, raw or stored (to be inflated), with their frame offsets; raw
        /// blocks enter the cache here.
        func inputs(_ range: Range<Int>) -> [PartInput] {
            range.map { i in
                if blocks[i].isEmpty {
                    return PartInput(frameOffset: frameOffsets[i], raw: nil, stored: stored.removeValue(forKey: i)!)
                }
                cache.insert(
                    Location(segment: active.number, frameOffset: frameOffsets[i], blockOffset: 0).frameKey, blocks[i])
                return PartInput(frameOffset: frameOffsets[i], raw: blocks[i], stored: (.raw, nil))
            }
        }
        // A rewrite (a batch update: its puts retained) of more than one part prepares the
        // next part on another thread while this one applies the current one: the decoding
        // was a third of the writer's time in the commit of a million retained puts. Other
        // transactions prepare each part here: for a small one a handoff would cost more than
        // it saves, and a large batch insert's peak memory grew by 8 MB with it (the other
        // thread's allocations, in its own arena).
        let pipelined = blocks.count > part && !retained.isEmpty
        var next =
            pipelined ? StealableWork { [inputs = inputs(0..<part)] in try Self.prepare(inputs, decoding: true) } : nil
        var start = 0
        // The number of the part's first operation in the transaction.
        var ordinal = 0
        while start < blocks.count {
            let end = min(blocks.count, start + part)
            let (raw, decoded) = try next?.result() ?? Self.prepare(inputs(start..<end), decoding: manifest == nil)
            next =
                pipelined && end < blocks.count
                ? StealableWork { [inputs = inputs(end..<min(blocks.count, end + part))] in
                    try Self.prepare(inputs, decoding: true)
                } : nil
            let table: OperationTable
            if let manifest {
                // A transaction keeps its table up to `Transaction.tableBlocks` blocks: one part.
                precondition(start == 0 && end == blocks.count, "a listed transaction fits in one part")
                table = manifest
            } else {
                table = decoded!
            }
            try state.working.apply(
                transaction: raw, manifest: table, retained: retained, firstOrdinal: ordinal, segment: active.number,
                reader: reader)
            ordinal += table.count
            if state.compactionTouched != nil {
                // A compaction is remapping a copy of the primary index: it takes these keys'
                // new locations from here at its switch.
                for i in 0..<table.count { state.compactionTouched!.append(table.key(i)) }
            }
            start = end
        }
    }

    /// One block of a part of a transaction being applied: raw, or its stored form to inflate.
    struct PartInput: Sendable {
        var frameOffset: Int
        var raw: [UInt8]?
        var stored: (JournalFormat.Codec, [UInt8]?)
    }

    /// A part's blocks inflated (for this part only: caching them would keep them) and, when
    /// `decoding` (a transaction too large to keep its table), its operations read from them.
    private static func prepare(_ inputs: [PartInput], decoding: Bool) throws -> (
        [(frameOffset: Int, block: [UInt8])], OperationTable?
    ) {
        let raw = inputs.map { ($0.frameOffset, $0.raw ?? Transaction.inflate($0.stored, raw: [])) }
        guard decoding else { return (raw, nil) }
        do { return (raw, try OperationTable.decode(raw)) } catch {
            throw EngineError(.corruption, "a transaction's own block does not decode: \(error)")
        }
    }

    /// Blocks of a large transaction applied to the indexes at once: about 1 MB of operations
    /// inflated, and their table (0.5 MB for small records), alive at the commit's peak beside
    /// the indexes it grows (two parts in a rewrite's: the one applied, the next prepared).
    /// Smaller parts cost a few dispatches more each.
    static let applyPartBlocks = 16
    /// A large transaction's frames are written in writes of about this many bytes.
    static let writeChunk = 1 << 20

    /// Phase 4: the commit becomes the writer's state, and — unless group commit publishes it
    /// after its sync (`.normal`) — what new snapshots see.
    private func publish(version: UInt64, end: Int, durability: Durability, state: inout WriterState) {
        state.working.version = version
        state.bytesSinceCheckpoint += end - state.appendOffset
        state.appendOffset = end
        state.lastWritten = version
        if durability == .full { state.syncedOffset = end }
        if durability != .normal {
            publish(state)
            if durability == .full { groupSync.setSynced(version) }
        }
    }

    private func checkSize(_ end: Int) throws {
        guard end <= options.segmentLimit else { throw tooLarge() }
    }

    private func tooLarge() -> EngineError {
        EngineError(
            .transactionTooLarge,
            "the transaction is too large: a segment holds at most \(options.segmentLimit) bytes "
                + "(JournalFormat.maxSegmentSize), and a transaction never spans two")
    }

    /// The bytes `writeFrames` writes for these blocks: each operation frame and the commit
    /// record (its frame, at most this long).
    static func encodedSize(_ blocks: [[UInt8]], _ payloads: [Int: (JournalFormat.Codec, [UInt8]?)]) -> Int {
        var total = JournalFormat.frameHeaderSize + 128
        for i in blocks.indices {
            total += JournalFormat.frameHeaderSize + (payloads[i]?.1?.count ?? blocks[i].count)
        }
        return total
    }

    static func nowMillis() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return UInt64(ts.tv_sec) * 1000 + UInt64(ts.tv_nsec) / 1_000_000
    }

    /// Group commit: the first committer to find no sync running syncs everything written so
    /// far and publishes it; the others wait for a sync that covers their version.
    func waitDurable(_ version: UInt64) throws {
        let group = groupSync
        group.lock.lock()
        defer { group.lock.unlock() }
        while group.synced < version {
            if let failure = group.failure { throw failure }
            if group.syncing {
                group.lock.wait()
                continue
            }
            group.syncing = true
            group.lock.unlock()
            var outcome: Result<UInt64, EngineError>
            do {
                let (target, file, offset, written) = try writer.withLock { writerState in
                    try writerState.checkWritable()
                    return (
                        writerState.lastWritten, writerState.active, writerState.appendOffset,
                        Published(state: writerState.working, segments: writerState.segments)
                    )
                }
                do {
                    try file?.handle.sync()
                } catch {
                    writer.withLock { writerState in
                        if let file, writerState.active === file {
                            writerState.fail(error, truncating: file, to: writerState.syncedOffset)
                        } else {
                            writerState.recordFailure(error)
                        }
                    }
                    throw error
                }
                writer.withLock { writerState in
                    if let file, writerState.active === file {
                        writerState.syncedOffset = max(writerState.syncedOffset, offset)
                    }
                }
                published.withLock { if $0.state.version < written.state.version { $0 = written } }
                outcome = .success(target)
            } catch {
                outcome = .failure(error as? EngineError ?? EngineError(.io, "\(error)"))
            }
            group.lock.lock()
            group.syncing = false
            switch outcome {
            case .success(let target): group.synced = max(group.synced, target)
            case .failure(let error): group.failure = error
            }
            group.lock.broadcast()
        }
    }

    /// Queues a checkpoint or a compaction in the background when the options ask for one.
    /// Never waits for a running task, and never retries a failing one before its backoff
    /// has passed: the committer pays nothing for background work.
    func scheduleMaintenanceIfNeeded() {
        let (checkpointDue, compactionDue) = writer.withLock { writerState -> (Bool, Bool) in
            let ckpt =
                options.checkpointInterval > 0 && writerState.bytesSinceCheckpoint >= options.checkpointInterval
            var compact = false
            if case .automatic(let ratio, let minimum) = options.compaction, writerState.working.totalBytes >= minimum {
                compact =
                    Double(writerState.working.totalBytes - writerState.working.liveBytes)
                    > ratio * Double(writerState.working.totalBytes)
            }
            return (ckpt, compact)
        }
        guard checkpointDue || compactionDue else { return }
        let now = ContinuousClock.now
        let queue = maintenanceSchedule.withLock { schedule -> Bool in
            if schedule.queued { return false }
            if let notBefore = schedule.notBefore, now < notBefore { return false }
            schedule.queued = true
            return true
        }
        guard queue else { return }
        background.async { [self] in
            maintenanceSchedule.withLock { $0.queued = false }
            let outcome: Result<Void, any Error> = maintenance.withLock { _ in
                Result {
                    if compactionDue { _ = try runCompaction() } else { try writeCheckpoint() }
                }
            }
            recordMaintenance(outcome, task: compactionDue ? "compaction" : "checkpoint")
        }
    }

    /// Notes how a background task ended: a failure backs the next attempt off (and is
    /// logged through `StoreOptions.log`), a success resets the backoff.
    func recordMaintenance(_ outcome: Result<Void, any Error>, task: String) {
        switch outcome {
        case .success:
            maintenanceSchedule.withLock { schedule in
                // (A compaction that could fold nothing yet set a wait of its own, which stays.)
                if schedule.consecutiveFailures > 0 { schedule.notBefore = nil }
                schedule.consecutiveFailures = 0
            }
        case .failure(let error):
            let engineError = error as? EngineError ?? EngineError(.io, "\(error)")
            let wait = maintenanceSchedule.withLock { schedule -> Duration in
                schedule.consecutiveFailures += 1
                schedule.lastFailure = engineError
                let wait = MaintenanceSchedule.backoff(after: schedule.consecutiveFailures)
                schedule.notBefore = .now + wait
                return wait
            }
            options.log?(
                "logbook: background \(task) failed (\(engineError)); next attempt in \(wait.components.seconds) s")
        }
    }
}

/// The state of group commit, guarded by `lock`.
final class GroupSync: @unchecked Sendable {
    let lock = ConditionLock()
    /// Highest version known durable. Guarded by `lock`.
    var synced: UInt64 = 0
    /// A committer is syncing. Guarded by `lock`.
    var syncing = false
    /// A sync failed. Guarded by `lock`.
    var failure: EngineError?

    func setSynced(_ version: UInt64) {
        lock.withLock { synced = max(synced, version) }
    }
}

/// A segment's sync, started at once on another thread (`overlapped`) or run by `wait()`.
final class PendingSync: Sendable {
    private let file: SegmentFile
    private let done: DispatchSemaphore?
    private let result = Locked<(any Error)?>(nil)

    init(_ file: SegmentFile, overlapped: Bool) {
        self.file = file
        guard overlapped else {
            done = nil
            return
        }
        let done = DispatchSemaphore(value: 0)
        self.done = done
        DispatchQueue.global().async { [self] in
            do { try file.handle.sync() } catch { result.withLock { $0 = error } }
            done.signal()
        }
    }

    /// Waits for the sync (or runs it) and throws its error.
    func wait() throws {
        if let done { done.wait() } else { try file.handle.sync() }
        if let error = result.withLock({ $0 }) { throw error }
    }
}
