import Dispatch
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

// The checkpoint stream read: its sections in order, checked, and the open's deferred check.
extension Checkpoint {
    /// Decodes a checkpoint stream, section by section: header, primary index (built into
    /// its map on another thread while the rest is read), secondary indexes, sets.
    ///
    /// With `stream`, the secondary indexes are only checked here and built on first use
    /// (`SecondaryIndexes`), from the stream that `stream` gives again then: it is passed the
    /// range of the secondary-index section, and needs to give only those bytes of the
    /// stream (the rest of the array it returns is never read).
    ///
    /// `chunks`: how reads in place see the stream (`EncodedChunks`; by default the stream
    /// `stream` gives, as one chunk).
    static func decode(
        _ bytes: [UInt8], chunks: EncodedChunks? = nil, stream: (@Sendable (Range<Int>) -> [UInt8])? = nil
    ) throws(Malformed) -> Loaded {
        let decoded: Result<Loaded, Malformed> = bytes.withUnsafeBytes { raw in
            Result { () throws(Malformed) -> Loaded in try decode(raw, stream: stream, chunks: chunks) }
        }
        return try decoded.get()
    }

    /// Decodes a version-3 stream as an open does: the secondary-index section is checked on
    /// another thread after this returns (on this one before, when `atOnce`: the fuzzer's
    /// harness, which must see every allocation freed when a run ends), and `fallback` gives
    /// the indexes when it fails (`DeferredIndexes.init(checking:fallback:stream:)`). The
    /// stream is copied: the check reads it after the caller's array may be gone.
    static func decode(
        _ bytes: [UInt8], stream: @escaping @Sendable (Range<Int>) -> [UInt8], fallback: @escaping IndexFallback,
        atOnce: Bool = false
    ) throws(Malformed) -> Loaded {
        let copy = MappedBytes(count: bytes.count)
        bytes.withUnsafeBytes { copy.bytes.copyMemory(from: $0) }
        return try decode(
            UnsafeRawBufferPointer(copy.bytes), stream: stream,
            later: LaterCheck(owner: copy, fallback: fallback, atOnce: atOnce))
    }

    /// What an open needs to leave the check of a version-3 stream's secondary-index section
    /// until after it returns.
    struct LaterCheck: Sendable {
        /// Keeps the stream's bytes alive until the check has read them.
        var owner: any Sendable
        /// Gives the indexes when the section fails the check.
        var fallback: IndexFallback
        /// Checks on the calling thread, before the decode returns (for the fuzzer's harness).
        var atOnce = false
        /// Set when the stream's bytes from the secondary-index section on are not written yet
        /// (an open decompresses only the chunks before it): where the section begins, as a
        /// skip of the sections before it found (the decoder must stop there), and what writes
        /// the rest of the stream, called by the check before it reads the section.
        var pending: (start: Int, complete: @Sendable () throws(Malformed) -> Void)? = nil
    }

    /// Gives a checkpoint's secondary indexes from elsewhere (the journal, up to the
    /// checkpoint's version, the first argument) when its section failed the check that an
    /// open left to another thread (the failure, the second argument).
    typealias IndexFallback = @Sendable (UInt64, Malformed) throws(EngineError) -> [UInt32: OrderedIndex]

    /// How a stream's primary section is laid out, by the version of the file that holds it.
    enum PrimaryForm {
        /// Versions 1 and 2: every key of a keyspace, with its location, in the stream.
        case entries
        /// Version 3: the whole leaves named (their slots in the file's `checkpointSlots`
        /// frames), then the keys of the other leaves.
        case leaves

        init(version: UInt16) { self = version >= 3 ? .leaves : .entries }

        /// The most keys a keyspace can claim with `r`'s bytes left: every key in the stream
        /// takes two bytes at least; a whole leaf's keys take a few bytes for 64 at most.
        func keyLimit(_ r: ByteReader) -> Int {
            self == .entries ? r.remaining : 32 * r.remaining
        }
    }

    /// The whole leaves of a checkpoint file, handed out in the order its stream names them.
    struct LeafSource {
        /// Where each slot frame's leaves start in the image, and how many it holds.
        let frames: [(start: Int, count: Int)]
        let image: FileImage
        /// Where the decoder notes each keyspace's leaves, for a later mending (`SlotCheck`).
        let log: LeafLog?
        private let base: UnsafeMutableRawPointer
        /// The next frame, and the current one's next leaf and end (both as image offsets).
        private var frame = 0
        private var cursor = 0
        private var end = 0
        private(set) var remaining: Int

        init(image: FileImage, frames: [(start: Int, count: Int)], log: LeafLog? = nil) {
            self.image = image
            self.frames = frames
            self.log = log
            base = image.bytes.baseAddress!
            remaining = frames.reduce(0) { $0 + $1.count }
        }

        /// The next leaf's 64 slots, or nil when every leaf was handed out.
        @inline(__always)
        mutating func next() -> UnsafeMutablePointer<UInt64>? {
            if cursor == end && !nextFrame() { return nil }
            let slots = (base + cursor).assumingMemoryBound(to: UInt64.self)
            cursor += JournalFormat.wholeLeafSize
            remaining -= 1
            return slots
        }

        /// Moves to the next frame that holds leaves; false after the last.
        private mutating func nextFrame() -> Bool {
            while frame < frames.count {
                let (start, count) = frames[frame]
                frame += 1
                if count > 0 {
                    cursor = start
                    end = start + count * JournalFormat.wholeLeafSize
                    return true
                }
            }
            return false
        }
    }

    /// Decodes a checkpoint stream held in `bytes`; see `decode(_:stream:)`. `form` says how
    /// its primary section is laid out; whole leaves come from `leaves`.
    ///
    /// With `later` and `stream`, a version-3 stream's secondary-index section (the last) is
    /// not even checked here: another thread checks it after this returns, reading `raw`
    /// while `later.owner` keeps it alive, and `later.fallback` gives the indexes if it fails
    /// (`DeferredIndexes.init(checking:fallback:stream:)`). An open then costs what the
    /// primary index and the sets cost, and no more as the indexes grow.
    static func decode(
        _ raw: UnsafeRawBufferPointer, form: PrimaryForm = .leaves, leaves: LeafSource? = nil,
        stream: (@Sendable (Range<Int>) -> [UInt8])? = nil, chunks: EncodedChunks? = nil,
        later: LaterCheck? = nil
    ) throws(Malformed) -> Loaded {
        var source = leaves
        var r = ByteReader(raw)
        var state = IndexState()
        let (segment, offset) = try section("header", &r) { r in try decodeHeader(&r, into: &state) }
        if let stream, let later, form == .leaves {
            state.primary = try section("primary index", &r) { r in try decodePrimary(&r, form, &source) }
            state.sets = try section("sets", &r) { r in try decodeSets(&r) }
            try requireEveryLeafNamed(source, at: r.offset)
            let start = r.offset
            if let pending = later.pending, pending.start != start {
                // The decoder read past where the section was found to begin: bytes not written yet.
                throw Malformed(section: "sets", offset: start, reason: "its end is not where the decoder stopped")
            }
            let bytes = UncheckedSendable(raw)
            let version = state.version
            let (owner, fallback, complete) = (later.owner, later.fallback, later.pending?.complete)
            state.secondary = SecondaryIndexes(
                deferred: DeferredIndexes(
                    checking: { () throws(Malformed) -> ([IndexSection], Range<Int>) in
                        // `owner` keeps `bytes` alive as long as this closure is.
                        defer { withExtendedLifetime(owner) {} }
                        // The section's chunks, decompressed here rather than in the open.
                        try complete?()
                        var r = ByteReader(bytes.value, offset: start)
                        let sections = try section("secondary indexes", &r) { r in try skipIndexes(&r) }
                        guard r.isAtEnd else {
                            throw Malformed(section: "end", offset: r.offset, reason: "bytes after the last section")
                        }
                        return (sections, start..<r.offset)
                    },
                    fallback: { malformed throws(EngineError) in try fallback(version, malformed) },
                    stream: stream, chunks: chunks, atOnce: later.atOnce))
            return Loaded(state: state, segment: segment, offset: offset)
        }
        // The primary map is built as it is read, a leaf at a time (no copy of all its
        // keys and locations is held: the peak memory of an open). In a large stream
        // with the secondary indexes deferred, another thread finds where the primary
        // section ends and checks the secondary indexes meanwhile. The thread that
        // allocates the map (8 MB a million keys) should be the caller's: glibc grows a
        // worker thread's arena a page at a time, one `mprotect` each (3,000 calls, a
        // third of the time, when the map was built on a worker), and the checks
        // allocate little.
        // Version 3 puts the sets before the secondary indexes; versions 1 and 2 after them.
        let setsFirst = form == .leaves
        if let stream, raw.count >= 1 << 17 {
            let reader = UncheckedSendable(r)
            let checked = UncheckedSendable(
                ResultBox<Result<(Range<Int>, [IndexSection], ByteReader), Malformed>>())
            let group = DispatchGroup()
            DispatchQueue.global().async(group: group) {
                var r = reader.value
                checked.value.value = Result { () throws(Malformed) in
                    try section("primary index", &r) { r in try skipPrimary(&r, form) }
                    if setsFirst { try section("sets", &r) { r in try skipSets(&r) } }
                    let start = r.offset
                    let sections = try section("secondary indexes", &r) { r in try skipIndexes(&r) }
                    return (start..<r.offset, sections, r)
                }
            }
            // Joined on every path: the other thread reads the same bytes.
            defer { group.wait() }
            var mainReader = r
            state.primary = try section("primary index", &mainReader) { r in
                try decodePrimary(&r, form, &source)
            }
            if setsFirst { state.sets = try section("sets", &mainReader) { r in try decodeSets(&r) } }
            group.wait()
            let (range, sections, after) = try checked.value.value!.get()
            guard range.lowerBound == mainReader.offset else {
                throw Malformed(
                    section: setsFirst ? "sets" : "primary index", offset: mainReader.offset,
                    reason: "its end is not where the decoder stopped")
            }
            r = after
            state.secondary = SecondaryIndexes(
                deferred: DeferredIndexes(sections: sections, range: range, stream: stream, chunks: chunks))
        } else {
            state.primary = try section("primary index", &r) { r in try decodePrimary(&r, form, &source) }
            if setsFirst { state.sets = try section("sets", &r) { r in try decodeSets(&r) } }
            if let stream {
                let start = r.offset
                let sections = try section("secondary indexes", &r) { r in try skipIndexes(&r) }
                state.secondary = SecondaryIndexes(
                    deferred: DeferredIndexes(
                        sections: sections, range: start..<r.offset, stream: stream, chunks: chunks))
            } else {
                state.indexes = try section("secondary indexes", &r) { r in try decodeIndexes(&r) }
            }
        }
        if !setsFirst { state.sets = try section("sets", &r) { r in try decodeSets(&r) } }
        try requireEveryLeafNamed(source, at: r.offset)
        guard r.isAtEnd else {
            throw Malformed(section: "end", offset: r.offset, reason: "bytes after the last section")
        }
        return Loaded(state: state, segment: segment, offset: offset)
    }

    /// Throws unless the stream named every whole leaf the file holds.
    static func requireEveryLeafNamed(_ source: LeafSource?, at offset: Int) throws(Malformed) {
        guard let remaining = source?.remaining, remaining > 0 else { return }
        throw Malformed(
            section: "primary index", offset: offset,
            reason: "\(remaining) whole leaves in the file that the stream does not name")
    }

    /// Runs one section's decoder; any failure becomes a `Malformed` naming the section.
    static func section<T>(
        _ name: String, _ r: inout ByteReader,
        _ body: (inout ByteReader) throws -> T
    ) throws(Malformed) -> T {
        do { return try body(&r) } catch {
            throw Malformed(
                section: name, offset: r.offset, reason: error is ByteReader.OutOfBounds ? "out of bounds" : "\(error)")
        }
    }

    /// Version, journal position covered, byte counts.
    static func decodeHeader(_ r: inout ByteReader, into state: inout IndexState) throws -> (UInt64, Int) {
        state.version = try r.readLE(UInt64.self)
        let segment = try r.readLE(UInt64.self)
        let offset = try r.readLength(UInt64.self)
        state.liveBytes = try r.readLength(UInt64.self)
        state.totalBytes = try r.readLength(UInt64.self)
        // Sizes read from disk are not trusted: a version or byte count near the top of its
        // range would overflow at the first commit (a trap) instead of failing the checkpoint.
        guard state.version < 1 << 62 else { throw DecodeFailure("version \(state.version) is out of range") }
        guard state.totalBytes >= 0, state.totalBytes < 1 << 56, state.liveBytes >= 0, state.liveBytes < 1 << 56
        else {
            throw DecodeFailure("byte counts \(state.liveBytes) of \(state.totalBytes) are out of range")
        }
        return (segment, offset)
    }

    /// How much of a checkpoint's stream an open decodes first, hoping that the sections
    /// before the secondary indexes end within it.
    static let openPrefix = 64 << 10

    /// Where a version-3 stream's secondary-index section begins: the header, the primary
    /// section and the sets skipped over (nothing built). Throws `ByteReader.OutOfBounds`
    /// when they run past `raw`'s end, as they do in a prefix of the stream too short to hold
    /// them; over a prefix that holds them, gives what it gives over the whole stream (what it
    /// returns depends on no byte after that point).
    static func secondarySectionStart(_ raw: UnsafeRawBufferPointer) throws -> Int {
        var r = ByteReader(raw)
        var header = IndexState()
        _ = try decodeHeader(&r, into: &header)
        try skipPrimary(&r, .leaves)
        try skipSets(&r)
        return r.offset
    }

    /// Moves past the primary section without building anything.
    static func skipPrimary(_ r: inout ByteReader, _ form: PrimaryForm) throws {
        let spaces = try r.readLength(limit: 1 << 16)
        for _ in 0..<spaces {
            _ = try r.readLength(limit: 0xFFFF)
            var count = try r.readLength(limit: form.keyLimit(r))
            if form == .leaves {
                count -= try wholeLeafKeys(&r, limit: count)
            }
            guard count <= r.remaining / 2 else { throw DecodeFailure("\(count) keys cannot fit in what remains") }
            let base = r.buffer.baseAddress!
            let end = base + r.buffer.count
            var p = base + r.offset
            defer { r.offset = p - base }
            try skipVarints(2 * count, &p, end)
        }
    }

    /// Moves `p` past `count` varints, which end at their bytes below 0x80: counted eight
    /// bytes at a time. Only the end is found, not each varint checked (an overlong one is
    /// not rejected here): the primary section's decoder reads the same varints, each checked,
    /// and `decode` requires the two to end at the same offset.
    static func skipVarints(
        _ count: Int, _ p: inout UnsafeRawPointer, _ end: UnsafeRawPointer
    ) throws(ByteReader.OutOfBounds) {
        var left = count
        while left > 0 && end - p >= 8 {
            let ends = (~p.loadUnaligned(as: UInt64.self) & 0x8080_8080_8080_8080).nonzeroBitCount
            guard ends < left else { break }
            left -= ends
            p += 8
        }
        while left > 0 {
            guard p < end else { throw ByteReader.OutOfBounds() }
            if p.load(as: UInt8.self) < 0x80 { left -= 1 }
            p += 1
        }
    }

    /// Reads past a keyspace's whole-leaf list (version 3); returns how many keys they hold.
    static func wholeLeafKeys(_ r: inout ByteReader, limit: Int) throws -> Int {
        let whole = try r.readLength(limit: limit)
        // Through a pointer, each varint bounded: an open skips 156,000 pairs at ten million.
        let base = r.buffer.baseAddress!
        let end = base + r.buffer.count
        var p = base + r.offset
        var keys = 0
        for _ in 0..<whole {
            _ = try boundedVarint(&p, end)
            let n = try boundedVarint(&p, end)
            guard n <= UInt64(RadixMap<UInt64>.fanout) else { throw ByteReader.OutOfBounds() }
            keys += Int(n)
        }
        r.offset = p - base
        guard keys <= limit else { throw DecodeFailure("whole leaves hold more keys than the keyspace") }
        return keys
    }
}
