import Dispatch
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Checkpoints: the indexes written out so that an open replays only the journal after them.
///
/// A checkpoint file is a 32-byte header (magic "LBKCKPT\0") followed by `checkpointData`
/// frames (LZ4-compressed chunks of one serialized stream, at most 1 MiB each before
/// compression) and a `checkpointEnd` frame (chunk count u32 · stream length u64). It is
/// written under a temporary name, synced, renamed, and only then named by a new manifest.
enum Checkpoint {
    static let chunkSize = 1 << 20

    static func fileName(_ number: UInt64) -> String {
        JournalFormat.checkpointPrefix + hex12(number) + JournalFormat.checkpointSuffix
    }

    struct Loaded {
        var state: IndexState
        /// The journal position the state covers: replay continues here.
        var segment: UInt64
        var offset: Int
    }

    // MARK: Stream

    /// Serializes the state: position and byte counts, then the primary index, the secondary
    /// indexes and the sets, each sorted and delta-encoded.
    static func encode(_ state: IndexState, segment: UInt64, offset: Int) -> [UInt8] {
        var stream: [UInt8] = []
        encode(state, segment: segment, offset: offset) { stream.append(contentsOf: $0) }
        return stream
    }

    /// Hands `chunk` every whole chunk `w` holds (all of it when `final`), keeping the rest.
    @inline(__always)
    private static func flushChunks(
        _ w: inout ByteWriter, chunkSize: Int, final: Bool, _ chunk: (UnsafeRawBufferPointer) -> Void
    ) {
        guard final || w.count >= chunkSize else { return }
        var start = 0
        w.withBytes { bytes in
            while bytes.count - start >= chunkSize || (final && start < bytes.count) {
                let end = min(bytes.count, start + chunkSize)
                chunk(UnsafeRawBufferPointer(rebasing: bytes[start..<end]))
                start = end
            }
        }
        w.removeFirst(start)
    }

    /// Serializes the state as `encode(_:segment:offset:)` does, handing the stream to `chunk`
    /// as it goes, in pieces of `chunkSize` bytes (the last one shorter; a file takes pieces
    /// of at most `Checkpoint.chunkSize`, the default): the whole stream is
    /// never in memory (12 MB for a million objects, at the end of the save that wrote them).
    /// Every key of the primary index is in the stream.
    static func encode(
        _ state: IndexState, segment: UInt64, offset: Int, chunkSize: Int = Checkpoint.chunkSize,
        chunk: (UnsafeRawBufferPointer) -> Void
    ) {
        encode(
            state, segment: segment, offset: offset, chunkSize: chunkSize, minimum: .max, leaf: { _ in }, chunk: chunk)
    }

    /// Serializes the state as `encode(_:segment:offset:chunkSize:chunk:)` does, except that
    /// each leaf of the primary index that holds at least `JournalFormat.wholeLeafMinimumKeys`
    /// keys is handed to `leaf` whole (its 64 slots) and only named in the stream: a checkpoint
    /// file of version 3.
    static func encode(
        _ state: IndexState, segment: UInt64, offset: Int, chunkSize: Int = Checkpoint.chunkSize,
        leaf: (UnsafePointer<UInt64>) -> Void, chunk: (UnsafeRawBufferPointer) -> Void
    ) {
        encode(
            state, segment: segment, offset: offset, chunkSize: chunkSize,
            minimum: JournalFormat.wholeLeafMinimumKeys, leaf: leaf, chunk: chunk)
    }

    private static func encode(
        _ state: IndexState, segment: UInt64, offset: Int, chunkSize: Int, minimum: Int,
        leaf leaves: (UnsafePointer<UInt64>) -> Void, chunk: (UnsafeRawBufferPointer) -> Void
    ) {
        var w = ByteWriter(capacity: chunkSize + 64 * 1024)
        // A local function would capture `w` in a box, with a dynamic exclusivity check on
        // every append (a third of the encode when it did): `flush` takes it `inout` instead.
        func flush(_ w: inout ByteWriter, final: Bool = false) {
            flushChunks(&w, chunkSize: chunkSize, final: final, chunk)
        }
        w.appendLE(state.version)
        w.appendLE(segment)
        w.appendLE(UInt64(offset))
        w.appendLE(UInt64(max(0, state.liveBytes)))
        w.appendLE(UInt64(max(0, state.totalBytes)))
        // Primary index, per keyspace: the whole leaves named (their slots go to `leaves`),
        // then the keys of the other leaves.
        let spaces = state.primary.keyspaces.sorted()
        w.appendVarint(spaces.count)
        for ks in spaces {
            w.appendVarint(UInt64(ks))
            w.appendVarint(state.primary.count(inKeyspace: ks))
            var whole = 0
            state.primary.forEachLeaf(inKeyspace: ks) { _, _, occupied in if occupied >= minimum { whole += 1 } }
            w.appendVarint(whole)
            var previousLeaf: UInt64 = 0
            state.primary.forEachLeaf(inKeyspace: ks) { number, slots, occupied in
                guard occupied >= minimum else { return }
                w.appendVarint(number - previousLeaf)
                w.appendVarint(occupied)
                previousLeaf = number
                leaves(slots)
                flush(&w)
            }
            var previousKey: UInt64 = 0
            var previousLocation: UInt64 = 0
            var first = true
            state.primary.forEachLeaf(inKeyspace: ks) { number, slots, occupied in
                guard occupied < minimum else { return }
                for i in 0..<RadixMap<UInt64>.fanout where slots[i] != 0 {
                    let id = number << 6 | UInt64(i)
                    let location = slots[i]
                    w.appendVarint(first ? id : id - previousKey)
                    w.appendVarint(zigzag(Int64(bitPattern: location &- previousLocation)))
                    previousKey = id
                    previousLocation = location
                    first = false
                }
                flush(&w)
            }
        }
        // Sets (before the secondary indexes: an open can stop where those begin).
        let setSpaces = state.sets.keyspaces.sorted()
        w.appendVarint(setSpaces.count)
        for ks in setSpaces {
            w.appendVarint(UInt64(ks))
            w.appendVarint(state.sets.count(inKeyspace: ks))
            var previousKey: UInt64 = 0
            var first = true
            state.sets.forEach(inKeyspace: ks) { key, set in
                let id = EngineKey(rawValue: key).id
                w.appendVarint(first ? id : id - previousKey)
                previousKey = id
                first = false
                let members = set.members
                w.appendVarint(members.count)
                var previous: UInt64 = 0
                for (i, m) in members.enumerated() {
                    w.appendVarint(i == 0 ? m : m - previous)
                    previous = m
                    if i & 0xFFF == 0xFFF { flush(&w) }
                }
                flush(&w)
                return true
            }
        }
        // Secondary indexes.
        let indexIDs = state.indexes.keys.sorted()
        w.appendVarint(indexIDs.count)
        for id in indexIDs {
            let index = state.indexes[id]!
            w.appendVarint(UInt64(id))
            w.appendVarint(index.count)
            var previous: [UInt8] = []
            var previousPK: UInt64 = 0
            index.forEach(from: nil, to: nil) { key, pk in
                var shared = 0
                let limit = min(previous.count, key.count)
                while shared < limit && previous[shared] == key[shared] { shared += 1 }
                w.appendVarint(shared)
                w.appendVarint(key.count - shared)
                w.append(UnsafeRawBufferPointer(rebasing: key[shared...]))
                w.appendVarint(zigzag(Int64(bitPattern: pk &- previousPK)))
                previous.removeAll(keepingCapacity: true)
                previous.append(contentsOf: key)
                previousPK = pk
                flush(&w)
                return true
            }
        }
        flush(&w, final: true)
    }

    /// A checkpoint stream that does not decode: which section, and where in the
    /// (uncompressed) stream the reader was when it gave up.
    struct Malformed: Error, CustomStringConvertible {
        var section: String
        var offset: Int
        var reason: String
        var description: String { "\(section) section malformed at stream offset \(offset): \(reason)" }
    }

    /// A result written by one thread and read after it joined (sent as `UncheckedSendable`).
    final class ResultBox<T> {
        var value: T?
    }

    /// Decodes a checkpoint stream, section by section: header, primary index (built into
    /// its map on another thread while the rest is read), secondary indexes, sets.
    ///
    /// With `stream`, the secondary indexes are only checked here and built on first use
    /// (`SecondaryIndexes`), from the stream that `stream` gives again then: it is passed the
    /// range of the secondary-index section, and needs to give only those bytes of the
    /// stream (the rest of the array it returns is never read).
    static func decode(_ bytes: [UInt8], stream: (@Sendable (Range<Int>) -> [UInt8])? = nil) throws(Malformed) -> Loaded
    {
        let decoded: Result<Loaded, Malformed> = bytes.withUnsafeBytes { raw in
            Result { () throws(Malformed) -> Loaded in try decode(raw, stream: stream) }
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
        stream: (@Sendable (Range<Int>) -> [UInt8])? = nil,
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
                    stream: stream, atOnce: later.atOnce))
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
                deferred: DeferredIndexes(sections: sections, range: range, stream: stream))
        } else {
            state.primary = try section("primary index", &r) { r in try decodePrimary(&r, form, &source) }
            if setsFirst { state.sets = try section("sets", &r) { r in try decodeSets(&r) } }
            if let stream {
                let start = r.offset
                let sections = try section("secondary indexes", &r) { r in try skipIndexes(&r) }
                state.secondary = SecondaryIndexes(
                    deferred: DeferredIndexes(sections: sections, range: start..<r.offset, stream: stream))
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
    private static func requireEveryLeafNamed(_ source: LeafSource?, at offset: Int) throws(Malformed) {
        guard let remaining = source?.remaining, remaining > 0 else { return }
        throw Malformed(
            section: "primary index", offset: offset,
            reason: "\(remaining) whole leaves in the file that the stream does not name")
    }

    /// Runs one section's decoder; any failure becomes a `Malformed` naming the section.
    private static func section<T>(
        _ name: String, _ r: inout ByteReader,
        _ body: (inout ByteReader) throws -> T
    ) throws(Malformed) -> T {
        do { return try body(&r) } catch {
            throw Malformed(
                section: name, offset: r.offset, reason: error is ByteReader.OutOfBounds ? "out of bounds" : "\(error)")
        }
    }

    /// Version, journal position covered, byte counts.
    private static func decodeHeader(_ r: inout ByteReader, into state: inout IndexState) throws -> (UInt64, Int) {
        state.version = try r.readLE(UInt64.self)
        let segment = try r.readLE(UInt64.self)
        let offset = try r.readLength(UInt64.self)
        state.liveBytes = try r.readLength(UInt64.self)
        state.totalBytes = try r.readLength(UInt64.self)
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
    private static func secondarySectionStart(_ raw: UnsafeRawBufferPointer) throws -> Int {
        var r = ByteReader(raw)
        var header = IndexState()
        _ = try decodeHeader(&r, into: &header)
        try skipPrimary(&r, .leaves)
        try skipSets(&r)
        return r.offset
    }

    /// Moves past the primary section without building anything.
    private static func skipPrimary(_ r: inout ByteReader, _ form: PrimaryForm) throws {
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
    private static func skipVarints(
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
    private static func wholeLeafKeys(_ r: inout ByteReader, limit: Int) throws -> Int {
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

    /// Per keyspace: (version 3) the whole leaves, each put into the map where its slots lie
    /// (`source`); then keys (delta-coded ids) and their locations (zigzag deltas), put into
    /// the map a leaf at a time as they are read.
    private static func decodePrimary(
        _ r: inout ByteReader, _ form: PrimaryForm, _ source: inout LeafSource?
    ) throws -> RadixMap<UInt64> {
        let spaces = try r.readLength(limit: 1 << 16)
        var primary = RadixMap<UInt64>()
        for _ in 0..<spaces {
            let keyspace = UInt16(try r.readLength(limit: 0xFFFF))
            var count = try r.readLength(limit: form.keyLimit(r))
            // The whole leaves, ascending; a key in the stream must not fall into one of them.
            var wholeLeaves: [UInt64] = []
            if form == .leaves {
                let whole = try r.readLength(limit: count)
                if whole > 0 {
                    guard var leaves = source, leaves.remaining >= whole else {
                        throw DecodeFailure("a whole leaf that the file does not hold")
                    }
                    defer { source = leaves }
                    // The leaves' numbers and key counts first, in a loop of their own; then
                    // the leaves are attached in one call (no closure call a leaf, no append).
                    // Read through a pointer, each varint bounded (as the sparse keys below).
                    let base = r.buffer.baseAddress!
                    let end = base + r.buffer.count
                    var p = base + r.offset
                    var counts = [UInt8](repeating: 0, count: whole)
                    wholeLeaves = try counts.withUnsafeMutableBufferPointer { counts in
                        try [UInt64](unsafeUninitializedCapacity: whole) { numbers, made in
                            var number: UInt64 = 0
                            for k in 0..<whole {
                                let delta = try boundedVarint(&p, end)
                                guard k == 0 || delta > 0 else { throw DecodeFailure("whole leaves out of order") }
                                number = number &+ delta
                                guard number <= EngineKey.maxID >> 6 else {
                                    throw DecodeFailure("leaf \(number) exceeds 48 bits")
                                }
                                let occupied = try boundedVarint(&p, end)
                                guard occupied > 0, occupied <= UInt64(RadixMap<UInt64>.fanout), occupied <= count
                                else {
                                    throw DecodeFailure("a whole leaf of \(occupied) keys")
                                }
                                count -= Int(occupied)
                                numbers[k] = number
                                counts[k] = UInt8(occupied)
                                made = k + 1
                            }
                        }
                    }
                    r.offset = p - base
                    primary.attachLeaves(keyspace: keyspace, owner: leaves.image, numbers: wholeLeaves, counts: counts)
                    {
                        leaves.next()!
                    }
                    leaves.log?.keyspaces.append((keyspace, wholeLeaves, counts))
                }
            }
            // Each entry takes at least two bytes: a count past that is malformed.
            guard count <= r.remaining / 2 else { throw DecodeFailure("\(count) keys cannot fit in what remains") }
            let base = r.buffer.baseAddress!
            let end = base + r.buffer.count
            var p = base + r.offset
            var id: UInt64 = 0
            var location: UInt64 = 0
            var nextWhole = 0
            try primary.fillAscending(count, keyspace: keyspace) { i in
                let delta = try boundedVarint(&p, end)
                // Ids are strictly ascending: every delta after the first is positive.
                guard i == 0 || delta > 0 else { throw DecodeFailure("ids out of order") }
                id = id &+ delta
                location = location &+ UInt64(bitPattern: unzigzag(try boundedVarint(&p, end)))
                guard id <= EngineKey.maxID else { throw DecodeFailure("id \(id) exceeds 48 bits") }
                guard location != 0 else { throw DecodeFailure("a key without a location") }
                while nextWhole < wholeLeaves.count && wholeLeaves[nextWhole] < id >> 6 { nextWhole += 1 }
                guard nextWhole == wholeLeaves.count || wholeLeaves[nextWhole] != id >> 6 else {
                    throw DecodeFailure("id \(id) falls in a whole leaf")
                }
                return (id, location)
            }
            r.offset = p - base
        }
        return primary
    }

    /// Per index: entries in key order, each key prefix-compressed against the one before.
    private static func decodeIndexes(_ r: inout ByteReader) throws -> [UInt32: OrderedIndex] {
        var indexes: [UInt32: OrderedIndex] = [:]
        let indexCount = try r.readLength(limit: 1 << 20)
        for _ in 0..<indexCount {
            let id = UInt32(try r.readLength(limit: Int(UInt32.max)))
            let count = try r.readLength(limit: r.remaining)
            var builder = OrderedIndex.Builder()
            var primaryKey: UInt64 = 0
            // The current key, rebuilt in place from its shared prefix and new suffix.
            try withUnsafeTemporaryAllocation(byteCount: 2 * JournalFormat.maxIndexKeyLength, alignment: 8) { key in
                var length = 0
                for _ in 0..<count {
                    let shared = try r.readLength(limit: length)
                    let suffix = try r.readLength(limit: JournalFormat.maxIndexKeyLength - shared)
                    let bytes = try r.readBytes(suffix)
                    copySuffix(bytes, into: key, at: shared)
                    length = shared + suffix
                    primaryKey = primaryKey &+ UInt64(bitPattern: unzigzag(try r.readVarint()))
                    builder.append(UnsafeRawBufferPointer(rebasing: key[0..<length]), primaryKey)
                }
            }
            indexes[id] = builder.build()
        }
        return indexes
    }

    /// Entries between two restart points of a deferred index build (a multiple of a leaf's
    /// capacity, so that every leaf but the last is full, as the sequential build makes them).
    static let restartInterval = 256 * OrderedIndex.leafCapacity

    /// One index of a checked secondary-index section, and where a build can start decoding
    /// it: every `restartInterval` entries, the stream offset there and the state the
    /// delta coding has reached (the full key and the primary key of the entry before).
    struct IndexSection: Sendable {
        struct Restart: Sendable {
            var entry: Int
            var offset: Int
            var key: [UInt8]
            var primaryKey: UInt64
        }
        /// Points every `seekInterval` entries, their keys in one buffer: one allocation for
        /// all of them (an array a point was 156,000 allocations at ten million entries, a
        /// third of the time the open's check of the section took).
        struct Seeks: Sendable {
            struct Point: Sendable {
                var entry: Int
                var offset: Int
                var primaryKey: UInt64
                var keyEnd: Int
            }
            private(set) var points: [Point] = []
            private(set) var keys: [UInt8] = []

            var count: Int { points.count }
            subscript(i: Int) -> Point { points[i] }

            /// Room for `n` points, with keys of 8 bytes (a date, a number) or less.
            mutating func reserve(_ n: Int) {
                points.reserveCapacity(n)
                keys.reserveCapacity(8 * n)
            }

            mutating func append(entry: Int, offset: Int, key: UnsafeRawBufferPointer, primaryKey: UInt64) {
                keys.append(contentsOf: key)
                points.append(Point(entry: entry, offset: offset, primaryKey: primaryKey, keyEnd: keys.count))
            }

            /// Calls `body` with point `i`'s key.
            func withKey<R>(_ i: Int, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
                let start = i == 0 ? 0 : points[i - 1].keyEnd
                return try keys.withUnsafeBytes {
                    try body(UnsafeRawBufferPointer(rebasing: $0[start..<points[i].keyEnd]))
                }
            }
        }
        var id: UInt32
        var count: Int
        var restarts: [Restart]
        /// A finer set of the same points, every `seekInterval` entries (the restarts among
        /// them): where a read in place (`EncodedIndex`) starts decoding.
        var seeks = Seeks()
    }

    /// Entries between two points where a read in place of a deferred index can start: a
    /// lookup decodes at most this many entries past a binary search.
    static let seekInterval = 64

    /// Moves past the secondary-index section, making every check `decodeIndexes` makes on
    /// what it reads, without building anything; returns the restart points of each index.
    private static func skipIndexes(_ r: inout ByteReader) throws -> [IndexSection] {
        var sections: [IndexSection] = []
        let indexCount = try r.readLength(limit: 1 << 20)
        let maxKey = JournalFormat.maxIndexKeyLength
        try withUnsafeTemporaryAllocation(byteCount: 2 * maxKey, alignment: 8) { keyBuffer in
            let key = keyBuffer.baseAddress!
            for _ in 0..<indexCount {
                let id = UInt32(try r.readLength(limit: Int(UInt32.max)))
                let count = try r.readLength(limit: r.remaining)
                // Each entry takes at least three bytes: a count past that is malformed.
                guard count <= r.remaining / 3 else {
                    throw DecodeFailure("\(count) entries cannot fit in what remains")
                }
                var section = IndexSection(id: id, count: count, restarts: [])
                section.seeks.reserve(count / seekInterval + 1)
                section.restarts.reserveCapacity(count / restartInterval + 1)
                var length = 0
                var primaryKey: UInt64 = 0
                // Read through a pointer, every bound checked against `end`.
                let base = r.buffer.baseAddress!
                let end = base + r.buffer.count
                var p = base + r.offset
                for i in 0..<count {
                    if i % seekInterval == 0 {
                        let bytes = UnsafeRawBufferPointer(start: key, count: length)
                        section.seeks.append(entry: i, offset: p - base, key: bytes, primaryKey: primaryKey)
                        if i % restartInterval == 0 {
                            section.restarts.append(
                                IndexSection.Restart(
                                    entry: i, offset: p - base, key: Array(bytes), primaryKey: primaryKey))
                        }
                    }
                    let shared = try boundedVarint(&p, end)
                    guard shared <= UInt64(length) else { throw ByteReader.OutOfBounds() }
                    let suffix = try boundedVarint(&p, end)
                    guard suffix <= UInt64(maxKey) - shared, Int(suffix) <= end - p else {
                        throw ByteReader.OutOfBounds()
                    }
                    let n = Int(suffix)
                    let at = key + Int(shared)
                    if n <= 8 && end - p >= 8 {
                        // One 8-byte move (the key buffer has room past the longest key; the
                        // bytes past the suffix are not part of the key), where a byte loop's
                        // stores were a fifth of the check.
                        at.storeBytes(of: p.loadUnaligned(as: UInt64.self), as: UInt64.self)
                    } else if n <= 16 {
                        for j in 0..<n {
                            at.storeBytes(
                                of: p.load(fromByteOffset: j, as: UInt8.self), toByteOffset: j, as: UInt8.self)
                        }
                    } else {
                        at.copyMemory(from: p, byteCount: n)
                    }
                    p += n
                    length = Int(shared) + n
                    primaryKey = primaryKey &+ UInt64(bitPattern: unzigzag(try boundedVarint(&p, end)))
                }
                r.offset = p - base
                sections.append(section)
            }
        }
        return sections
    }

    /// A varint at `p`, read only below `end`: the same checks as `ByteReader.readVarint`.
    @inline(__always)
    private static func boundedVarint(
        _ p: inout UnsafeRawPointer, _ end: UnsafeRawPointer
    ) throws(ByteReader.OutOfBounds) -> UInt64 {
        guard p < end else { throw ByteReader.OutOfBounds() }
        let first = p.load(as: UInt8.self)
        p += 1
        if first < 0x80 { return UInt64(first) }
        var result = UInt64(first & 0x7F)
        var shift: UInt64 = 7
        while true {
            guard p < end else { throw ByteReader.OutOfBounds() }
            let byte = p.load(as: UInt8.self)
            p += 1
            if shift == 63 && byte > 1 { throw ByteReader.OutOfBounds() }
            result |= UInt64(byte & 0x7F) << shift
            if byte < 0x80 { return result }
            shift += 7
            if shift > 63 { throw ByteReader.OutOfBounds() }
        }
    }

    /// Builds the indexes of a section `skipIndexes` checked, each from its restart points
    /// in parallel (the leaves of each run on a worker, the tree over them after), or on
    /// this thread alone when not `parallel` (a build in the background, which leaves the
    /// other cores to the work in the foreground).
    static func buildIndexes(
        _ raw: UnsafeRawBufferPointer, _ sections: [IndexSection], parallel: Bool = true
    ) -> [UInt32: OrderedIndex] {
        var indexes: [UInt32: OrderedIndex] = [:]
        // (An index of no entries is kept too, as `decodeIndexes` keeps it.)
        for section in sections {
            let runs = section.restarts.count
            // Each worker fills only its own box; all are read after `concurrentPerform` joins.
            let boxes = UncheckedSendable((0..<runs).map { _ in ResultBox<[OrderedIndex.Node]>() })
            let stream = UncheckedSendable(raw)
            let decodeRun: @Sendable (Int) -> Void = { k in
                let restart = section.restarts[k]
                let end = k + 1 < runs ? section.restarts[k + 1].entry : section.count
                boxes.value[k].value = decodeLeaves(stream.value, restart, entries: end - restart.entry)
            }
            if parallel {
                DispatchQueue.concurrentPerform(iterations: runs, execute: decodeRun)
            } else {
                for k in 0..<runs { decodeRun(k) }
            }
            var builder = OrderedIndex.Builder()
            for box in boxes.value { for leaf in box.value! { builder.append(leaf: leaf) } }
            indexes[section.id] = builder.build()
        }
        return indexes
    }

    /// The leaves of `entries` entries from `restart`, each full but the last.
    ///
    /// Each key's first eight bytes are kept packed in a register, updated from the shared
    /// length and the new suffix, rather than loaded back from the key buffer the suffix was
    /// just written to (a wide load over narrow stores stalls on store forwarding).
    private static func decodeLeaves(
        _ raw: UnsafeRawBufferPointer, _ restart: IndexSection.Restart, entries: Int
    ) -> [OrderedIndex.Node] {
        // `skipIndexes` checked every read below at open, on these same bytes: they are read
        // here without bounds checks.
        var p = raw.baseAddress! + restart.offset
        // Past this point an 8-byte load from `p` could read beyond the buffer.
        let wideEnd = raw.baseAddress! + max(0, raw.count - 8)
        var filler = OrderedIndex.LeafFiller(expectedEntries: entries)
        var primaryKey = restart.primaryKey
        // (A heap buffer, not a closure's temporary one: the loop's state stays in registers.)
        let key = UnsafeMutableRawPointer.allocate(byteCount: 2 * JournalFormat.maxIndexKeyLength + 8, alignment: 8)
        defer { key.deallocate() }
        restart.key.withUnsafeBytes { if let b = $0.baseAddress { key.copyMemory(from: b, byteCount: $0.count) } }
        var prefix = restart.key.withUnsafeBytes { IndexKeyProbe($0).prefix }
        do {
            for _ in 0..<entries {
                let shared = Int(truncatingIfNeeded: checkedVarint(&p))
                let suffix = Int(truncatingIfNeeded: checkedVarint(&p))
                let bytes = p
                p += suffix
                let length = shared &+ suffix
                if bytes <= wideEnd {
                    let next = bytes.loadUnaligned(as: UInt64.self)
                    if suffix <= 8 {
                        // One store (bytes past the suffix are overwritten by later keys).
                        (key + shared).storeBytes(of: next, as: UInt64.self)
                    } else {
                        (key + shared).copyMemory(from: bytes, byteCount: suffix)
                    }
                    if shared < 8 {
                        // The `shared` leading bytes, then the suffix's, then zeros.
                        let kept = UInt64(truncatingIfNeeded: shared &* 8)
                        var word = (prefix & ~(UInt64.max &>> kept)) | (UInt64(bigEndian: next) &>> kept)
                        if length < 8 { word &= ~(UInt64.max &>> UInt64(truncatingIfNeeded: length &* 8)) }
                        prefix = word
                    }
                } else {
                    // The last few bytes of the buffer: byte by byte.
                    (key + shared).copyMemory(from: bytes, byteCount: suffix)
                    if shared < 8 {
                        var word = shared == 0 ? 0 : prefix & ~(UInt64.max >> UInt64(8 * shared))
                        for j in 0..<min(suffix, 8 - shared) {
                            word |=
                                UInt64(bytes.load(fromByteOffset: j, as: UInt8.self)) << UInt64(56 - 8 * (shared + j))
                        }
                        prefix = word
                    }
                }
                primaryKey = primaryKey &+ UInt64(bitPattern: unzigzag(checkedVarint(&p)))
                filler.append(prefix: prefix, length: length, tail: key + 8, primaryKey)
            }
        }
        return filler.finish()
    }

    /// A varint at `p`, which `skipIndexes` read before (so it ends, within the buffer).
    @inline(always)
    private static func checkedVarint(_ p: inout UnsafeRawPointer) -> UInt64 {
        var byte = p.load(as: UInt8.self)
        p += 1
        if byte < 0x80 { return UInt64(byte) }
        var value = UInt64(byte & 0x7F)
        var shift: UInt64 = 7
        repeat {
            byte = p.load(as: UInt8.self)
            p += 1
            value |= UInt64(byte & 0x7F) << (shift & 63)
            shift += 7
        } while byte >= 0x80
        return value
    }

    /// Puts a key's new suffix after the prefix it shares with the key before. Suffixes are
    /// mostly a few bytes (an index's keys share most of theirs): a loop, where a call to
    /// `memmove` for each of a million entries cost more than the copies.
    @inline(__always)
    private static func copySuffix(
        _ bytes: UnsafeRawBufferPointer, into key: UnsafeMutableRawBufferPointer, at offset: Int
    ) {
        if bytes.count <= 16 {
            for j in 0..<bytes.count { key[offset + j] = bytes[j] }
        } else {
            key.baseAddress!.advanced(by: offset).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
        }
    }

    /// Per set keyspace: set ids (delta-coded) and their members (delta-coded).
    private static func decodeSets(_ r: inout ByteReader) throws -> RadixMap<MemberSet> {
        var sets = RadixMap<MemberSet>()
        let setSpaces = try r.readLength(limit: 1 << 16)
        for _ in 0..<setSpaces {
            let keyspace = UInt16(try r.readLength(limit: 0xFFFF))
            let count = try r.readLength(limit: r.remaining)
            var id: UInt64 = 0
            for i in 0..<count {
                let delta = try r.readVarint()
                id = i == 0 ? delta : id &+ delta
                guard id <= EngineKey.maxID else { throw DecodeFailure("set id \(id) exceeds 48 bits") }
                let n = try r.readLength(limit: r.remaining)
                var members: [UInt64] = []
                members.reserveCapacity(n)
                var member: UInt64 = 0
                for j in 0..<n {
                    let v = try r.readVarint()
                    member = j == 0 ? v : member &+ v
                    members.append(member)
                }
                sets.modify(EngineKey(keyspace: keyspace, id: id).rawValue) { $0.replace(sorted: members) }
            }
        }
        return sets
    }

    /// Moves past the sets section without building anything: every count bounded as
    /// `decodeSets` bounds it, the members' varints counted eight bytes at a time (the
    /// decoder reads the same bytes, each checked, and `decode` requires the two to end at
    /// the same offset).
    private static func skipSets(_ r: inout ByteReader) throws {
        let setSpaces = try r.readLength(limit: 1 << 16)
        for _ in 0..<setSpaces {
            _ = try r.readLength(limit: 0xFFFF)
            let count = try r.readLength(limit: r.remaining)
            for _ in 0..<count {
                _ = try r.readVarint()
                let n = try r.readLength(limit: r.remaining)
                let base = r.buffer.baseAddress!
                var p = base + r.offset
                defer { r.offset = p - base }
                try skipVarints(n, &p, base + r.buffer.count)
            }
        }
    }

    /// A reason a section does not decode (wrapped into `Malformed` with its offset).
    struct DecodeFailure: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }

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
    static func write(
        number: UInt64, directory: String, fileSystem fs: any FileSystem,
        stream produce: (_ chunk: (UnsafeRawBufferPointer) -> Void, _ leaf: (UnsafePointer<UInt64>) -> Void) -> Void
    ) throws {
        let final = joinPath(directory, fileName(number))
        let tmp = final + JournalFormat.temporarySuffix
        try? fs.removeFile(tmp)
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
        try fs.rename(tmp, to: final)
        try fs.syncDirectory(directory)
    }

    /// Reads and checks a checkpoint file.
    ///
    /// The file is mapped (`FileImage`): the primary index's whole leaves are used where they
    /// lie, and the compressed frames are kept for the secondary indexes, which are built from
    /// them on first use.
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
        defer { handle.close() }
        let image = try FileImage(handle, size: try handle.size())
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
    private static func stream(_ image: FileImage, path: String, number: UInt64, only: Range<Int>? = nil) throws
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
    private static func layout(
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
    private static func decompress(
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

extension Store {
    /// Writes a checkpoint of the indexes now, so that the next open replays only what follows.
    public func checkpoint() throws {
        if isReadOnly { throw EngineError(.readOnly, "the store was opened read-only", path: directory) }
        try maintenance.withLock { _ in try writeCheckpoint() }
    }

    /// Caller holds `maintenance`.
    func writeCheckpoint() throws {
        let captured = try writer.withLock { writerState -> (IndexState, UInt64, Int, UInt64)? in
            try writerState.checkWritable()
            if writerState.manifest.checkpoint != 0 && writerState.checkpointVersion == writerState.working.version {
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
            return (writerState.working, active.number, writerState.appendOffset, number)
        }
        guard let (state, segment, offset, number) = captured else { return }
        // Indexes or leaves that could not be had are not written out (the journal still has
        // them).
        try state.checkLoaded()
        try Checkpoint.write(number: number, directory: directory, fileSystem: fileSystem) { chunk, leaf in
            Checkpoint.encode(state, segment: segment, offset: offset, leaf: leaf, chunk: chunk)
        }
        try writer.withLock { writerState in
            try writerState.checkWritable()
            var manifest = writerState.manifest
            let old = manifest.checkpoint
            manifest.checkpoint = number
            manifest.generation += 1
            do { try writeManifest(manifest) } catch {
                writerState.recordFailure(error)
                throw error
            }
            writerState.manifest = manifest
            writerState.checkpointVersion = state.version
            writerState.bytesSinceCheckpoint = max(0, writerState.appendOffset - offset)
            if old != 0 { try? fileSystem.removeFile(path(Checkpoint.fileName(old))) }
        }
    }
}
