import Dispatch

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// An append-only journal of versioned records under 64-bit keys, with in-memory indexes,
/// O(1) snapshots, checkpoints, online compaction and crash recovery.
///
/// Any number of processes may write it (their commits serialized by a lock between them, each
/// reading the others' commits before its own); any number of threads read through snapshots
/// while they do.
///
/// ```swift
/// let store = try Store.open(at: "/tmp/example.logbook")
/// var transaction = Transaction()
/// let key = EngineKey(keyspace: 1, id: 1)
/// transaction.put(key, value: Array("first".utf8), indexKeys: [IndexKey(index: 1, orderedInt64: 10)])
/// try store.commit(transaction)
/// let snapshot = store.snapshot()
/// let value = try snapshot.value(forKey: key)        // the bytes of "first"
/// try store.close()
/// ```
public final class Store: Sendable {
    /// A commit record where it lies: its segment, its offset and its frame's bytes.
    struct CommitFrame: Sendable {
        var segment: UInt64
        var start: Int
        var bytes: [UInt8]
    }

    /// The store's directory.
    public let directory: String
    /// The options the store was opened with.
    public let options: StoreOptions
    /// What the open found: the commits replayed, any torn tail it cut, files it cleaned up.
    public let recoveryReport: RecoveryReport
    /// True when opened with `readOnly` or `salvage`.
    public let isReadOnly: Bool

    let fileSystem: any FileSystem
    /// The store's key with its key salt, in an encrypted store.
    let cipher: StoreCipher?
    /// The key the store was opened with (nil: not encrypted).
    package var encryptionKeyInUse: EncryptionKey? { cipher?.key }
    /// Whether the store is encrypted.
    public var isEncrypted: Bool { cipher != nil }
    let cache: FrameCache
    let lock: (any FileLock)?
    let writer: Locked<WriterState>
    let published: Locked<Published>
    let registry = SnapshotRegistry()
    let groupSync = GroupSync()
    /// Serializes checkpoints and compactions; the flag says one is queued in the background.
    let maintenance = Locked<Void>(())
    /// The background maintenance's schedule, apart from `maintenance` so that a committer
    /// asking whether to queue a task never waits for a running one.
    let maintenanceSchedule = Locked(MaintenanceSchedule())
    let background = DispatchQueue(label: "logbook.maintenance")

    /// Whether a background checkpoint or compaction is queued, and how the last ones failed.
    struct MaintenanceSchedule: Sendable {
        var queued = false
        /// Failures in a row; each doubles the wait before the next attempt (1 s … 5 min).
        var consecutiveFailures = 0
        var lastFailure: EngineError?
        var notBefore: ContinuousClock.Instant?

        /// The wait after `failures` failures in a row.
        static func backoff(after failures: Int) -> Duration {
            .seconds(min(300, 1 << min(failures - 1, 9)))
        }
    }

    struct WriterState: Sendable {
        var working: IndexState
        var segments: SegmentSet
        var active: SegmentFile?
        /// Where the next frame goes in the active segment (the end of the last commit).
        var appendOffset: Int
        /// How long the active segment's file is known to be: past `appendOffset` when space
        /// was allocated ahead of small commits (`Store.preallocate(_:through:state:)`), zeros
        /// that a sealing or a close cuts off.
        var allocatedEnd = 0
        var manifest: Manifest
        /// Set by a failed write or sync: no more writes until reopened.
        var failure: EngineError?
        var closed = false
        var bytesSinceCheckpoint = 0
        var checkpointVersion: UInt64 = 0
        var lastWritten: UInt64 = 0
        /// In an encrypted store, until this writer's first rollover: the next commit starts a
        /// new segment. A frame's nonce is its position in its file, so no position may be
        /// written twice with other bytes, and an earlier writer may have written past its
        /// last commit (a transaction whose commit never came, bytes cut after a failed sync).
        var needsFreshSegment = false

        /// Every byte of the active segment before this offset is known to be on disk (the
        /// last successful sync covered it). Commit records carry it; a failed sync cuts the
        /// segment back to it.
        var syncedOffset = JournalFormat.fileHeaderSize {
            didSet { writeSyncedHint() }
        }
        /// The writer's `SYNCED` file (`SyncedHint`), and what it last wrote there.
        var syncedFile: (any StorageFile)?
        var syncedHintWritten: SyncedHint?
        /// While a compaction prepares its switch (non-nil): every key a commit put or deleted
        /// since it copied the primary index, so that the switch takes their current
        /// locations instead of walking the whole index under the lock.
        var compactionTouched: [UInt64]?
        /// A follower's (a read-only store's): the last commit record it applied, which its
        /// next refresh finds again where it was before going on from its end.
        var lastCommit: CommitFrame?
        /// A writer's commit lock (`TAIL`), and whether this writer holds it now.
        var commitLock: (any CommitLock)?
        var holdsCommitLock = false
        /// What this writer last wrote to `TAIL` (nil: unknown).
        var tailWritten: TailHint?
        /// The end of other processes' commits in the active segment, as the last catch-up
        /// read them: a failed sync never cuts below it (those commits are theirs).
        var othersEnd = 0
        /// The newest version another process committed, as far as this writer has read.
        var remoteVersion: UInt64 = 0
        /// The versions other processes committed, read since `takeRemoteVersions()`.
        var remoteRanges: [ClosedRange<UInt64>] = []

        /// Writes where the last commit ends to `TAIL` (best effort: a hint not written makes
        /// the next writer read the journal).
        mutating func writeTail(_ active: SegmentFile) {
            guard let commitLock else { return }
            let hint = TailHint(
                segment: active.number, end: appendOffset, version: working.version,
                nextFileNumber: manifest.nextFileNumber, generation: manifest.generation, salt: active.salt)
            guard hint != tailWritten else { return }
            tailWritten = (try? commitLock.file.write(hint.encoded(), at: 0)) != nil ? hint : nil
        }

        /// Tells readers in other processes how far the last sync reached (best effort: a hint
        /// not written leaves them behind, never ahead).
        mutating func writeSyncedHint() {
            guard let syncedFile, let active, failure == nil else { return }
            let hint = SyncedHint(segment: active.number, offset: syncedOffset, salt: active.salt)
            guard hint != syncedHintWritten else { return }
            // Never behind what another writer's sync wrote there: readers would stop short
            // of commits it made durable.
            if let current = (try? syncedFile.read(count: SyncedHint.size, at: 0)).flatMap(SyncedHint.decode),
                current != syncedHintWritten
            {
                if current.segment == hint.segment && current.salt == hint.salt && current.offset > hint.offset {
                    return
                }
                if let c = manifest.segments.firstIndex(of: current.segment),
                    let h = manifest.segments.firstIndex(of: hint.segment), c > h
                {
                    return
                }
            }
            if (try? syncedFile.write(hint.encoded(), at: 0)) != nil { syncedHintWritten = hint }
        }

        /// Makes the store refuse writes until it is reopened.
        mutating func recordFailure(_ error: any Error) {
            failure = error as? EngineError ?? EngineError(.io, "\(error)")
        }

        /// Makes the store refuse writes, and cuts `file` back to `offset` (best effort: the
        /// store is poisoned either way). After a failed sync the page cache may hold pages
        /// marked clean that never reached the disk; cutting them means that a reopen in the
        /// same boot cannot read back, and build on, a commit that may not be durable.
        ///
        /// Beside other writers, only under the commit lock, and never below the commits of
        /// others that this writer read (they are theirs to vouch for): a cut without the lock
        /// could take away a commit another process just made.
        mutating func fail(_ error: any Error, truncating file: SegmentFile, to offset: Int) {
            recordFailure(error)
            var floor = file === active ? othersEnd : 0
            if let commitLock, !holdsCommitLock {
                // Outside a commit (a group sync failing later): under the lock, and above
                // what another process committed after this writer's last commit.
                guard (try? commitLock.lock()) != nil else { return }
                defer { commitLock.unlock() }
                if let hint = TailHint.read(commitLock.file),
                    hint != tailWritten, hint.segment == file.number
                {
                    floor = max(floor, hint.end)
                }
            }
            try? file.handle.truncate(to: max(offset, floor))
        }

        /// Cuts the zeros allocated after the last commit of `file`, the active segment (best
        /// effort: left there, they are read as the end).
        mutating func trimAllocation(of file: SegmentFile) {
            guard let size = try? file.handle.size(), size > appendOffset else { return }
            if (try? file.handle.truncate(to: appendOffset)) != nil { allocatedEnd = appendOffset }
        }

        func checkWritable() throws {
            if closed { throw EngineError(.closed, "the store is closed") }
            if let failure {
                throw EngineError(
                    .failed, "an earlier write failed and the store refuses writes until it is reopened: \(failure)")
            }
        }
    }

    struct Published: Sendable {
        var state: IndexState
        var segments: SegmentSet
        /// The snapshot of this state that `snapshot()` hands out, made at the first call:
        /// every caller until the next commit shares it. (A snapshot costs two locked table
        /// changes, to pin and to unpin, and a copy of the state's references: a tenth of a
        /// microsecond's work done for each relationship count or fault before.) It pins only
        /// the latest state, which nothing could reclaim anyway; the next publish lets it go.
        var shared: Snapshot?

        init(state: IndexState, segments: SegmentSet) {
            self.state = state
            self.segments = segments
        }
    }

    init(
        directory: String, options: StoreOptions, fileSystem: any FileSystem, lock: (any FileLock)?,
        report: RecoveryReport, writer: WriterState, cache: FrameCache, cipher: StoreCipher? = nil
    ) {
        self.cipher = cipher
        self.directory = directory
        self.options = options
        self.fileSystem = fileSystem
        self.lock = lock
        self.recoveryReport = report
        self.isReadOnly = options.readOnly || options.salvage
        self.cache = cache
        self.published = Locked(Published(state: writer.working, segments: writer.segments))
        self.writer = Locked(writer)
        groupSync.setSynced(writer.working.version)
    }

    deinit {
        lock?.unlock()
    }

    /// Opens (or creates) the store in `directory`.
    ///
    /// Throws `EngineError` with code `.notAStore` when the directory holds something else,
    /// `.locked` when another process has held the store exclusively (recovering it) for a minute, `.corruption` (naming file and offset)
    /// when committed data is damaged, `.unsupportedFormat` for another format version.
    public static func open(at directory: String, options: StoreOptions = StoreOptions()) throws -> Store {
        try open(
            at: directory, options: options,
            fileSystem: options.inMemory ? MemoryFileSystem() : PosixFileSystem())
    }

    static func open(
        at directory: String, options: StoreOptions, fileSystem fs: any FileSystem, cipher: StoreCipher? = nil,
        exclusive: Bool = false
    ) throws -> Store {
        try options.validate()
        // A reader takes no lock, so a writer may change the store while it opens: a
        // compaction may remove a segment the manifest it read names, or the reader may read a
        // transaction while it is being written. Both look like damage, and go away when the
        // open is tried again; damage that is really there stays, and is reported.
        var attempt = 0
        while true {
            var recovery = Recovery(directory: directory, options: options, fileSystem: fs, cipher: cipher)
            recovery.exclusive = exclusive
            do { return try recovery.run() } catch let error as EngineError
                where options.readOnly && !options.salvage && error.code == .corruption && attempt < 3
            {
                attempt += 1
                usleep(UInt32(10_000 * attempt))
            }
        }
    }

    /// The version of the last commit visible to new snapshots.
    public var version: UInt64 { published.withLock { $0.state.version } }

    /// Pins the current version in O(1). The snapshot sees exactly the commits before it,
    /// whatever the writer does next, until it is released. Calls between two commits (or
    /// compactions) return the same snapshot: it is immutable, and shared across threads.
    public func snapshot() -> Snapshot {
        // Made under the lock, so that every caller of one state gets the same snapshot (the
        // registry's lock is taken inside this one, and never the other way round).
        published.withLock { current in
            if let shared = current.shared { return shared }
            let made = Snapshot(published: current, cache: cache, registry: registry)
            current.shared = made
            return made
        }
    }

    /// A snapshot of the store as it was at `version`: exactly the commits up to it, as
    /// `snapshot()` would have given right after that commit.
    ///
    /// The journal keeps every version since the store was created or last compacted (a
    /// compaction folds the versions before it into one), so this replays the segments from
    /// the first up to `version`: it copies no data, and costs about what an open without a
    /// checkpoint costs. The snapshot pins what it reads, like any other. Throws
    /// `.versionUnavailable` for a version before the oldest the store keeps
    /// (`oldestVersion`) or after the last commit.
    ///
    /// ```swift
    /// let before = try store.snapshot(asOf: 41)
    /// print(before.count(inKeyspace: 1))   // as it was after commit 41
    /// ```
    public func snapshot(asOf version: UInt64) throws -> Snapshot {
        // The manifest's segments and the files the writer holds, with the current state pinned
        // (so that no compaction removes them while they are replayed).
        // The published state, not the writer's: with durability `normal`, a commit is written
        // before its sync and published after it, and a version not yet published may still
        // be cut (its sync failing); no snapshot may read it.
        let (current, segments, files) = try writer.withLock { w in
            if w.closed { throw EngineError(.closed, "the store is closed", path: directory) }
            return (snapshot(), w.manifest.segments, w.segments)
        }
        if version == current.version { return current }
        guard version < current.version else {
            throw EngineError(
                .versionUnavailable, "version \(version) is after the last commit (\(current.version))", path: directory
            )
        }
        var recovery = replayer()
        let state = try recovery.replay(segments, files: files, until: version)
        if let first = recovery.firstVersion, first > 1, version < first {
            throw EngineError(
                .versionUnavailable,
                "version \(version) was compacted away: the store keeps versions from \(first) on", path: directory)
        }
        return Snapshot(published: Published(state: state, segments: files), cache: cache, registry: registry)
    }

    /// The oldest version `snapshot(asOf:)` can give: 0 for a store never compacted, else the
    /// version its last compaction folded the earlier ones into.
    public func oldestVersion() throws -> UInt64 {
        let (segments, files) = writer.withLock { ($0.manifest.segments, $0.segments) }
        var recovery = replayer()
        // Replays nothing: stops at the first commit, whose version it notes.
        _ = try recovery.replay(Array(segments.prefix(1)), files: files, until: 0)
        guard let first = recovery.firstVersion, first > 1 else { return 0 }
        return first
    }

    /// For a store opened read-only while another process writes it: reads the commits
    /// made since the open (or the last refresh) and publishes them, so that snapshots taken
    /// after it see them. Returns whether the version moved.
    ///
    /// The cost is what was committed since: the manifest is read again, and the journal
    /// from where the last refresh stopped. After a compaction (the manifest replaced
    /// segments) the store is opened again, from the checkpoint. A transaction the writer is
    /// still appending is left for the next refresh. The writer never waits for a reader.
    ///
    /// ```swift
    /// let follower = try Store.open(at: path, options: readOnlyOptions)
    /// if try follower.refresh() { print("now at version", follower.version) }
    /// ```
    @discardableResult
    public func refresh() throws -> Bool {
        guard isReadOnly else {
            // A writer: what other writers committed, read under the commit lock.
            return try writer.withLock { w in
                try w.checkWritable()
                let before = w.working.version
                try withCommitLock(&w) { _ in }
                return w.working.version != before
            }
        }
        // Serialized with other refreshes (the writer lock of a read-only store guards nothing
        // else).
        return try writer.withLock { w in
            if w.closed { throw EngineError(.closed, "the store is closed", path: directory) }
            let manifest = try readManifest()
            let before = w.working.version
            var recovery = Recovery(directory: directory, options: options, fileSystem: fileSystem, cipher: cipher)
            var state = w.working
            // The writer may have cut what this follower read (a failed sync cuts the commits
            // it covered) and written other commits at those offsets: going on from the old
            // end would read from the middle of them, never find them, and meet "corruption"
            // later. The last commit record applied must be where it was, as it was; else the
            // store is opened again.
            let intact =
                w.lastCommit.map { last in
                    guard let file = w.segments.files[last.segment],
                        let bytes = try? file.handle.read(count: last.bytes.count, at: last.start)
                    else { return false }
                    return bytes == last.bytes
                } ?? true
            if intact,
                let (files, end, covered) = try recovery.follow(
                    manifest, known: w.manifest.segments, files: w.segments, offset: w.appendOffset, state: &state)
            {
                w.working = state
                w.segments = files
                w.appendOffset = end
                w.manifest = manifest
                // The segments read: those after the one the writer's last sync reached wait.
                w.manifest.segments = covered
                if let frame = recovery.lastCommitFrame { w.lastCommit = frame }
            } else {
                // A compaction (or a writer that started over, or cut what was read): open the
                // store again. The frames cached are forgotten: the same segment and offset may
                // now hold another frame.
                cache.removeAll()
                let fresh = try Store.open(at: directory, options: options, fileSystem: fileSystem, cipher: cipher)
                let next = fresh.writer.withLock { $0 }
                w.working = next.working
                w.segments = next.segments
                w.appendOffset = next.appendOffset
                w.manifest = next.manifest
                w.lastCommit = next.lastCommit
            }
            w.lastWritten = w.working.version
            publish(w)
            return w.working.version != before
        }
    }

    /// A recovery that only reads, over this store's files: what replays the journal for a
    /// read as of a past version, the oldest version, and a compaction that keeps versions.
    func replayer() -> Recovery {
        var replayOptions = options
        replayOptions.readOnly = true
        return Recovery(directory: directory, options: replayOptions, fileSystem: fileSystem, cipher: cipher)
    }

    func publish(_ writerState: WriterState) {
        let next = Published(state: writerState.working, segments: writerState.segments)
        published.withLock { $0 = next }
    }

    /// Closes the store: waits for background work, writes a checkpoint if anything was
    /// committed since the last one, and releases the lock. Snapshots stay readable.
    ///
    /// A checkpoint or compaction running on another thread finishes first (nothing is renamed
    /// or removed after the lock is gone). The first error (the checkpoint's, or the final
    /// sync's) is thrown; the store is closed and its lock released all the same. Closing a
    /// closed store does nothing.
    public func close() throws {
        background.sync {}
        try maintenance.withLock { _ in
            defer { lock?.unlock() }
            // The checks of a checkpoint's indexes and whole leaves that the open left to
            // finish later hold the open's segments (`DeferredIndexes`, `SlotCheck`): done,
            // they let go of them, so that the files a compaction replaced are removed now and
            // not left to the next open. (An error they find is every use's error, not the
            // close's.)
            _ = try? writer.withLock { $0.working }.checkLoaded()
            var firstError: (any Error)?
            if !isReadOnly && options.checkpointOnClose {
                let needed = writer.withLock { writerState in
                    writerState.failure == nil && !writerState.closed
                        && writerState.working.version != writerState.checkpointVersion
                        && writerState.working.version > 0
                }
                if needed {
                    do { try writeCheckpoint() } catch { firstError = error }
                }
            }
            writer.withLock { writerState in
                guard !writerState.closed else { return }
                writerState.closed = true
                // Commits that were not synced yet (durability `normal` or `none`) are now.
                if writerState.failure == nil, writerState.syncedOffset < writerState.appendOffset,
                    let active = writerState.active
                {
                    do {
                        try active.handle.sync()
                        writerState.syncedOffset = writerState.appendOffset
                    } catch {
                        writerState.fail(error, truncating: active, to: writerState.syncedOffset)
                        if firstError == nil { firstError = error }
                    }
                }
                // Space allocated ahead of commits is given back: a closed store's files end
                // where their journal does. Not synced: should the length fall back after a
                // power loss, the zeros are read as the end all the same.
                if writerState.failure == nil, let active = writerState.active {
                    trimIfLast(&writerState, active)
                }
                // A store that failed earlier closes, and says so: what it acknowledged
                // without a sync since its last successful one may not be on disk (a failed
                // sync cut it back), and a close that returned would vouch for it.
                if firstError == nil, let failure = writerState.failure {
                    firstError = EngineError(
                        .failed,
                        "the store failed earlier; commits acknowledged since its last successful sync may be lost: \(failure)"
                    )
                }
            }
            if let firstError { throw firstError }
        }
    }

    /// Sizes, counts and the state of snapshots.
    public func statistics() -> StoreStatistics {
        let (manifest, checkpointVersion) = writer.withLock { writerState in
            (writerState.manifest, writerState.checkpointVersion)
        }
        // The store's own shared snapshot counts only while someone else holds it too (asked
        // before the copy below holds it as well).
        let ownPin = published.withLock { p -> Int? in
            guard p.shared != nil, isKnownUniquelyReferenced(&p.shared!) else { return nil }
            return p.shared!.pin
        }
        let current = published.withLock { $0 }
        var segments: [StoreStatistics.Segment] = []
        let (activeNumber, activeEnd) = writer.withLock { ($0.active?.number, $0.appendOffset) }
        for number in manifest.segments {
            // The active segment counts to its last commit, not the space allocated after it.
            let bytes =
                number == activeNumber ? activeEnd : (try? current.segments.files[number]?.handle.size()) ?? nil
            segments.append(.init(number: number, bytes: bytes ?? 0))
        }
        var perKeyspace: [UInt16: Int] = [:]
        for ks in current.state.primary.keyspaces { perKeyspace[ks] = current.state.primary.count(inKeyspace: ks) }
        let (pinned, oldest) = registry.summary(excluding: ownPin)
        // Indexes that could not be had (`DeferredIndexes`) count as none here; every read or
        // change of them throws why. Indexes still in the checkpoint are counted there, not
        // built to be counted: they take the memory of their encoded section once a read has
        // read it, and none before.
        var indexEntries: [IndexID: Int] = [:]
        var indexBytes = 0
        if (try? current.state.secondary.check()) != nil {
            if let unbuilt = current.state.secondary.unbuiltSummary() {
                for (id, count) in unbuilt.entries { indexEntries[IndexID(rawValue: id)] = count }
                indexBytes = unbuilt.bytes
            } else {
                for (id, index) in current.state.indexes {
                    indexEntries[IndexID(rawValue: id)] = index.count
                    indexBytes += index.estimatedBytes()
                }
            }
        }
        let memory =
            current.state.primary.estimatedBytes() + indexBytes + current.state.sets.estimatedBytes(valueSize: 8)
        let schedule = maintenanceSchedule.withLock { $0 }
        var statistics = StoreStatistics(
            version: current.state.version,
            segments: segments,
            fileBytes: segments.reduce(0) { $0 + $1.bytes },
            liveBytes: current.state.liveBytes,
            totalBytes: current.state.totalBytes,
            keyCount: current.state.primary.count,
            keysPerKeyspace: perKeyspace,
            indexEntries: indexEntries,
            setCount: current.state.sets.count,
            indexMemoryBytes: memory,
            pinnedSnapshots: pinned,
            oldestSnapshotAge: oldest,
            checkpoint: manifest.checkpoint == 0 ? nil : manifest.checkpoint,
            checkpointVersion: manifest.checkpoint == 0 ? nil : checkpointVersion)
        statistics.blockCacheBytes = cache.bytes
        statistics.maintenanceFailures = schedule.consecutiveFailures
        statistics.lastMaintenanceFailure = schedule.lastFailure
        return statistics
    }

    // MARK: Files

    func path(_ name: String) -> String { joinPath(directory, name) }

    /// The manifest as it is on disk now (another writer may have written it since this store read
    /// it), with its cipher.
    func readManifest() throws -> Manifest {
        let manifestPath = path(JournalFormat.manifestFileName)
        let handle = try fileSystem.openFile(manifestPath, writable: false, create: false, exclusive: false)
        defer { handle.close() }
        var manifest = try Manifest.decode(try handle.read(count: try handle.size(), at: 0), path: manifestPath)
        manifest.cipher = try Manifest.cipher(for: manifest, key: cipher?.key, path: manifestPath)
        return manifest
    }

    /// A file number for `manifest` (see `Manifest.allocateFileNumber`): a number is free when
    /// no segment or checkpoint file (or temporary file) of that number exists. A reused number
    /// leaves no blocks of the old file in the cache.
    func allocateFileNumber(_ manifest: inout Manifest) throws -> UInt64 {
        let reusing = manifest.nextFileNumber > JournalFormat.maxSegmentNumber
        func isFree(_ number: UInt64) -> Bool {
            let names = [SegmentFile.fileName(number), Checkpoint.fileName(number)]
            return !names.contains { name in
                fileSystem.fileExists(path(name)) || fileSystem.fileExists(path(name + JournalFormat.temporarySuffix))
            }
        }
        var number = try manifest.allocateFileNumber(isFree: isFree)
        // A number whose file exists (another writer's, not named by a manifest yet) is skipped.
        while !reusing && !isFree(number) && manifest.nextFileNumber <= JournalFormat.maxSegmentNumber {
            number = try manifest.allocateFileNumber(isFree: isFree)
        }
        if reusing { cache.removeAll(segment: number) }
        return number
    }

    /// A manifest write that failed before its rename: the manifest on disk is the old one,
    /// and nothing the new one would have named is part of the store.
    struct ManifestNotReplaced: Error {
        let underlying: any Error
    }

    /// Writes a new manifest atomically: temporary file, sync, rename, sync the directory.
    func writeManifest(_ manifest: Manifest) throws {
        do { try writeManifestTellingReplacement(manifest) } catch let e as ManifestNotReplaced { throw e.underlying }
    }

    /// `writeManifest`, whose failure before the rename is a `ManifestNotReplaced` (the old
    /// manifest stands: work that only the new one would have named can be dropped, and the
    /// store goes on); a failure after it (the directory's sync) is thrown as it is.
    func writeManifestTellingReplacement(_ manifest: Manifest) throws {
        let tmp = path(JournalFormat.manifestFileName + JournalFormat.temporarySuffix)
        try? fileSystem.removeFile(tmp)
        do {
            let handle = try fileSystem.openFile(tmp, writable: true, create: true, exclusive: true)
            defer { handle.close() }
            try handle.write(manifest.encoded(), at: 0)
            try handle.sync()
            try fileSystem.rename(tmp, to: path(JournalFormat.manifestFileName))
        } catch {
            // Nothing changed on disk: the old manifest stands; the temporary file goes.
            try? fileSystem.removeFile(tmp)
            throw ManifestNotReplaced(underlying: error)
        }
        try fileSystem.syncDirectory(directory)
    }

    /// Creates a segment file with a synced header. Its directory entry becomes durable with
    /// the next manifest write, which is what makes it part of the store.
    func createSegment(number: UInt64) throws -> SegmentFile { try createSegment(number: number, cipher: cipher) }

    /// `createSegment(number:)` for a store of `cipher` (a change of key writes with the new one).
    func createSegment(number: UInt64, cipher: StoreCipher?) throws -> SegmentFile {
        let p = path(SegmentFile.fileName(number))
        let handle = try fileSystem.openFile(p, writable: true, create: true, exclusive: true)
        let header = FileHeader.fresh(magic: JournalFormat.segmentMagic, number: number, encrypted: cipher != nil)
        do {
            try handle.write(header.encoded(), at: 0)
            try handle.sync()
        } catch {
            // No manifest names it yet: it goes (a retry creates it again).
            handle.close()
            try? fileSystem.removeFile(p)
            throw error
        }
        return SegmentFile(
            number: number, salt: header.salt, path: p, handle: handle, fileSystem: fileSystem,
            cipher: cipher?.fileCipher(magic: JournalFormat.segmentMagic, header: header))
    }

    /// Seals the active segment (synced) and starts a new one, listed in a new manifest.
    func rollover(_ writerState: inout WriterState) throws {
        if let sealed = writerState.active {
            // A sealed segment ends with its last commit (zeros allocated after it would be
            // read as damage once it is no longer the last).
            if let size = try? sealed.handle.size(), size > writerState.appendOffset {
                do { try sealed.handle.truncate(to: writerState.appendOffset) } catch {
                    writerState.recordFailure(error)
                    throw error
                }
            }
            do { try sealed.handle.sync() } catch {
                writerState.fail(error, truncating: sealed, to: writerState.syncedOffset)
                throw error
            }
        }
        // The sealed segment is whole and synced: a failure to start the next one before the
        // manifest names it changes nothing the store has, and the sealed segment stays the
        // active one (commits go on; the next rollover tries again). Only a failure after the
        // manifest's rename leaves the store's state in doubt.
        var manifest = writerState.manifest
        var created: SegmentFile?
        /// Nothing changed: the segment made (if any) goes, the sealed one stays active.
        func giveUp(_ error: any Error) -> any Error {
            created?.markObsolete()
            writerState.manifest.generation = max(writerState.manifest.generation, manifest.generation)
            writerState.allocatedEnd = writerState.appendOffset
            return error
        }
        let file: SegmentFile
        do {
            let number = try allocateFileNumber(&manifest)
            file = try createSegment(number: number)
            created = file
            manifest.segments.append(number)
            manifest.generation += 1
        } catch {
            throw giveUp(error)
        }
        do { try writeManifestTellingReplacement(manifest) } catch let e as ManifestNotReplaced {
            throw giveUp(e.underlying)
        } catch {
            // Renamed, and the directory's sync failed: which manifest is on disk is in doubt.
            writerState.recordFailure(error)
            throw error
        }
        writerState.manifest = manifest
        writerState.needsFreshSegment = false
        writerState.segments = writerState.segments.adding(file)
        writerState.active?.pin(false)
        file.pin(true)
        writerState.active = file
        writerState.appendOffset = JournalFormat.fileHeaderSize
        writerState.allocatedEnd = JournalFormat.fileHeaderSize
        writerState.syncedOffset = JournalFormat.fileHeaderSize  // the header was synced
    }
}

/// Tracks pinned snapshots: how many, and since when.
final class SnapshotRegistry: Sendable {
    private struct State {
        var next = 0
        var pinned: [Int: (version: UInt64, since: ContinuousClock.Instant)] = [:]
    }
    private let state = Locked(State())

    func pin(version: UInt64) -> Int {
        state.withLock { s in
            s.next += 1
            s.pinned[s.next] = (version, .now)
            return s.next
        }
    }

    func unpin(_ id: Int) {
        _ = state.withLock { $0.pinned.removeValue(forKey: id) }
    }

    func summary(excluding excluded: Int? = nil) -> (Int, Double?) {
        state.withLock { s in
            let counted = s.pinned.filter { $0.key != excluded }
            let oldest = counted.values.map(\.since).min()
            return (
                counted.count,
                oldest.map { instant in
                    let d = ContinuousClock.now - instant
                    return Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
                }
            )
        }
    }
}
