import Dispatch
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

extension Store {
    /// Writes a checkpoint of the indexes now, so that the next open replays only what follows.
    public func checkpoint() throws {
        if isReadOnly { throw EngineError(.readOnly, "the store was opened read-only", path: directory) }
        try maintenance.withLock { _ in try writeCheckpoint() }
    }

    /// Caller holds `maintenance`.
    func writeCheckpoint() throws {
        var capturedSegments: [UInt64] = []
        let captured = try writer.withLock { writerState -> (IndexState, UInt64, Int, UInt64)? in
            try writerState.checkWritable()
            // Under the commit lock: the file number, and what other writers committed.
            return try withCommitLock(&writerState) { writerState -> (IndexState, UInt64, Int, UInt64)? in
                if writerState.manifest.checkpoint != 0 && writerState.checkpointVersion == writerState.working.version
                {
                    return nil
                }
                guard let active = writerState.active else { return nil }
                // A checkpoint covers only durable commits.
                if writerState.syncedOffset < writerState.appendOffset {
                    do { try active.handle.sync() } catch {
                        writerState.fail(error, truncating: active, to: writerState.syncedOffset)
                        throw error
                    }
                    writerState.syncedOffset = writerState.appendOffset
                }
                let number = try allocateFileNumber(&writerState.manifest)
                capturedSegments = writerState.manifest.segments
                return (writerState.working, active.number, writerState.appendOffset, number)
            }
        }
        guard let (state, segment, offset, number) = captured else { return }
        // Indexes or leaves that could not be had are not written out (the journal still has
        // them).
        try state.checkLoaded()
        // Room for a file about the size of the last one, and some to spare.
        let previous = writer.withLock { $0.manifest.checkpoint }
        let previousBytes =
            previous == 0
            ? 0
            : ((try? fileSystem.openFile(
                path(Checkpoint.fileName(previous)), writable: false, create: false, exclusive: false)).map { file in
                    defer { file.close() }
                    return (try? file.size()) ?? 0
                } ?? 0)
        try Checkpoint.write(
            number: number, directory: directory, fileSystem: SealedFileSystem.wrapping(fileSystem, cipher),
            estimatedBytes: previousBytes > 0 ? previousBytes + (1 << 20) : 0
        ) { chunk, leaf in
            guard let pause = options.pausePoint else {
                return Checkpoint.encode(state, segment: segment, offset: offset, leaf: leaf, chunk: chunk)
            }
            var chunks = 0
            Checkpoint.encode(state, segment: segment, offset: offset, leaf: leaf) { bytes in
                chunk(bytes)
                chunks += 1
                if chunks == 1 { pause(.checkpointWriting) }
            }
        }
        options.pausePoint?(.checkpointWritten)
        try writer.withLock { writerState in
            try writerState.checkWritable()
            // Under the commit lock, over the manifest as other writers left it.
            try withCommitLock(&writerState) { writerState in
                var manifest = writerState.manifest
                // Another writer compacted meanwhile: segments the checkpoint's records lie in are
                // gone, and the checkpoint with them.
                guard Set(capturedSegments).isSubset(of: manifest.segments), manifest.segments.contains(segment) else {
                    try? fileSystem.removeFile(path(Checkpoint.fileName(number)))
                    return
                }
                let old = manifest.checkpoint
                manifest.checkpoint = number
                manifest.generation += 1
                do { try writeManifest(manifest) } catch {
                    // The store's committed state is intact (the journal holds every commit, and
                    // either manifest on disk names a sound checkpoint): commits go on, and the
                    // checkpoint is tried again later. The old checkpoint stays (the manifest on
                    // disk may still name it); the generation is not used again.
                    writerState.manifest.generation = manifest.generation
                    throw error
                }
                writerState.manifest = manifest
                writerState.checkpointVersion = state.version
                writerState.bytesSinceCheckpoint = max(0, writerState.appendOffset - offset)
                if old != 0 { try? fileSystem.removeFile(path(Checkpoint.fileName(old))) }
            }
        }
    }
}
