import Dispatch
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

// The checkpoint file: frames of compressed chunks and slot frames of whole leaves, written
// under a temporary name and renamed; read back with every frame checked.
extension Checkpoint {
    // MARK: Files

    /// Writes a checkpoint file under a temporary name, syncs it and renames it into place.
    static func write(_ stream: [UInt8], number: UInt64, directory: String, fileSystem fs: any FileSystem) throws {
        try write(number: number, directory: directory, fileSystem: fs) { chunk, _ in
            stream.withUnsafeBytes { raw in
                var start = 0
                repeat {
                    let end = min(raw.count, start + chunkSize)
                    chunk(UnsafeRawBufferPointer(rebasing: raw[start..<end]))
                    start = end
                } while start < raw.count
            }
        }
    }

    /// Whole leaves in one `checkpointSlots` frame, at most (256 KiB of slots: the writer's
    /// buffers stay small beside the indexes it writes out, at the end of a large commit).
    static let leavesPerSlotFrame = (256 << 10) / JournalFormat.wholeLeafSize

    /// Writes the checkpoint whose stream `produce` hands out in chunks of at most `chunkSize`
    /// bytes (each a compressed frame as it comes) and whose whole leaves it hands out one at
    /// a time (gathered into `checkpointSlots` frames). The file is written as it grows, a
    /// few hundred KiB at a time: neither it nor the stream is ever whole in memory.
    ///
    /// A failure removes the temporary file (it would hold its space until the next open: on a
    /// full disk, the space a user frees). `estimatedBytes` is checked against the free space
    /// first, so that a checkpoint that cannot fit fails before it writes anything.
    static func write(
        number: UInt64, directory: String, fileSystem fs: any FileSystem, estimatedBytes: Int = 0,
        stream produce: (_ chunk: (UnsafeRawBufferPointer) -> Void, _ leaf: (UnsafePointer<UInt64>) -> Void) -> Void
    ) throws {
        if estimatedBytes > 0, let available = fs.availableBytes(directory), available < estimatedBytes {
            throw EngineError(
                .diskFull, "a checkpoint needs about \(estimatedBytes) bytes free and \(available) are", path: directory
            )
        }
        let final = joinPath(directory, fileName(number))
        let tmp = final + JournalFormat.temporarySuffix
        try? fs.removeFile(tmp)
        do {
            try writeTemporary(tmp, number: number, fileSystem: fs, stream: produce)
            try fs.rename(tmp, to: final)
        } catch {
            try? fs.removeFile(tmp)
            throw error
        }
        try fs.syncDirectory(directory)
    }

    /// The file of `write`, under its temporary name, synced.
    private static func writeTemporary(
        _ tmp: String, number: UInt64, fileSystem fs: any FileSystem,
        stream produce: (_ chunk: (UnsafeRawBufferPointer) -> Void, _ leaf: (UnsafePointer<UInt64>) -> Void) -> Void
    ) throws {
        let handle = try fs.openFile(tmp, writable: true, create: true, exclusive: true)
        defer { handle.close() }
        let salt = FileHeader.randomSalt()
        var header = FileHeader(magic: JournalFormat.checkpointMagic, number: number, salt: salt)
        header.version = JournalFormat.checkpointVersion
        var out = header.encoded()
        var written = 0
        var failure: (any Error)?
        /// Writes what `out` holds once it passes 256 KiB (all of it when `force`).
        func drain(_ out: inout [UInt8], force: Bool = false) {
            guard failure == nil, force || out.count >= 256 << 10 else { return }
            do { try handle.write(out, at: written) } catch { failure = error }
            written += out.count
            out.removeAll(keepingCapacity: true)
        }
        var chunks = 0
        var length = 0
        var slots: [UInt8] = []
        var slotFrames = 0
        var leaves = 0
        /// The gathered leaves as one frame, padded so that they start at a multiple of 512
        /// bytes in the file.
        func flushSlots(_ out: inout [UInt8], _ slots: inout [UInt8]) {
            guard !slots.isEmpty else { return }
            let leafSize = JournalFormat.wholeLeafSize
            let payloadStart = written + out.count + JournalFormat.frameHeaderSize
            let padding = (leafSize - (payloadStart + 2) % leafSize) % leafSize
            Frame.append(
                type: .checkpointSlots, codec: .raw, storedLength: 2 + padding + slots.count, salt: salt, to: &out
            ) { payload in
                payload.storeBytes(of: UInt16(padding).littleEndian, as: UInt16.self)
                slots.withUnsafeBytes {
                    payload.baseAddress!.advanced(by: 2 + padding).copyMemory(
                        from: $0.baseAddress!, byteCount: $0.count)
                }
            }
            slotFrames += 1
            slots.removeAll(keepingCapacity: true)
            drain(&out)
        }
        produce(
            { piece in
                precondition(piece.count <= chunkSize, "a checkpoint chunk longer than chunkSize")
                Frame.append(type: .checkpointData, payload: piece, compress: true, salt: salt, to: &out)
                chunks += 1
                length += piece.count
                drain(&out)
            },
            { leaf in
                if slots.isEmpty { slots.reserveCapacity(leavesPerSlotFrame * JournalFormat.wholeLeafSize) }
                slots.append(
                    contentsOf: UnsafeRawBufferPointer(start: leaf, count: JournalFormat.wholeLeafSize))
                leaves += 1
                if slots.count == leavesPerSlotFrame * JournalFormat.wholeLeafSize { flushSlots(&out, &slots) }
            })
        flushSlots(&out, &slots)
        var end = ByteWriter()
        end.appendLE(UInt32(chunks))
        end.appendLE(UInt64(length))
        end.appendLE(UInt32(slotFrames))
        end.appendLE(UInt64(leaves))
        Frame.append(type: .checkpointEnd, payload: end.bytes, compress: false, salt: salt, to: &out)
        drain(&out, force: true)
        if let failure { throw failure }
        try handle.sync()
    }

    /// Reads and checks a checkpoint file.
    ///
    /// The file is read into memory (`FileImage`: the slot frames when first checked): the
    /// primary index's whole leaves are used where they lie, and the compressed frames are kept
    /// for the secondary indexes, which are built from them on first use.
    /// Reads a checkpoint file. With `fallback`, a version-3 file's secondary-index section is
    /// checked after this returns (`decode(_:form:leaves:stream:later:)`), and `fallback` gives
    /// the indexes if it fails. With `primaryFallback`, the checksums of the slot frames (the
    /// whole leaves) are left to finish after this returns too, and every read of a whole
    /// leaf waits for them (`SlotCheck`); `primaryFallback` mends damaged leaves.
    static func read(
        path: String, number: UInt64, fileSystem fs: any FileSystem, fallback: IndexFallback? = nil,
        primaryFallback: PrimaryFallback? = nil, log: (@Sendable (String) -> Void)? = nil
    ) throws -> Loaded {
        let handle = try fs.openFile(path, writable: false, create: false, exclusive: false)
        let image: FileImage
        do { image = try FileImage(handle, size: try handle.size()) } catch {
            handle.close()
            throw error
        }
        let layout = try Self.layout(image.raw, path: path, number: number, file: handle)
        let slotCheck = SlotCheck(image, layout, now: primaryFallback == nil)
        let leafLog = primaryFallback != nil ? LeafLog() : nil
        // Nothing the open gives is used before the slot frames are found sound (now, or by
        // the first reader of a whole leaf once the check is left to finish later). When the
        // decoding fails, a check already begun is waited for (its thread reads the image);
        // one left for later has not begun.
        var slotsChecked = false
        defer { if !slotsChecked && primaryFallback == nil { try? slotCheck.finish(path: path) } }
        // The stream is decompressed into memory let go once decoded (with `fallback`, once
        // its secondary-index section is checked). With `fallback`, in a file of version 3,
        // the open decompresses only what holds the sections before the secondary indexes
        // (the header, the primary index, the sets: the first 64 KiB, else the first chunks):
        // the thread that checks the secondary indexes decompresses the rest. In a store of a
        // million objects with one index, the whole stream was 5 MB, a quarter of an open's
        // time, a third of that the kernel's zeroing of new pages. Not in huge pages: a
        // first write to one may wait for the kernel to compact memory (10 ms seen here).
        let stream = MappedBytes(count: layout.total, huge: false)
        var pending: (start: Int, complete: @Sendable () throws(Malformed) -> Void)?
        if fallback != nil && layout.version >= 3 {
            let chunks = layout.frames.count
            // Where the secondary indexes begin, and the first chunk the check decompresses.
            var found: (start: Int, from: Int)?
            // First the beginning of the first chunk alone: the sections before the secondary
            // indexes take a few kilobytes in most stores (a million keys in whole leaves, 31 KB).
            if chunks > 0 && layout.frames[0].codec == .lz4 {
                let first = UnsafeMutableRawBufferPointer(
                    rebasing: stream.bytes[0..<(chunks > 1 ? layout.starts[1] : layout.total)])
                if let n = LZ4.decompressPrefix(
                    UnsafeRawBufferPointer(rebasing: image.raw[layout.frames[0].payload]), into: first,
                    count: Self.openPrefix),
                    let start = try? secondarySectionStart(UnsafeRawBufferPointer(rebasing: stream.bytes[..<n]))
                {
                    found = (start, 0)
                }
            }
            var ready = 0
            while found == nil && ready < chunks {
                // One chunk, then twice as many each time the sections run past them.
                let upTo = min(chunks, max(1, 2 * ready))
                try decompress(image.raw, layout, into: stream.bytes, chunks: ready..<upTo, path: path)
                ready = upTo
                let end = ready < chunks ? layout.starts[ready] : layout.total
                if ready < chunks,
                    let start = try? secondarySectionStart(UnsafeRawBufferPointer(rebasing: stream.bytes[..<end]))
                {
                    found = (start, ready)
                }
            }
            if let found {
                let rest = UncheckedSendable((image, stream.bytes, layout, found.from))
                pending = (
                    found.start,
                    { () throws(Malformed) in
                        // `image` is kept alive by this closure; the stream by the check's owner.
                        // (A first chunk decoded in part is decoded again whole: the same bytes.)
                        let (image, bytes, layout, from) = rest.value
                        do {
                            try decompress(
                                image.raw, layout, into: bytes, chunks: from..<layout.frames.count, path: path)
                        } catch {
                            throw Malformed(
                                section: "secondary indexes", offset: layout.starts[from],
                                reason: "a chunk does not decompress")
                        }
                    }
                )
            }
        } else {
            try decompress(image.raw, layout, into: stream.bytes, chunks: 0..<layout.frames.count, path: path)
        }
        var loaded: Loaded
        do {
            loaded = try decode(
                UnsafeRawBufferPointer(stream.bytes), form: PrimaryForm(version: layout.version),
                leaves: LeafSource(image: image, frames: layout.slotFrames, log: leafLog),
                stream: { range in
                    // Checked once already: the same bytes give the same stream. Only the
                    // chunks of the secondary-index section are decompressed again.
                    guard let again = try? Self.stream(image, path: path, number: number, only: range) else {
                        fatalError("a checkpoint read at open no longer decodes")
                    }
                    return again
                },
                chunks: EncodedChunks(starts: layout.starts, total: layout.total) { [layout] k in
                    Self.chunk(k, of: image, layout)
                }, later: fallback.map { LaterCheck(owner: stream, fallback: $0, pending: pending) })
        } catch {
            // The offset is in the decompressed stream (the file's frames are compressed).
            throw EngineError.corruption(
                "checkpoint contents are malformed: \(error)", path: path, offset: JournalFormat.fileHeaderSize)
        }
        slotsChecked = true
        if let primaryFallback, let leafLog, !layout.slotFramePositions.isEmpty {
            slotCheck.leave(
                image,
                to: SlotCheck.Mending(
                    leaves: leafLog, version: loaded.state.version, fallback: primaryFallback, path: path, log: log))
            loaded.state.slotCheck = slotCheck
        } else {
            try slotCheck.finish(path: path)
        }
        return loaded
    }

    /// The stream a checkpoint file holds, every frame checked. With `only`, only the chunks
    /// that hold those bytes of the stream are decompressed: the array has the stream's
    /// length, and its other bytes are left as they were allocated, never written (nor, in a
    /// large allocation, given memory).
    static func stream(_ image: FileImage, path: String, number: UInt64, only: Range<Int>? = nil) throws
        -> [UInt8]
    {
        let layout = try Self.layout(image.raw, path: path, number: number)
        return try [UInt8](unsafeUninitializedCapacity: layout.total) { buffer, initialized in
            try decompress(
                image.raw, layout, into: UnsafeMutableRawBufferPointer(buffer), chunks: 0..<layout.frames.count,
                only: only, path: path)
            initialized = layout.total
        }
    }

    /// Chunk `k` of a checkpoint file's stream, decompressed (for the reads in place of its
    /// secondary indexes: `EncodedChunks`). The file was checked when it was opened.
    static func chunk(_ k: Int, of image: FileImage, _ layout: Layout) -> [UInt8] {
        let count = (k + 1 < layout.starts.count ? layout.starts[k + 1] : layout.total) - layout.starts[k]
        let frame = layout.frames[k]
        return [UInt8](unsafeUninitializedCapacity: count) { out, made in
            let payload = UnsafeRawBufferPointer(rebasing: image.raw[frame.payload])
            let target = UnsafeMutableRawBufferPointer(out)
            switch frame.codec {
            case .raw:
                guard payload.count == count else { fatalError("a checkpoint read at open no longer decodes") }
                target.copyMemory(from: payload)
            case .lz4:
                guard LZ4.decompress(payload, into: target) else {
                    fatalError("a checkpoint read at open no longer decodes")
                }
            }
            made = count
        }
    }

    /// Where a checkpoint file's chunks are, each frame checked, and the stream's length.
    struct Layout {
        var frames: [Frame.Parsed]
        /// Where each chunk's bytes start in the stream.
        var starts: [Int]
        var total: Int
        /// The file's version (its header's).
        var version: UInt16
        /// Where each `checkpointSlots` frame's leaves start in the file, and how many it holds.
        var slotFrames: [(start: Int, count: Int)] = []
        /// Where each `checkpointSlots` frame begins, and the file's salt: their checksums are
        /// left to `SlotCheck`.
        var slotFramePositions: [Int] = []
        var salt: UInt32 = 0
    }

    /// The frames of a checkpoint file, each checked but the slot frames (most of the file's
    /// bytes), whose checksums `SlotCheck` computes (a store's open leaves them to the first
    /// readers of its whole leaves; the decoder uses the leaves' addresses, not their bytes).
    ///
    /// With `file`, a slots frame's header is read from it with a system call rather than
    /// through the mapping: the first touch of a page of the mapping costs about 2 µs (the
    /// kernel maps it and its neighbours), and an open of ten million objects touched 313 of
    /// them for nothing else (0.6 ms; 0.1 ms read). The frame's bytes are touched later, by
    /// the check of its checksum.
    static func layout(
        _ raw: UnsafeRawBufferPointer, path: String, number: UInt64, file: (any StorageFile)? = nil
    ) throws -> Layout {
        let header: FileHeader
        do {
            header = try FileHeader.decode(
                raw, magic: JournalFormat.checkpointMagic, versions: JournalFormat.readableCheckpointVersions)
        } catch {
            throw EngineError.corruption("checkpoint header is damaged (\(error))", path: path, offset: 0)
        }
        guard header.number == number else {
            throw EngineError.corruption("checkpoint header names number \(header.number)", path: path, offset: 16)
        }
        // The frames, each checked, in order.
        var frames: [Frame.Parsed] = []
        var slotFrames: [(start: Int, count: Int)] = []
        var position = JournalFormat.fileHeaderSize
        var end: (chunks: Int, length: Int, position: Int)?
        let hasSlots = header.version >= 3
        var slotPositions: [Int] = []
        let slotsType = JournalFormat.FrameType.checkpointSlots.rawValue
        // A slots frame's header and padding count (14 bytes), when read from `file`.
        var head = (UInt64(0), UInt64(0))
        while end == nil {
            let headRead =
                hasSlots && file != nil && position + 14 <= raw.count
                && withUnsafeMutableBytes(of: &head) { buffer in
                    (try? file!.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<14]), at: position)) == 14
                }
            // A slot frame's checksum is checked later (`SlotCheck`), the others' here.
            let isSlots =
                headRead
                ? withUnsafeBytes(of: head) { $0[8] } == slotsType
                : hasSlots && position + 9 <= raw.count && raw[position + 8] == slotsType
            let parsed =
                isSlots && headRead
                ? withUnsafeBytes(of: head) {
                    Frame.parseHeader(UnsafeRawBufferPointer(rebasing: $0[0..<12]), at: position, size: raw.count)
                }
                : Frame.parse(raw, at: position, salt: header.salt, verify: !isSlots)
            guard case .frame(let frame) = parsed else {
                throw EngineError.corruption("checkpoint frame is damaged", path: path, offset: position)
            }
            if isSlots { slotPositions.append(position) }
            switch frame.type {
            case .checkpointEnd:
                var r = ByteReader(UnsafeRawBufferPointer(rebasing: raw[frame.payload]))
                let n = try? r.readLE(UInt32.self)
                let length = try? r.readLength(UInt64.self)
                // Version 3 also counts the slot frames and their leaves.
                let slotsMatch =
                    !hasSlots
                    || (try? r.readLE(UInt32.self)) == UInt32(slotFrames.count)
                        && (try? r.readLE(UInt64.self)) == UInt64(slotFrames.reduce(0) { $0 + $1.count })
                guard let n, let length, slotsMatch, frame.end == raw.count else {
                    throw EngineError.corruption(
                        "checkpoint end record does not match", path: path, offset: position)
                }
                end = (Int(n), length, position)
            case .checkpointSlots where hasSlots && frame.codec == .raw:
                // padding u16 · padding zero bytes · whole 512-byte leaves, 8-aligned in memory.
                let payload = frame.payload
                let padding =
                    payload.count < 2
                    ? -1
                    : headRead
                        ? withUnsafeBytes(of: head) { Int($0.loadLE(at: 12, as: UInt16.self)) }
                        : Int(raw.loadLE(at: payload.lowerBound, as: UInt16.self))
                let start = payload.lowerBound + 2 + padding
                guard padding >= 0, start <= payload.upperBound,
                    (payload.upperBound - start) % JournalFormat.wholeLeafSize == 0,
                    Int(bitPattern: raw.baseAddress! + start) % 8 == 0
                else {
                    throw EngineError.corruption("checkpoint slot frame is malformed", path: path, offset: position)
                }
                slotFrames.append((start, (payload.upperBound - start) / JournalFormat.wholeLeafSize))
                position = frame.end
            case .checkpointData:
                frames.append(frame)
                position = frame.end
            default:
                throw EngineError.corruption("unexpected frame in a checkpoint", path: path, offset: position)
            }
        }
        // Each chunk's decoded length, from its header.
        var starts: [Int] = []
        var total = 0
        for (k, frame) in frames.enumerated() {
            let payload = UnsafeRawBufferPointer(rebasing: raw[frame.payload])
            let length = frame.codec == .raw ? payload.count : LZ4.declaredLength(payload) ?? -1
            guard length >= 0, length <= chunkSize, let end, total + length <= end.length else {
                throw EngineError.corruption(
                    "checkpoint chunk \(k) declares a length that does not fit", path: path,
                    offset: frame.payload.lowerBound)
            }
            starts.append(total)
            total += length
        }
        guard let end, end.chunks == frames.count, end.length == total else {
            throw EngineError.corruption(
                "checkpoint end record does not match", path: path, offset: end?.position ?? position)
        }
        return Layout(
            frames: frames, starts: starts, total: total, version: header.version, slotFrames: slotFrames,
            slotFramePositions: slotPositions, salt: header.salt)
    }

    /// Decompresses the chunks `chunks` of `layout` (those of them that hold bytes of `only`,
    /// when given) in place, in parallel, into `out` (`layout.total` bytes: no chunk copied
    /// twice). Not zeroed first: every byte is written by its chunk's decoder, and a chunk
    /// that fails makes the whole stream an error.
    static func decompress(
        _ raw: UnsafeRawBufferPointer, _ layout: Layout, into out: UnsafeMutableRawBufferPointer,
        chunks: Range<Int>, only: Range<Int>? = nil, path: String
    ) throws {
        let failed = Atomic<Int>(-1)
        let shared = UncheckedSendable((raw, out))
        let parsed = layout.frames
        let offsets = layout.starts
        // Each worker writes only its own chunk's range of the stream.
        DispatchQueue.concurrentPerform(iterations: chunks.count) { n in
            let k = chunks.lowerBound + n
            let (raw, out) = shared.value
            let payload = UnsafeRawBufferPointer(rebasing: raw[parsed[k].payload])
            let end = k + 1 < offsets.count ? offsets[k + 1] : out.count
            if let only, !only.overlaps(offsets[k]..<end) { return }
            let target = UnsafeMutableRawBufferPointer(rebasing: out[offsets[k]..<end])
            let ok: Bool
            switch parsed[k].codec {
            case .raw:
                target.copyMemory(from: payload)
                ok = true
            case .lz4: ok = LZ4.decompress(payload, into: target)
            }
            if !ok { failed.store(k, ordering: .relaxed) }
        }
        let bad = failed.load(ordering: .relaxed)
        if bad >= 0 {
            throw EngineError.corruption(
                "a checkpoint chunk does not decompress", path: path, offset: parsed[bad].payload.lowerBound)
        }
    }
}
