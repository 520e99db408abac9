extension Store {
    /// Rewrites the live records of all sealed segments into new compressed segments and
    /// switches to them with one atomic manifest replacement. Writers go on meanwhile (they
    /// wait only for the short switch); snapshots go on reading the old segments, which are
    /// deleted once the last snapshot that reads them is released.
    @discardableResult
    public func compact() throws -> CompactionReport {
        if isReadOnly { throw EngineError(.readOnly, "the store was opened read-only", path: directory) }
        return try maintenance.withLock { _ in try runCompaction() }
    }

    /// Caller holds `maintenance`. The four phases, each a function below: seal, rewrite,
    /// switch, checkpoint.
    func runCompaction() throws -> CompactionReport {
        let floor = options.beforeCompaction?() ?? nil
        let started = ContinuousClock.now
        guard let sealed = try sealForCompaction(floor: floor) else { return .nothing }
        var output = CompactionWriter(store: self, version: sealed.state.version)
        try rewriteLive(of: sealed, into: &output)
        var switchDuration = Duration.zero
        let (bytesAfter, removedCount) = try switchToCompacted(sealed, output: &output, held: &switchDuration)
        // 4. A fresh checkpoint, so that the next open need not replay the compacted segments.
        let checkpointStarted = ContinuousClock.now
        try writeCheckpoint()
        let finished = ContinuousClock.now
        func seconds(_ d: Duration) -> Double { Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18 }
        return CompactionReport(
            bytesBefore: sealed.bytesBefore, bytesAfter: bytesAfter, liveBytesRewritten: output.operationBytes,
            segmentsRemoved: removedCount, segmentsWritten: output.files.count,
            seconds: seconds(finished - started), checkpointSeconds: seconds(finished - checkpointStarted),
            switchSeconds: seconds(switchDuration))
    }

    /// The segments a compaction rewrites, and the state at their end.
    struct SealedSegments {
        var state: IndexState
        var files: [SegmentFile]
        let all: SegmentSet
        let numbers: Set<UInt64>
        let bytesBefore: Int
    }

    /// Phase 1: the sealed segments to compact (nil when there are none, or none may be
    /// folded yet), with room on the disk checked for their rewrite.
    private func sealForCompaction(floor: UInt64?) throws -> SealedSegments? {
        // 1. Seal the active segment so that everything committed so far is in sealed segments
        //    (not when versions must stay readable: the segments that can be folded are sealed
        //    already, and a compaction that finds none would leave an empty segment behind).
        var (sealedState, sealed, allSegments) = try writer.withLock {
            writerState -> (IndexState, [SegmentFile], SegmentSet) in
            try writerState.checkWritable()
            // Under the commit lock: the seal starts a segment (a manifest), and what other
            // writers committed is in the segments sealed.
            return try withCommitLock(&writerState) { writerState in
                // Whole leaves that could not be mended read as empty: nothing is sealed or
                // rewritten from them (the journal still has every record).
                try writerState.working.slotCheck?.check()
                if floor == nil && writerState.appendOffset > JournalFormat.fileHeaderSize {
                    // Room for the rewrite is checked before the seal: a rollover on a full disk
                    // would fail for nothing (it no longer stops commits, but it costs a segment).
                    let files = writerState.manifest.segments.compactMap { writerState.segments.files[$0] }
                    try checkRoom(
                        bytes: files.reduce(0) { $0 + ((try? $1.handle.size()) ?? 0) }, state: writerState.working)
                    try rollover(&writerState)
                }
                let activeNumber = writerState.active?.number
                let sealed = writerState.manifest.segments.filter { $0 != activeNumber }.compactMap {
                    writerState.segments.files[$0]
                }
                return (writerState.working, sealed, writerState.segments)
            }
        }
        if let floor {
            // Only the oldest segments whose commits are all at or before the floor, folded into
            // the state at their end: the versions after it can still be replayed.
            var recovery = replayer()
            let prefix = try recovery.replayPrefix(sealed.map(\.number), files: allSegments, until: floor)
            sealed = Array(sealed.prefix(prefix.count))
            sealedState = prefix.state
            // A prefix of one segment that an earlier compaction wrote has nothing to reclaim.
            if sealed.isEmpty || (sealed.count == 1 && sealedState.liveBytes >= sealedState.totalBytes) {
                // Nothing may be folded yet: wait before trying again, rather than after every
                // commit while the dead bytes stay above the policy's ratio.
                maintenanceSchedule.withLock { $0.notBefore = .now + .seconds(30) }
                return nil
            }
        }
        let bytesBefore = sealed.reduce(0) { $0 + ((try? $1.handle.size()) ?? 0) }
        guard !sealed.isEmpty else { return nil }
        try checkRoom(bytes: bytesBefore, state: sealedState)
        return SealedSegments(
            state: sealedState, files: sealed, all: allSegments, numbers: Set(sealed.map(\.number)),
            bytesBefore: bytesBefore)
    }

    /// The rewrite of segments of `bytes` needs room for their live part (less, compressed
    /// again, but never more), and some to spare: refused up front rather than fill the disk
    /// and fail half-way (the foreground commits share the disk).
    private func checkRoom(bytes: Int, state: IndexState) throws {
        let liveShare = state.totalBytes > 0 ? Double(state.liveBytes) / Double(state.totalBytes) : 1
        let needed = Int(Double(bytes) * min(1, liveShare)) + (4 << 20)
        if let available = fileSystem.availableBytes(directory), available < needed {
            throw EngineError(
                .diskFull, "compaction needs about \(needed) bytes free and \(available) are", path: directory)
        }
    }

    /// Phase 2: the live records and every set of the sealed segments written into new
    /// segments, as commits of the sealed version.
    func rewriteLive(of sealed: SealedSegments, into output: inout CompactionWriter) throws {
        // 2. Rewrite the live puts and every set into new segments, as commits of the sealed version.
        let sealedState = sealed.state
        let sealedNumbers = sealed.numbers
        let allSegments = sealed.all
        let scanner = BlockScanner(reader: BlockReader(segments: allSegments, cache: cache), caching: false)
        do {
            // Live records in storage order, so that each block is read (and decompressed) once,
            // whatever order their keys were written in.
            var live: [(packed: UInt64, key: UInt64)] = []
            live.reserveCapacity(sealedState.primary.count)
            // Which segment a location is in changes rarely from one key to the next (keys are
            // mostly in storage order): the set is asked only when it does.
            var lastSegment = UInt64.max
            var lastIsSealed = false
            sealedState.primary.forEachEntry { key, packed in
                let segment = Location(packed: packed).segment
                if segment != lastSegment {
                    lastSegment = segment
                    lastIsSealed = sealedNumbers.contains(segment)
                }
                if lastIsSealed { live.append((packed, key)) }
                return true
            }
            // Records written in key order (the usual case) are in storage order already, or
            // nearly (a record rewritten later, such as the container's counters): sorted only
            // when many are out of place. Order matters only for speed: a frame whose records
            // come in two runs is read twice and rewritten operation by operation.
            var descents = 0
            for i in live.indices.dropFirst() where live[i - 1].packed > live[i].packed { descents += 1 }
            if descents > live.count / 256 { live.sort { $0.packed < $1.packed } }
            output.reserveRemap(live.count)
            // Frame by frame: a frame whose operations are all live puts is copied as stored
            // (no decompression or compression; only its checksum is computed again with the new
            // file's salt); the others are rewritten operation by operation.
            var start = 0
            while start < live.count {
                let frameKey = Location(packed: live[start].packed).frameKey
                var end = start + 1
                while end < live.count && Location(packed: live[end].packed).frameKey == frameKey { end += 1 }
                let first = Location(packed: live[start].packed)
                try scanner.withFrame(segment: first.segment, frameOffset: first.frameOffset) {
                    codec, stored, block in
                    var operations: Int? = 0
                    var o = 0
                    while o < block.count {
                        guard let next = JournalOperation.endOfPut(block, at: o) else {
                            operations = nil
                            break
                        }
                        o = next
                        operations! += 1
                    }
                    if operations == end - start {
                        let puts = live[start..<end].map {
                            (key: $0.key, old: $0.packed, blockOffset: Location(packed: $0.packed).blockOffset)
                        }
                        try output.appendFrame(
                            codec: codec, stored: stored, blockBytes: block.count, operations: end - start, puts: puts)
                    } else {
                        for (packed, key) in live[start..<end] {
                            let location = Location(packed: packed)
                            let (_, opEnd): (JournalOperation, Int)
                            do { (_, opEnd) = try JournalOperation.decode(block, at: location.blockOffset) } catch {
                                throw EngineError.corruption(
                                    "malformed operation", path: allSegments.files[location.segment]?.path ?? "",
                                    offset: location.frameOffset)
                            }
                            try output.appendPut(
                                key: key, old: packed,
                                UnsafeRawBufferPointer(rebasing: block[location.blockOffset..<opEnd]))
                        }
                    }
                }
                start = end
            }
            try sealedState.sets.forEachEntry { key, set in
                var t = Transaction()
                t.replaceMembers(set.members, ofSet: key)
                for block in t.finishedBlocks() { try block.withUnsafeBytes { try output.appendRaw($0) } }
                return true
            }
            try output.finish()
        } catch {
            output.abandon()
            throw error
        }
    }

    /// Phase 3: the new segments switched in with one manifest; returns the bytes they hold
    /// and how many sealed segments went, and sets `held` to how long the writer's lock was
    /// held for it (the remap before it runs outside the lock and is not counted).
    private func switchToCompacted(
        _ sealed: SealedSegments, output: inout CompactionWriter, held: inout Duration
    ) throws -> (Int, Int) {
        // 3. Switch: remap the locations that still point into sealed segments, then one manifest.
        let written = output.files
        let sealedState = sealed.state
        let sealedNumbers = sealed.numbers
        // The new locations are applied outside the writer's lock, to a copy of the primary
        // index taken now (copy-on-write: the copy shares every node until the remap touches
        // it); commits made meanwhile record the keys they touch, and the switch gives those
        // keys their current locations in the copy. Under the lock, then, only the commits of
        // the remap's duration are walked, not every live key (a writer waited 230 ms at
        // 10,000,000 records for that walk). A key a commit touched is never remapped: its new
        // location is in the active segment, which this compaction does not rewrite.
        // In the order the records were written (key order when they were stored in it):
        // `replaceMany` takes any order, and walks down the trie once per run of neighbours.
        let remap = output.takeRemap()
        var remapped = writer.withLock { writerState -> RadixMap<UInt64> in
            writerState.compactionTouched = []
            return writerState.working.primary
        }
        remapped.replaceMany(remap)
        options.beforeCompactionSwitch?()
        options.pausePoint?(.compactionRewritten)
        return try writer.withLock { writerState -> (Int, Int) in
            let locked = ContinuousClock.now
            defer { held = ContinuousClock.now - locked }
            // Under the commit lock, after the commits of other writers, whose keys join those
            // the commits of this process touched.
            return try withCommitLock(&writerState) { writerState -> (Int, Int) in
                let touched = writerState.compactionTouched ?? []
                writerState.compactionTouched = nil
                do { try writerState.checkWritable() } catch {
                    output.abandon()
                    throw error
                }
                // Another process compacted the same segments meanwhile (the catch-up read its
                // manifest): this rewrite is of no use, and switching to it would put its commits
                // beside the other's. It is dropped.
                guard sealedNumbers.isSubset(of: writerState.manifest.segments) else {
                    output.abandon()
                    return (0, 0)
                }
                if options.durability != .full, let active = writerState.active {
                    do {
                        try active.handle.sync()
                        writerState.syncedOffset = writerState.appendOffset
                    } catch {
                        // As after a commit's failed sync: the pages it dropped are cut, so that no
                        // reopen in this boot reads them back and no later record vouches for them
                        // (found by the crash-state explorer: "a compaction racing commits, no sync").
                        output.abandon()
                        writerState.fail(error, truncating: active, to: writerState.syncedOffset)
                        throw error
                    }
                }
                options.pausePoint?(.compactionSwitching)
                var manifest = writerState.manifest
                let oldCheckpoint = manifest.checkpoint
                manifest.segments = written.map(\.number) + manifest.segments.filter { !sealedNumbers.contains($0) }
                manifest.checkpoint = 0
                manifest.generation += 1
                do { try writeManifestTellingReplacement(manifest) } catch let e as ManifestNotReplaced {
                    // The old manifest stands, naming the sealed segments: the rewrite is dropped
                    // and commits go on (the compaction is tried again later, backing off).
                    output.abandon()
                    writerState.manifest.generation = manifest.generation
                    throw e.underlying
                } catch {
                    writerState.recordFailure(error)
                    throw error
                }
                for key in touched {
                    if let location = writerState.working.primary[key] {
                        remapped.set(key, location)
                    } else {
                        remapped.remove(key)
                    }
                }
                writerState.working.primary = remapped
                writerState.working.totalBytes =
                    writerState.working.totalBytes - sealedState.totalBytes + output.operationBytes
                writerState.working.liveBytes = max(0, writerState.working.liveBytes)
                var files = writerState.segments.files
                for file in sealed.files {
                    files[file.number] = nil
                    file.markObsolete()
                }
                for file in written { files[file.number] = file }
                writerState.segments = SegmentSet(files)
                writerState.manifest = manifest
                writerState.checkpointVersion = 0
                publish(writerState)
                if oldCheckpoint != 0 { try? fileSystem.removeFile(path(Checkpoint.fileName(oldCheckpoint))) }
                return (written.reduce(0) { $0 + ((try? $1.handle.size()) ?? 0) }, sealed.files.count)
            }
        }
    }
}

/// Writes compacted segments: operations copied verbatim into blocks, blocks into frames,
/// a commit record every few megabytes, a new segment past the segment size.
struct CompactionWriter {
    let store: Store
    let version: UInt64
    private(set) var files: [SegmentFile] = []
    /// Each rewritten put: its key, its location before and its location now.
    private(set) var remap: [(key: UInt64, expected: UInt64, new: UInt64)] = []
    private(set) var operationBytes = 0
    private var block = ByteWriter()
    private var blockPuts: [(UInt64, UInt64, Int)] = []
    private var blockOperations = 0
    private var out: [UInt8] = []
    private var offset = 0
    private var transactionFrames: [Int] = []
    private var transactionOperations = 0

    /// The key the new segments are written with: the store's, or a new one (`Store.changeKey`).
    let cipher: StoreCipher?

    init(store: Store, version: UInt64) {
        self.init(store: store, version: version, cipher: store.cipher)
    }

    init(store: Store, version: UInt64, cipher: StoreCipher?) {
        self.store = store
        self.version = version
        self.cipher = cipher
    }

    /// How a frame appended to `out` for `file` is sealed, in an encrypted store.
    private func seal(_ file: SegmentFile) -> FrameSeal? { file.cipher.map { FrameSeal(cipher: $0, base: offset) } }

    mutating func reserveRemap(_ count: Int) { remap.reserveCapacity(count) }

    /// The remap, handed over without a copy (the writer's is left empty).
    mutating func takeRemap() -> [(key: UInt64, expected: UInt64, new: UInt64)] {
        defer { remap = [] }
        return remap
    }

    mutating func appendPut(key: UInt64, old: UInt64, _ op: UnsafeRawBufferPointer) throws {
        blockPuts.append((key, old, block.count))
        try appendRaw(op)
    }

    /// Appends whole encoded operations.
    mutating func appendRaw(_ ops: UnsafeRawBufferPointer) throws {
        block.append(ops)
        operationBytes += ops.count
        blockOperations += 1
        if block.count >= JournalFormat.blockTargetSize { try flushBlock() }
    }

    /// Appends a whole frame as it was stored elsewhere (its operations keep their offsets).
    mutating func appendFrame(
        codec: JournalFormat.Codec, stored: UnsafeRawBufferPointer, blockBytes: Int, operations: Int,
        puts: [(key: UInt64, old: UInt64, blockOffset: Int)]
    ) throws {
        try flushBlock()
        if files.isEmpty || offset + out.count >= store.options.segmentSize { try startSegment() }
        let file = files[files.count - 1]
        let frameOffset = offset + out.count
        Frame.append(type: .operations, codec: codec, stored: stored, salt: file.salt, seal: seal(file), to: &out)
        for p in puts {
            remap.append(
                (
                    p.key, p.old,
                    Location(segment: file.number, frameOffset: frameOffset, blockOffset: p.blockOffset).packed
                ))
        }
        operationBytes += blockBytes
        transactionFrames.append(frameOffset)
        transactionOperations += operations
        if out.count >= 4 << 20 { try commitTransaction() }
    }

    private mutating func flushBlock() throws {
        guard block.count > 0 else { return }
        if files.isEmpty || offset + out.count >= store.options.segmentSize { try startSegment() }
        let file = files[files.count - 1]
        let frameOffset = offset + out.count
        Frame.append(
            type: .operations, payload: block.bytes, compress: true, salt: file.salt, seal: seal(file), to: &out)
        for (key, old, blockOffset) in blockPuts {
            remap.append(
                (key, old, Location(segment: file.number, frameOffset: frameOffset, blockOffset: blockOffset).packed))
        }
        transactionFrames.append(frameOffset)
        transactionOperations += blockOperations
        blockPuts.removeAll(keepingCapacity: true)
        blockOperations = 0
        block = ByteWriter(capacity: JournalFormat.blockTargetSize + 256)
        if out.count >= 4 << 20 { try commitTransaction() }
    }

    private mutating func commitTransaction() throws {
        guard !transactionFrames.isEmpty, let file = files.last else { return }
        // `out` holds exactly this transaction's frames. The new segment is synced before any
        // manifest names it, so everything before the transaction is durable whenever the file
        // is part of the store: the record says so.
        let record = CommitRecord(
            version: version, operationFrames: transactionFrames.count, operations: transactionOperations,
            firstFrameOffset: transactionFrames[0], timestampMillis: Store.nowMillis(),
            syncedOffset: transactionFrames[0], transactionCRC: CRC32C.checksum(out))
        Frame.append(
            type: .commit, payload: record.encoded(), compress: false, salt: file.salt, seal: seal(file), to: &out)
        try file.handle.write(out, at: offset)
        offset += out.count
        out.removeAll(keepingCapacity: true)
        transactionFrames.removeAll()
        transactionOperations = 0
    }

    private mutating func startSegment() throws {
        try commitTransaction()
        if let last = files.last { try last.handle.sync() }
        // Under the commit lock, where every writer takes its file numbers.
        let number = try store.writer.withLock { writerState in
            try store.withCommitLock(&writerState) { try store.allocateFileNumber(&$0.manifest) }
        }
        files.append(try store.createSegment(number: number, cipher: cipher))
        offset = JournalFormat.fileHeaderSize
    }

    mutating func finish() throws {
        try flushBlock()
        try commitTransaction()
        try files.last?.handle.sync()
    }

    /// Marks the written files for removal (a failed compaction leaves no trace).
    func abandon() {
        for file in files { file.markObsolete() }
    }
}
