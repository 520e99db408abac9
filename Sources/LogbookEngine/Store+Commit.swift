import Dispatch
import Synchronization
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
    @discardableResult
    public func commit(_ transaction: Transaction) throws -> UInt64 {
        if isReadOnly { throw EngineError(.readOnly, "the store was opened read-only", path: directory) }
        let blocks = transaction.finishedBlocks()
        if blocks.isEmpty { return try writer.withLock { w in try w.checkWritable(); return w.working.version } }
        let durability = options.durability
        let version: UInt64 = try writer.withLock { w in
            try w.checkWritable()
            if w.appendOffset >= options.segmentSize { try rollover(&w) }
            guard let active = w.active else { throw EngineError(.readOnly, "no active segment") }
            let version = w.working.version + 1
            // Frames: blocks compressed in the background while the transaction was built are
            // ready; the rest are compressed now, on all cores (each block is independent).
            var stored = transaction.compressor?.finish() ?? [:]
            let missing = blocks.indices.filter { stored[$0] == nil }
            if !missing.isEmpty {
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
            }
            let salt = active.salt
            var out: [UInt8] = []
            out.reserveCapacity(min(stored.values.reduce(64) { $0 + ($1.1?.count ?? 0) } + blocks.count * 16, 8 << 20 + 4096))
            var frameOffsets: [Int] = []
            frameOffsets.reserveCapacity(blocks.count)
            var outStart = w.appendOffset
            do {
                for i in blocks.indices {
                    frameOffsets.append(outStart + out.count)
                    let (codec, payload) = stored[i]!
                    if let payload {
                        payload.withUnsafeBytes { Frame.append(type: .operations, codec: codec, stored: $0, salt: salt, to: &out) }
                    } else {
                        blocks[i].withUnsafeBytes { Frame.append(type: .operations, codec: .raw, stored: $0, salt: salt, to: &out) }
                    }
                    stored[i] = nil
                    if out.count >= 8 << 20 {
                        try checkSize(outStart + out.count)
                        try active.handle.write(out, at: outStart)
                        outStart += out.count
                        out.removeAll(keepingCapacity: true)
                    }
                }
            let record = CommitRecord(version: version, operationFrames: blocks.count, operations: transaction.operationCount,
                                          firstFrameOffset: frameOffsets[0], timestampMillis: Self.nowMillis())
                Frame.append(type: .commit, payload: record.encoded(), compress: false, salt: active.salt, to: &out)
                try checkSize(outStart + out.count)
            } catch {
                // Nothing after `appendOffset` counts until a commit record is there: the next
                // commit overwrites what was written.
                throw error
            }
            do {
                try active.handle.write(out, at: outStart)
            } catch {
                w.failure = error as? EngineError ?? EngineError(.io, "\(error)")
                throw error
            }
            // For a large transaction the sync runs on another thread while the indexes are
            // updated; a small one syncs on this thread (a handoff would cost more than it
            // saves). The commit is published only after both.
            let syncDone = DispatchSemaphore(value: 0)
            let syncResult = Mutex<(any Error)?>(nil)
            let overlapSync = blocks.count >= 4
            if durability == .full && overlapSync {
                DispatchQueue.global().async {
                    do { try active.handle.sync() } catch { syncResult.withLock { $0 = error } }
                    syncDone.signal()
                }
            }
            let end = outStart + out.count
            do {
                let reader = BlockReader(segments: w.segments, cache: cache)
                for (i, block) in blocks.enumerated() {
                    cache.insert(Location(segment: active.number, frameOffset: frameOffsets[i], blockOffset: 0).frameKey, block)
                }
                try w.working.apply(transaction: blocks.indices.map { (frameOffset: frameOffsets[$0], block: blocks[$0]) },
                                    manifest: transaction.manifest, segment: active.number, reader: reader)
            } catch {
                w.failure = error as? EngineError ?? EngineError(.io, "\(error)")
                throw error
            }
            if durability == .full {
                if overlapSync { syncDone.wait() } else {
                    do { try active.handle.sync() } catch { syncResult.withLock { $0 = error } }
                }
                if let error = syncResult.withLock({ $0 }) {
                    w.failure = error as? EngineError ?? EngineError(.io, "\(error)")
                    throw error
                }
            }
            w.working.version = version
            w.bytesSinceCheckpoint += end - w.appendOffset
            w.appendOffset = end
            w.lastWritten = version
            if durability != .normal {
                publish(w)
                if durability == .full { groupSync.setSynced(version) }
            }
            return version
        }
        if durability == .normal { try waitDurable(version) }
        scheduleMaintenanceIfNeeded()
        return version
    }

    private func checkSize(_ end: Int) throws {
        guard end <= JournalFormat.maxSegmentSize else {
            throw EngineError(.invalidArgument, "the transaction is too large: a segment holds at most \(JournalFormat.maxSegmentSize) bytes")
        }
    }

    static func nowMillis() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return UInt64(ts.tv_sec) * 1000 + UInt64(ts.tv_nsec) / 1_000_000
    }

    /// Group commit: the first committer to find no sync running syncs everything written so
    /// far and publishes it; the others wait for a sync that covers their version.
    func waitDurable(_ version: UInt64) throws {
        let g = groupSync
        g.lock.lock()
        defer { g.lock.unlock() }
        while g.synced < version {
            if let failure = g.failure { throw failure }
            if g.syncing { g.lock.wait(); continue }
            g.syncing = true
            g.lock.unlock()
            var outcome: Result<UInt64, EngineError>
            do {
                let (target, file, p) = try writer.withLock { w in
                    try w.checkWritable()
                    return (w.lastWritten, w.active, Published(state: w.working, segments: w.segments))
                }
                do {
                    try file?.handle.sync()
                } catch {
                    writer.withLock { $0.failure = error as? EngineError ?? EngineError(.io, "\(error)") }
                    throw error
                }
                published.withLock { if $0.state.version < p.state.version { $0 = p } }
                outcome = .success(target)
            } catch {
                outcome = .failure(error as? EngineError ?? EngineError(.io, "\(error)"))
            }
            g.lock.lock()
            g.syncing = false
            switch outcome {
            case .success(let target): g.synced = max(g.synced, target)
            case .failure(let error): g.failure = error
            }
            g.lock.broadcast()
        }
    }

    /// Queues a checkpoint or a compaction in the background when the options ask for one.
    func scheduleMaintenanceIfNeeded() {
        let (checkpointDue, compactionDue) = writer.withLock { w -> (Bool, Bool) in
            let ckpt = options.checkpointInterval > 0 && w.bytesSinceCheckpoint >= options.checkpointInterval
            var compact = false
            if case let .automatic(ratio, minimum) = options.compaction, w.working.totalBytes >= minimum {
                compact = Double(w.working.totalBytes - w.working.liveBytes) > ratio * Double(w.working.totalBytes)
            }
            return (ckpt, compact)
        }
        guard checkpointDue || compactionDue else { return }
        let alreadyQueued = maintenance.withLock { queued -> Bool in
            defer { queued = true }
            return queued
        }
        if alreadyQueued { return }
        background.async { [self] in
            maintenance.withLock { queued in
                queued = false
                if compactionDue { _ = try? runCompaction() } else { try? writeCheckpoint() }
            }
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

/// A value handed to other threads where the code guarantees there is no race (each use
/// says why).
struct UncheckedSendable<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}
