/// Opening a store: the lock, the manifest, clean-up of interrupted work, the checkpoint,
/// and the replay of the journal after it, cutting a torn tail and refusing damage before
/// the last commit.
struct Recovery {
    let directory: String
    let options: StoreOptions
    let fs: any FileSystem
    var report = RecoveryReport()
    let readOnly: Bool
    let cache: FrameCache
    /// A replay as of a past version (`Store.snapshot(asOf:)`): commits after it are not
    /// applied, and the replay ends at the first of them.
    var lastVersion: UInt64?
    /// Following a writer (`Store.refresh()`): the end of the last segment may hold a
    /// transaction the writer is still appending, which is left for the next refresh rather
    /// than judged as damage.
    var following = false
    /// Whether the replay met a commit after `lastVersion`.
    var stopped = false
    /// The version of the first commit replayed (the oldest a replay from the first segment
    /// can reach: a compacted store's first commits all carry the version it was compacted at).
    var firstVersion: UInt64?
    /// The offset before which the last commit record replayed says its segment was synced
    /// (the end of that commit for a version-1 record, which says nothing).
    var lastSyncedClaim: (segment: UInt64, offset: Int)?
    /// The last commit record replayed: its segment, where it begins and its bytes (a follower
    /// checks them at its next refresh: a writer that cut its tail may have written others
    /// there since).
    var lastCommitFrame: Store.CommitFrame?
    /// The key, when the store it opens already has it (a replay of an open store's journal):
    /// the key provider of `options` is then not asked again.
    var key: EncryptionKey?
    /// The store's cipher, once the manifest is read: nil in an unencrypted store.
    var cipher: StoreCipher?
    /// A writer's open: whether no other writing process has the store open. Only then does
    /// it remove leftovers of interrupted work and cut a torn tail (another writer may be
    /// creating those files, or appending that tail, right now).
    var alone = true
    /// A writer catching up with other writers' commits (`Store.catchUp`): every whole commit
    /// is read, whatever `SYNCED` says.
    var ignoresSyncedLimit = false
    /// When set: the keys of every transaction replayed are added (a compaction in progress
    /// takes their current locations at its switch).
    var touchedKeys: [UInt64]?
    /// A writer that must be the only one for as long as it is open (a change of key): it
    /// keeps the lock exclusive, and is refused (`locked`) when another writer is there.
    var exclusive = false

    /// A recovery of the store in `directory`; with `cipher`, that of an open encrypted store
    /// (its key is not asked for again).
    init(directory: String, options: StoreOptions, fileSystem: any FileSystem, cipher: StoreCipher? = nil) {
        self.directory = directory
        self.options = options
        self.key = cipher?.key
        self.cipher = cipher
        self.fs = fileSystem
        self.readOnly = options.readOnly || options.salvage
        self.cache = FrameCache(capacityBytes: options.cacheSize)
    }

    func path(_ name: String) -> String { joinPath(directory, name) }

    mutating func run() throws -> Store {
        if !fs.isDirectory(directory) {
            if fs.fileExists(directory) {
                throw EngineError(.notAStore, "the path is a file, not a store directory", path: directory)
            }
            guard options.createIfMissing && !readOnly else {
                throw EngineError(.notAStore, "there is no store here", path: directory)
            }
            try fs.createDirectory(directory)
            try fs.syncDirectory(parentDirectory(directory))
        }
        let lockPath = path(JournalFormat.lockFileName)
        let lock: (any FileLock)?
        let lockExisted = fs.fileExists(lockPath)
        // Readers take no lock: they never keep a writer out, and a writer never waits for
        // them (a reader reads only whole commits, and keeps the files it opened readable
        // after a compaction removes them).
        // Writers: the first to open takes the lock exclusively for its recovery (it may
        // cut a torn tail and remove what interrupted work left), then shares it; one that
        // finds others there shares it at once (waiting while one of them recovers) and
        // recovers under the commit lock, touching nothing another writer may be writing.
        var commitLock: (any CommitLock)?
        if readOnly {
            lock = nil
        } else if let held = try fs.lockFileIfAlone(lockPath) {
            lock = held
            alone = true
        } else if exclusive {
            throw EngineError(
                .locked, "the store is open for writing in another process or Store instance; close it first",
                path: lockPath)
        } else {
            lock = try fs.lockFileShared(lockPath, timeout: 60)
            alone = false
        }
        do {
            if !readOnly && !alone {
                let commit = try fs.openCommitLock(path(JournalFormat.tailFileName))
                try commit.lock()
                commitLock = commit
            }
            defer { commitLock?.unlock() }
            let store = try openLocked(lock: lock, commitLock: commitLock)
            if alone && !exclusive { lock?.downgrade() }
            return store
        } catch {
            // A directory that turned out not to be a store keeps nothing of this attempt.
            if !lockExisted && !fs.fileExists(path(JournalFormat.manifestFileName)) {
                try? fs.removeFile(lockPath)
            }
            lock?.unlock()
            throw error
        }
    }

    /// A writer's state read again from the manifest and the journal, under the commit lock
    /// it holds (another process's compaction replaced the segments it knew).
    mutating func reopenBesideOthers(commitLock: any CommitLock) throws -> Store {
        alone = false
        return try openLocked(lock: nil, commitLock: commitLock)
    }

    private mutating func openLocked(lock: (any FileLock)?, commitLock held: (any CommitLock)? = nil) throws -> Store {
        let manifestPath = path(JournalFormat.manifestFileName)
        var names = try fs.listDirectory(directory)
        if !names.contains(JournalFormat.manifestFileName) {
            try createFromNothing(names)
            names = try fs.listDirectory(directory)
        }
        let manifestHandle = try fs.openFile(manifestPath, writable: false, create: false, exclusive: false)
        let manifestBytes = try manifestHandle.read(count: try manifestHandle.size(), at: 0)
        manifestHandle.close()
        var manifest = try Manifest.decode(manifestBytes, path: manifestPath)
        if key == nil, let provider = options.encryptionKey { key = try provider.encryptionKey() }
        cipher = try Manifest.cipher(for: manifest, key: key, path: manifestPath)
        manifest.cipher = cipher
        guard !manifest.segments.isEmpty else {
            throw EngineError.corruption("the manifest lists no segment", path: manifestPath, offset: 0)
        }
        if !readOnly && alone { try cleanUp(names: names, manifest: manifest) }
        // Beside other writers, a tail that does not read whole is left alone (it is cut, or
        // written over, under the commit lock).
        if !readOnly && !alone { following = true }

        // Open every segment and check its header.
        var files: [UInt64: SegmentFile] = [:]
        for (i, number) in manifest.segments.enumerated() {
            files[number] = try openSegment(number, isLast: i == manifest.segments.count - 1)
        }
        var segments = SegmentSet(files)

        // Start from the checkpoint when it is sound.
        var state = IndexState()
        var startIndex = 0
        var startOffset = JournalFormat.fileHeaderSize
        var checkpointVersion: UInt64 = 0
        if let loaded = loadCheckpoint(manifest, files: files, segments: segments) {
            state = loaded.state
            startIndex = loaded.index
            startOffset = loaded.offset
            checkpointVersion = loaded.state.version
        }

        // Replay the journal after it: a reader, up to where a live writer's last sync reached.
        var appendOffset = JournalFormat.fileHeaderSize
        var covered = manifest
        let limit =
            options.readOnly && !options.salvage
            ? durableLimit(manifest.segments, files: files).flatMap { $0.index >= startIndex ? $0 : nil } : nil
        replay: for i in startIndex..<manifest.segments.count {
            if let limit, i > limit.index {
                covered.segments = Array(manifest.segments.prefix(i))
                break
            }
            let number = manifest.segments[i]
            let file = files[number]!
            let isLast = i == manifest.segments.count - 1
            let from = i == startIndex ? startOffset : JournalFormat.fileHeaderSize
            let reader = BlockReader(segments: segments, cache: cache)
            do {
                appendOffset = try replaySegment(
                    file, from: from, isLast: isLast, state: &state, reader: reader,
                    durableEnd: limit?.index == i ? max(from, limit!.offset) : nil)
            } catch let error as EngineError where error.code == .corruption && options.salvage {
                report.salvageStop = error
                break replay
            }
        }
        report.version = state.version
        if !readOnly {
            // A file that became part of the store (a torn header rewritten) must be durable.
            segments = SegmentSet(files)
        }
        let active = files[manifest.segments.last!]
        // The writer's segment keeps its descriptor apart from the cache of sealed ones.
        if !readOnly { active?.pin(true) }
        var writer = Store.WriterState(
            working: state, segments: segments, active: readOnly ? nil : active,
            appendOffset: appendOffset, manifest: readOnly ? covered : manifest)
        if !readOnly {
            writer.syncedFile = try? fs.openFile(
                path(JournalFormat.syncedFileName), writable: true, create: true, exclusive: false)
            writer.commitLock = try held ?? fs.openCommitLock(path(JournalFormat.tailFileName))
        }
        writer.checkpointVersion = report.checkpoint != nil ? checkpointVersion : 0
        writer.lastWritten = state.version
        writer.lastCommit = lastCommitFrame
        if !readOnly, let active {
            // What was replayed may sit in the page cache only (a process that crashed before
            // its sync): make it durable before anything is written after it, so that the
            // synced offset the next commit record carries is true. Nothing to do when nothing
            // follows the checkpoint in its segment, the last: a checkpoint covers only what
            // was synced before it was written, and a torn tail cut after it was synced with
            // the cut. (A clean close leaves a store so: the sync cost 0.2 ms, and a flush of
            // the disk's cache at times much more, of every open.)
            let onlyTheCheckpoint =
                report.checkpoint != nil && startIndex == manifest.segments.count - 1 && appendOffset == startOffset
            if !onlyTheCheckpoint {
                do { try active.handle.sync() } catch {
                    // What this sync covered may never reach the disk, and a retry (the next
                    // open) would be told it did: its pages are clean now. They are cut back to
                    // what the last commit record proves was synced (or the checkpoint covers),
                    // so that no reopen in this boot replays them and builds on them.
                    let from = startIndex == manifest.segments.count - 1 ? startOffset : JournalFormat.fileHeaderSize
                    let claim = lastSyncedClaim.flatMap { $0.segment == active.number ? $0.offset : nil } ?? from
                    let proven = min(appendOffset, max(from, claim))
                    if proven < appendOffset {
                        try? active.handle.truncate(to: proven)
                        try? active.handle.sync()
                    }
                    throw error
                }
                // The directory's entries too: a process that crashed between creating a file
                // (a segment, the manifest's rename) and syncing the directory left an entry a
                // power loss can still take away; commits written into that file now would go
                // with it (found by the crash-state explorer: crash at the directory sync of a
                // rollover, reopen in the same boot, commit, power loss).
                try fs.syncDirectory(directory)
            }
            writer.syncedOffset = appendOffset
            // Zeros after the last commit (space allocated ahead of commits) are overwritten.
            writer.allocatedEnd = max(appendOffset, (try? active.handle.size()) ?? appendOffset)
        }
        if readOnly { writer.failure = nil }
        // A writer of an encrypted store writes no byte of a segment at a position an earlier
        // open may have written (a frame's position is its nonce): its first commit starts a
        // new segment.
        writer.needsFreshSegment = !readOnly && cipher != nil
        // The end of the last commit, for the next writer (`TailHint`).
        if !readOnly, let active { writer.writeTail(active) }
        return Store(
            directory: directory, options: options, fileSystem: fs, lock: lock, report: report,
            writer: writer, cache: cache, cipher: cipher)
    }

    /// No manifest: an empty directory, or a first open that was interrupted before its
    /// manifest was in place (it leaves at most segment 1 with nothing after its header, and
    /// temporary files), becomes a new store; anything else is not ours to touch.
    private mutating func createFromNothing(_ names: [String]) throws {
        let firstSegment = SegmentFile.fileName(1)
        var leftovers: [String] = []
        for name in names
        where name != JournalFormat.lockFileName && name != JournalFormat.syncedFileName
            && name != JournalFormat.tailFileName && name != JournalFormat.syncLockFileName
        {
            if name.hasSuffix(JournalFormat.temporarySuffix) {
                leftovers.append(name)
                continue
            }
            if name == firstSegment,
                let h = try? fs.openFile(path(name), writable: false, create: false, exclusive: false),
                (try? h.size()) ?? Int.max <= JournalFormat.fileHeaderSize
            {
                leftovers.append(name)
                continue
            }
            if Self.number(name, JournalFormat.segmentPrefix, JournalFormat.segmentSuffix) != nil
                || Self.number(name, JournalFormat.checkpointPrefix, JournalFormat.checkpointSuffix) != nil
            {
                throw EngineError(
                    .corruption, "the directory holds Logbook journal files but no MANIFEST", path: directory)
            }
            throw EngineError(
                .notAStore, "the directory holds files but no MANIFEST; it is not a Logbook store", path: directory)
        }
        if readOnly { throw EngineError(.notAStore, "the directory holds no store", path: directory) }
        for name in leftovers { try fs.removeFile(path(name)) }
        if !leftovers.isEmpty { report.removedFiles = leftovers }
        try initialize()
    }

    /// The manifest's checkpoint, loaded, with the segment (by position in the manifest) and
    /// offset replay continues from; nil when there is none, it is ignored, or it is not sound
    /// (the reason goes into the report, and the whole journal is replayed).
    private mutating func loadCheckpoint(
        _ manifest: Manifest, files: [UInt64: SegmentFile], segments: SegmentSet
    ) -> (state: IndexState, index: Int, offset: Int)? {
        guard manifest.checkpoint != 0 && !options.ignoresCheckpoint else { return nil }
        let ckptPath = path(Checkpoint.fileName(manifest.checkpoint))
        do {
            let replay = journalState(manifest.segments, files: segments, checkpoint: ckptPath)
            let loaded = try Checkpoint.read(
                path: ckptPath, number: manifest.checkpoint, fileSystem: SealedFileSystem.wrapping(fs, cipher),
                fallback: { version, malformed throws(EngineError) in
                    try replay(version, "the checkpoint's secondary indexes are malformed (\(malformed))").indexes
                }, primaryFallback: { version throws(EngineError) in try replay(version, nil).primary },
                log: options.log)
            guard let index = manifest.segments.firstIndex(of: loaded.segment),
                let size = try? files[loaded.segment]!.handle.size(), loaded.offset <= size
            else {
                throw EngineError.corruption("the checkpoint points past the journal", path: ckptPath, offset: 0)
            }
            report.checkpoint = manifest.checkpoint
            return (loaded.state, index, loaded.offset)
        } catch {
            report.checkpointProblem = "\(error)"
            return nil
        }
    }

    /// What gives a checkpoint's state from elsewhere when a check that an open left to
    /// another thread fails (the secondary-index section's, `DeferredIndexes`; the whole
    /// leaves', `Checkpoint.SlotCheck`): the journal replayed from its first segment up to the
    /// checkpoint's version (the first argument), as an open replays it when a checkpoint
    /// fails. The second argument, when given, begins the error's message. `files` keeps the
    /// segments readable until then, whatever a compaction removes meanwhile.
    private func journalState(_ segments: [UInt64], files: SegmentSet, checkpoint: String)
        -> @Sendable (UInt64, String?) throws(EngineError) -> IndexState
    {
        var readOnly = options
        readOnly.readOnly = true
        let (directory, fs, replayOptions, cipher) = (directory, fs, readOnly, cipher)
        return { version, why throws(EngineError) in
            let prefix = why.map { "\($0), and the journal does not give them either: " } ?? ""
            var recovery = Recovery(directory: directory, options: replayOptions, fileSystem: fs, cipher: cipher)
            let state: IndexState
            do { state = try recovery.replay(segments, files: files, until: version) } catch {
                let reason = (error as? EngineError)?.message ?? "\(error)"
                throw EngineError.corruption(prefix + reason, path: checkpoint, offset: JournalFormat.fileHeaderSize)
            }
            guard state.version == version else {
                throw EngineError.corruption(
                    prefix + "the journal ends at version \(state.version), before the checkpoint's \(version)",
                    path: checkpoint, offset: JournalFormat.fileHeaderSize)
            }
            return state
        }
    }

    /// The state as of `version`: every commit up to it replayed from the first segment of
    /// `segments` (in the manifest's order), nothing after it. Reads only; a tail the writer
    /// is still appending to ends the replay like a torn one, without being cut.
    mutating func replay(
        _ segments: [UInt64], files: SegmentSet, until version: UInt64
    ) throws -> IndexState {
        try replayFromFirst(segments, files: files, until: version, lastIsTail: true).state
    }

    /// Brings a follower's state up to the writer's `manifest`, when it only added to the
    /// segments the follower knows (`known`, the last of which it read up to `offset`):
    /// the rest of that segment, then each new one. Returns the segments' files and where the
    /// last whole commit of the last segment ends; nil when the manifest replaced segments (a
    /// compaction), which the follower meets by opening the store again.
    mutating func follow(
        _ manifest: Manifest, known: [UInt64], files: SegmentSet, offset: Int, state: inout IndexState
    ) throws -> (files: SegmentSet, end: Int, covered: [UInt64])? {
        guard manifest.segments.starts(with: known), let lastKnown = known.last else { return nil }
        following = true
        var opened = files.files
        for number in manifest.segments.dropFirst(known.count) {
            opened[number] = try openSegment(number, isLast: number == manifest.segments.last)
        }
        let all = SegmentSet(opened)
        // Only what the writer's last sync reached (`SyncedHint`); a hint behind what was read
        // already (stale) reads nothing more.
        let first = known.count - 1
        let limit = ignoresSyncedLimit ? nil : durableLimit(manifest.segments, files: opened)
        if let limit, limit.index < first { return (files, offset, known) }
        let reader = BlockReader(segments: all, cache: cache)
        var end = offset
        var covered = manifest.segments
        for i in first..<manifest.segments.count {
            if let limit, i > limit.index {
                covered = Array(manifest.segments.prefix(i))
                break
            }
            let number = manifest.segments[i]
            let from = i == first ? offset : JournalFormat.fileHeaderSize
            end = try replaySegment(
                opened[number]!, from: from, isLast: i == manifest.segments.count - 1, state: &state, reader: reader,
                durableEnd: limit?.index == i ? max(from, limit!.offset) : nil)
        }
        _ = lastKnown
        return (all, end, covered)
    }

    /// Where a writer's last sync reached (`SyncedHint`), as an index in `segments` and an
    /// offset in that segment; nil without a hint that names one of them (salt and all).
    func durableLimit(_ segments: [UInt64], files: [UInt64: SegmentFile]) -> (index: Int, offset: Int)? {
        guard let hint = SyncedHint.read(directory, fileSystem: fs), let i = segments.lastIndex(of: hint.segment),
            files[hint.segment]?.salt == hint.salt
        else { return nil }
        return (i, max(JournalFormat.fileHeaderSize, hint.offset))
    }

    /// The longest prefix of `segments` whose commits are all at or before `version`, and the
    /// state at its end (a compaction that keeps the versions after `version` readable folds
    /// only that prefix). The segments are sealed ones.
    mutating func replayPrefix(
        _ segments: [UInt64], files: SegmentSet, until version: UInt64
    ) throws -> (state: IndexState, count: Int) {
        let replayed = try replayFromFirst(segments, files: files, until: version, lastIsTail: false)
        return (replayed.atSegmentEnd, replayed.wholeSegments)
    }

    /// Replays `segments` from the first, stopping at the first commit after `version`: the
    /// state there, the state at the end of the last segment replayed whole, and how many were.
    private mutating func replayFromFirst(
        _ segments: [UInt64], files: SegmentSet, until version: UInt64, lastIsTail: Bool
    ) throws -> (state: IndexState, atSegmentEnd: IndexState, wholeSegments: Int) {
        precondition(readOnly, "a replay as of a version opens nothing for writing")
        lastVersion = version
        var state = IndexState()
        let reader = BlockReader(segments: files, cache: cache)
        for (i, number) in segments.enumerated() {
            guard let file = files.files[number] else {
                throw EngineError(.corruption, "segment \(number) of the manifest is not open", path: directory)
            }
            let before = state
            _ = try replaySegment(
                file, from: JournalFormat.fileHeaderSize, isLast: lastIsTail && i == segments.count - 1,
                state: &state, reader: reader)
            if stopped { return (state, before, i) }
        }
        return (state, state, segments.count)
    }

    /// A new store: segment 1 with its header, and a manifest naming it.
    private mutating func initialize() throws {
        var manifest = Manifest()
        if key == nil, let provider = options.encryptionKey { key = try provider.encryptionKey() }
        manifest.cipher = key.map(StoreCipher.fresh)
        let number = try manifest.allocateFileNumber { _ in true }  // a new store: number 1
        let p = path(SegmentFile.fileName(number))
        let handle = try fs.openFile(p, writable: true, create: true, exclusive: false)
        try handle.truncate(to: 0)
        try handle.write(
            FileHeader.fresh(magic: JournalFormat.segmentMagic, number: number, encrypted: key != nil).encoded(),
            at: 0)
        try handle.sync()
        handle.close()
        manifest.segments = [number]
        let tmp = path(JournalFormat.manifestFileName + JournalFormat.temporarySuffix)
        try? fs.removeFile(tmp)
        let m = try fs.openFile(tmp, writable: true, create: true, exclusive: true)
        try m.write(manifest.encoded(), at: 0)
        try m.sync()
        m.close()
        try fs.rename(tmp, to: path(JournalFormat.manifestFileName))
        try fs.syncDirectory(directory)
    }

    /// Removes what an interrupted rollover, checkpoint or compaction left behind.
    private mutating func cleanUp(names: [String], manifest: Manifest) throws {
        var removed: [String] = []
        for name in names {
            var remove = name.hasSuffix(JournalFormat.temporarySuffix)
            if let n = Self.number(name, JournalFormat.segmentPrefix, JournalFormat.segmentSuffix),
                !manifest.segments.contains(n)
            {
                remove = true
            }
            if let n = Self.number(name, JournalFormat.checkpointPrefix, JournalFormat.checkpointSuffix),
                n != manifest.checkpoint
            {
                remove = true
            }
            if remove {
                try fs.removeFile(path(name))
                removed.append(name)
            }
        }
        if !removed.isEmpty { try fs.syncDirectory(directory) }
        report.removedFiles = removed
    }

    static func number(_ name: String, _ prefix: String, _ suffix: String) -> UInt64? {
        guard name.hasPrefix(prefix), name.hasSuffix(suffix), name.count == prefix.count + 12 + suffix.count else {
            return nil
        }
        return UInt64(name.dropFirst(prefix.count).dropLast(suffix.count), radix: 16)
    }

    private mutating func openSegment(_ number: UInt64, isLast: Bool) throws -> SegmentFile {
        let p = path(SegmentFile.fileName(number))
        guard fs.fileExists(p) else {
            throw EngineError.corruption("segment \(number), listed in the manifest, is missing", path: p, offset: 0)
        }
        let handle = try fs.openFile(p, writable: !readOnly, create: false, exclusive: false)
        let bytes = try handle.read(count: JournalFormat.fileHeaderSize, at: 0)
        let decoded = FileHeader.decode(bytes, magic: JournalFormat.segmentMagic)
        switch decoded {
        case .success(let header):
            guard header.number == number else {
                throw EngineError.corruption(
                    "segment header names number \(header.number), expected \(number)", path: p, offset: 16)
            }
            guard (header.keyNonce != 0) == (cipher != nil) else {
                throw EngineError.corruption(
                    cipher != nil
                        ? "a segment of an encrypted store is not encrypted"
                        : "an encrypted segment in a store that is not encrypted", path: p, offset: 12)
            }
            return SegmentFile(
                number: number, salt: header.salt, path: p, handle: handle, fileSystem: fs,
                formatVersion: header.version, writable: !readOnly,
                cipher: cipher?.fileCipher(magic: JournalFormat.segmentMagic, header: header))
        case .failure(.short) where isLast:
            // A header cut short holds no commit: the segment is empty.
            let fresh = FileHeader.fresh(magic: JournalFormat.segmentMagic, number: number, encrypted: cipher != nil)
            if !readOnly {
                try handle.truncate(to: 0)
                try handle.write(fresh.encoded(), at: 0)
                try handle.sync()
            }
            noteCut(file: p, at: 0, bytes: bytes.count, reason: "incomplete segment header")
            return SegmentFile(
                number: number, salt: fresh.salt, path: p, handle: handle, fileSystem: fs, writable: !readOnly,
                cipher: cipher?.fileCipher(magic: JournalFormat.segmentMagic, header: fresh))
        case .failure(.unsupportedVersion(let v)):
            throw EngineError(
                .unsupportedFormat,
                "segment format version \(v); this build reads versions \(JournalFormat.readableVersions)",
                path: p)
        case .failure(.wrongMagic):
            throw EngineError.corruption("not a Logbook segment (bad magic)", path: p, offset: 0)
        case .failure:
            throw EngineError.corruption("segment header is damaged", path: p, offset: 0)
        }
    }

    mutating func noteCut(file: String, at offset: Int, bytes: Int, reason: String) {
        report.truncatedFile = file
        report.truncatedOffset = offset
        report.truncatedBytes += bytes
        report.truncationReason = reason
    }

}

func parentDirectory(_ path: String) -> String {
    var p = path
    while p.count > 1 && p.hasSuffix("/") { p.removeLast() }
    guard let slash = p.lastIndex(of: "/") else { return "." }
    return slash == p.startIndex ? "/" : String(p[..<slash])
}
