extension Store {
    /// Encrypts a store, changes its key, or decrypts it: every live record is written again
    /// with `newKey` (nil: unencrypted) into new segments, and one atomic replacement of the
    /// manifest switches the store to them, as a compaction does. A crash before that switch
    /// leaves the store as it was, with its old key (the new files are removed at its next
    /// open); after it, the store has the new key. The versions before the change are folded
    /// into its last one (as a compaction without retention folds them), the records of the
    /// object graph's history included as they are.
    ///
    /// The store must not be open elsewhere (the writer's lock is taken: `locked` otherwise);
    /// `options.encryptionKey` is its current key (none for a store that is not encrypted).
    ///
    /// ```swift
    /// var options = StoreOptions()
    /// options.encryptionKey = oldKey
    /// try Store.changeKey(at: "/var/lib/app/items.logbook", options: options, to: newKey)
    /// ```
    public static func changeKey(
        at directory: String, options: StoreOptions = StoreOptions(), to newKey: EncryptionKey?
    ) throws {
        try changeKey(at: directory, options: options, to: newKey, fileSystem: PosixFileSystem())
    }

    static func changeKey(
        at directory: String, options: StoreOptions, to newKey: EncryptionKey?, fileSystem fs: any FileSystem
    ) throws {
        var opening = options
        opening.readOnly = false
        opening.salvage = false
        opening.createIfMissing = false
        opening.compaction = .manual
        opening.checkpointInterval = 0
        opening.checkpointOnClose = false
        opening.beforeCompaction = nil
        do {
            let store = try open(at: directory, options: opening, fileSystem: fs, exclusive: true)
            defer { try? store.close() }
            try store.rewriteAll(with: newKey.map(StoreCipher.fresh))
        }
        // The new key's store, with a checkpoint: its next open need not replay it.
        opening.encryptionKey = newKey
        let store = try open(at: directory, options: opening, fileSystem: fs, exclusive: true)
        defer { try? store.close() }
        try store.checkpoint()
    }

    /// Every live record written again into new segments sealed with `newCipher`, and a
    /// manifest naming only them and a new, empty active segment. The store's state in memory
    /// still names the old segments afterwards: it is closed at once (`changeKey`).
    private func rewriteAll(with newCipher: StoreCipher?) throws {
        try maintenance.withLock { _ in
            let sealed = try writer.withLock { writerState -> SealedSegments in
                try writerState.checkWritable()
                try writerState.working.slotCheck?.check()
                if let active = writerState.active {
                    // The active segment ends with its last commit, synced, like a sealed one.
                    if let size = try? active.handle.size(), size > writerState.appendOffset {
                        try active.handle.truncate(to: writerState.appendOffset)
                    }
                    try active.handle.sync()
                }
                let files = writerState.manifest.segments.compactMap { writerState.segments.files[$0] }
                return SealedSegments(
                    state: writerState.working, files: files, all: writerState.segments,
                    numbers: Set(files.map(\.number)),
                    bytesBefore: files.reduce(0) { $0 + ((try? $1.handle.size()) ?? 0) })
            }
            var output = CompactionWriter(store: self, version: sealed.state.version, cipher: newCipher)
            try rewriteLive(of: sealed, into: &output)
            try writer.withLock { writerState in
                var manifest = writerState.manifest
                var created: SegmentFile?
                do {
                    let number = try allocateFileNumber(&manifest)
                    created = try createSegment(number: number, cipher: newCipher)
                    manifest.segments = output.files.map(\.number) + [number]
                    manifest.checkpoint = 0
                    manifest.generation += 1
                    manifest.cipher = newCipher
                    try writeManifestTellingReplacement(manifest)
                } catch {
                    if error is ManifestNotReplaced || created == nil {
                        output.abandon()
                        created?.markObsolete()
                    }
                    writerState.recordFailure(error)
                    throw (error as? ManifestNotReplaced)?.underlying ?? error
                }
                // Nothing more is written through this state: it names the old segments.
                writerState.closed = true
            }
        }
    }
}
