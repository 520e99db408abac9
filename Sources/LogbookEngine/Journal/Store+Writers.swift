/// Several writers, in one process or in several, on one store: commits are serialized by the
/// commit lock (`flock` on `TAIL`), and each writer, before it commits, reads what the others
/// committed since its last commit — from the journal's tail, applied to its indexes as a
/// reader's refresh applies it, not reloaded. See docs/journal-format.md, "Several writers".
extension Store {
    /// Runs `body` holding the commit lock, after catching up with the commits other writers
    /// made; afterwards `TAIL` names the end of the last commit. Nested calls run `body` alone.
    func withCommitLock<R>(_ state: inout WriterState, _ body: (inout WriterState) throws -> R) throws -> R {
        guard let lock = state.commitLock, !state.holdsCommitLock else { return try body(&state) }
        try lock.lock()
        state.holdsCommitLock = true
        var caughtUp = false
        defer {
            if caughtUp, state.failure == nil, let active = state.active { state.writeTail(active) }
            state.holdsCommitLock = false
            lock.unlock()
        }
        try catchUp(&state)
        caughtUp = true
        options.pausePoint?(.commitLockTaken)
        return try body(&state)
    }

    /// Under the commit lock: applies what other writers committed since this one last
    /// looked. When `TAIL` names this writer's own end and nothing follows it in the file, no
    /// one did (two small reads); otherwise the manifest is read again and the journal from
    /// this writer's end.
    func catchUp(_ state: inout WriterState) throws {
        guard let lock = state.commitLock, let active = state.active else { return }
        let hint = TailHint.read(lock.file)
        let mine = TailHint(
            segment: active.number, end: state.appendOffset, version: state.working.version,
            nextFileNumber: state.manifest.nextFileNumber, generation: state.manifest.generation,
            salt: active.salt)
        defer {
            // File numbers another writer took are not free (its file may not be named yet).
            if let hint, state.manifest.nextFileNumber <= JournalFormat.maxSegmentNumber {
                state.manifest.nextFileNumber = max(state.manifest.nextFileNumber, hint.nextFileNumber)
            }
        }
        if let hint, hint.sameEnd(mine) && Self.nothingWritten(after: state.appendOffset, in: active) { return }
        try followOthers(&state)
    }

    /// Whether the bytes after `offset` in `file` are zeros or the end of the file (space
    /// allocated ahead of commits, or nothing): no writer wrote there.
    static func nothingWritten(after offset: Int, in file: SegmentFile) -> Bool {
        withUnsafeTemporaryAllocation(byteCount: 16, alignment: 8) { buffer in
            guard let n = try? file.handle.read(into: buffer, at: offset) else { return false }
            return Recovery.isZero(UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(buffer)[0..<n]))
        }
    }

    /// Reads the manifest and the journal after this writer's end, as a follower does.
    private func followOthers(_ state: inout WriterState) throws {
        var manifest = try readManifest()
        var recovery = Recovery(directory: directory, options: options, fileSystem: fileSystem, cipher: cipher)
        recovery.ignoresSyncedLimit = true
        if state.compactionTouched != nil { recovery.touchedKeys = [] }
        var working = state.working
        let before = working.version
        guard
            let (files, end, _) = try recovery.follow(
                manifest, known: state.manifest.segments, files: state.segments, offset: state.appendOffset,
                state: &working)
        else {
            // Another process compacted: the segments this writer knew were replaced.
            try reloadBesideOthers(&state)
            return
        }
        state.working = working
        state.segments = files
        if let last = manifest.segments.last, last != state.active?.number, let next = files.files[last] {
            // Another writer started a new segment: this one appends there from now on.
            state.active?.pin(false)
            next.pin(true)
            state.active = next
            state.syncedOffset = JournalFormat.fileHeaderSize
        }
        state.appendOffset = end
        state.othersEnd = end
        state.allocatedEnd = max(end, (try? state.active?.handle.size()) ?? end)
        if manifest.nextFileNumber <= JournalFormat.maxSegmentNumber {
            manifest.nextFileNumber = max(manifest.nextFileNumber, state.manifest.nextFileNumber)
        }
        state.manifest = manifest
        if let touched = recovery.touchedKeys { state.compactionTouched?.append(contentsOf: touched) }
        if working.version != before {
            state.remoteRanges.append((before + 1)...working.version)
            state.remoteVersion = working.version
            state.lastWritten = working.version
            state.bytesSinceCheckpoint = 0
            publish(state)
        }
        // Bytes after the last whole commit that are not zeros: what a writer that died in the
        // middle of a commit left. A plain store writes over them; an encrypted one writes no
        // position of a file twice (a frame's position is its nonce), and starts a new segment.
        if cipher != nil, let active = state.active, !Self.nothingWritten(after: end, in: active) {
            state.needsFreshSegment = true
        }
    }

    /// After another process's compaction: the state read again from its checkpoint and the
    /// journal (the cost of an open), the frames cached forgotten (the same segment numbers
    /// may now hold other frames after a reuse).
    private func reloadBesideOthers(_ state: inout WriterState) throws {
        guard let lock = state.commitLock else { return }
        cache.removeAll()
        var recovery = Recovery(directory: directory, options: options, fileSystem: fileSystem, cipher: cipher)
        let fresh = try recovery.reopenBesideOthers(commitLock: lock)
        let next = fresh.writer.withLock { $0 }
        state.active?.pin(false)
        if next.working.version > state.working.version {
            state.remoteRanges.append((state.working.version + 1)...next.working.version)
        }
        state.working = next.working
        state.segments = next.segments
        state.active = next.active
        state.appendOffset = next.appendOffset
        state.allocatedEnd = next.allocatedEnd
        state.manifest = next.manifest
        state.checkpointVersion = next.checkpointVersion
        state.othersEnd = next.appendOffset
        state.syncedOffset = next.syncedOffset
        state.tailWritten = next.tailWritten
        state.needsFreshSegment = state.needsFreshSegment || next.needsFreshSegment
        state.remoteVersion = next.working.version
        state.lastWritten = next.working.version
        state.bytesSinceCheckpoint = 0
        publish(state)
    }

    /// Runs `body` holding the commit lock, after catching up with other writers' commits:
    /// no other process commits until it returns, so that what `body` reads of the store is
    /// what its commit builds on (the object layer's save: its conflict check, then its
    /// commit; SQLite's `BEGIN IMMEDIATE`). Commits in `body` take no lock of their own.
    ///
    /// ```swift
    /// let version = try store.withCommitLockHeld {
    ///     let current = store.snapshot()          // every writer's commits, to the last
    ///     return try store.commit(transaction(decidedFrom: current))
    /// }
    /// ```
    package func withCommitLockHeld<R>(_ body: () throws -> R) throws -> R {
        let acquired: Bool = try writer.withLock { state in
            guard !isReadOnly, let lock = state.commitLock, !state.holdsCommitLock else { return false }
            try state.checkWritable()
            try lock.lock()
            state.holdsCommitLock = true
            do { try catchUp(&state) } catch {
                state.holdsCommitLock = false
                lock.unlock()
                throw error
            }
            return true
        }
        guard acquired else { return try body() }
        defer {
            writer.withLock { state in
                if state.failure == nil, let active = state.active { state.writeTail(active) }
                state.holdsCommitLock = false
                state.commitLock?.unlock()
            }
        }
        return try body()
    }

    /// Catches up with other writers when one committed since this writer last wrote `TAIL`
    /// (one read of it, without a lock, when none did). Returns whether the version moved.
    @discardableResult
    package func catchUpIfOthersCommitted() throws -> Bool {
        guard !isReadOnly else { return try refresh() }
        let (lock, written) = writer.withLock { ($0.commitLock, $0.tailWritten) }
        guard let lock,
            let hint = TailHint.read(lock.file), hint != written
        else { return false }
        return try refresh()
    }

    /// The versions other writers committed that this one read since the last call, oldest
    /// first (the follower of a writing container tells its contexts of them).
    package func takeRemoteVersions() -> [ClosedRange<UInt64>] {
        writer.withLock { state in
            defer { state.remoteRanges = [] }
            return state.remoteRanges
        }
    }

    /// The newest version another writer committed, as far as this one has read (0: none).
    /// The object layer compares objects read before it with the store at its next save.
    package var remoteVersion: UInt64 { writer.withLock { $0.remoteVersion } }

    /// At a close: the zeros allocated after this writer's last commit are cut, when that
    /// commit is still the last one (else they lie under other writers' commits, or are theirs).
    func trimIfLast(_ state: inout WriterState, _ active: SegmentFile) {
        guard let lock = state.commitLock else {
            state.trimAllocation(of: active)
            return
        }
        guard (try? lock.lock()) != nil else { return }
        defer { lock.unlock() }
        let hint = TailHint.read(lock.file)
        let mine = TailHint(
            segment: active.number, end: state.appendOffset, version: state.working.version,
            nextFileNumber: state.manifest.nextFileNumber, generation: state.manifest.generation,
            salt: active.salt)
        guard hint?.sameEnd(mine) ?? false, Self.nothingWritten(after: state.appendOffset, in: active) else { return }
        state.trimAllocation(of: active)
    }

    /// Runs `body` with the store to this process alone (`LOCK` exclusive): no other writer is
    /// open, and none opens until it returns. Throws `.locked` when another writer is open;
    /// `work` names what needs it, for the message.
    ///
    /// ```swift
    /// try store.withStoreToItself("a migration") { try rewriteEveryRecord() }
    /// ```
    package func withStoreToItself<R>(_ work: String, _ body: () throws -> R) throws -> R {
        guard let lock else { return try body() }
        guard lock.tryUpgrade() else {
            throw EngineError(
                .locked, "another process has the store open for writing; \(work) needs it to itself: close it first",
                path: directory)
        }
        defer { lock.downgrade() }
        return try body()
    }

    /// Takes the advisory lock file `name` of the store's directory (created when missing)
    /// exclusively, when no one holds it — another instance in this process, or another
    /// process: nil when one does. The lock goes with the returned lock's `unlock()`, or the
    /// process.
    ///
    /// ```swift
    /// guard let held = try store.tryLockFile(JournalFormat.syncLockFileName) else { return }
    /// defer { held.unlock() }
    /// ```
    package func tryLockFile(_ name: String) throws -> (any FileLock)? {
        try fileSystem.lockFileIfAlone(joinPath(directory, name))
    }

    /// Whether a writer (in any process) has the store in `directory` open now. A moment's
    /// answer: one may open right after.
    package static func hasWriters(at directory: String) -> Bool {
        let path = joinPath(directory, JournalFormat.lockFileName)
        guard PosixFileSystem().fileExists(path) else { return false }
        guard let probe = try? PosixFileSystem().lockFileIfAlone(path) else { return true }
        probe.unlock()
        return false
    }
}

extension Store {
    /// Claims `count` serial numbers of `keyspace`, none below `floor`, that no other writer of
    /// the store (in this process or another) has claimed or will: returns the first. Under the
    /// commit lock (taken here unless this writer holds it); a store with no commit lock (read
    /// only) claims nothing and returns `floor`.
    ///
    /// ```swift
    /// let first = try store.claimSerials(keyspace: 3, count: 1024, atLeast: next)
    /// // serials first..<first + 1024 are this writer's
    /// ```
    package func claimSerials(keyspace: UInt16, count: UInt64, atLeast floor: UInt64) throws -> UInt64 {
        try writer.withLock { state in
            guard !isReadOnly, let lock = state.commitLock else { return floor }
            try state.checkWritable()
            let held = state.holdsCommitLock
            if !held { try lock.lock() }
            defer { if !held { lock.unlock() } }
            let first = max(floor, SerialClaims.read(lock.file, keyspace: keyspace))
            let (end, overflow) = first.addingReportingOverflow(count)
            guard !overflow else {
                throw EngineError(.invalidArgument, "the serial numbers of keyspace \(keyspace) are used up")
            }
            try SerialClaims.write(lock.file, keyspace: keyspace, next: end)
            return first
        }
    }

    /// The next serial of `keyspace` no writer has claimed (0: none recorded). Read under the
    /// commit lock, it bounds every key any writer has handed out: a save's counters record
    /// takes it as a floor, so that the record never falls below another process's keys.
    package func claimedSerials(keyspace: UInt16) -> UInt64 {
        writer.withLock { state in state.commitLock.map { SerialClaims.read($0.file, keyspace: keyspace) } ?? 0 }
    }
}
