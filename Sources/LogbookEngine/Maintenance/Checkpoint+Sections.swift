import Dispatch
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

// The sections of a checkpoint stream decoded: the primary index (whole leaves and keys),
// the secondary indexes (built from restart points in parallel) and the sets.
extension Checkpoint {
    /// Per keyspace: (version 3) the whole leaves, each put into the map where its slots lie
    /// (`source`); then keys (delta-coded ids) and their locations (zigzag deltas), put into
    /// the map a leaf at a time as they are read.
    static func decodePrimary(
        _ r: inout ByteReader, _ form: PrimaryForm, _ source: inout LeafSource?
    ) throws -> RadixMap<UInt64> {
        let spaces = try r.readLength(limit: 1 << 16)
        var primary = RadixMap<UInt64>()
        var seen = Set<UInt16>()
        for _ in 0..<spaces {
            let keyspace = UInt16(try r.readLength(limit: 0xFFFF))
            // A keyspace named twice would attach its leaves twice (a trap in the map): the
            // file is malformed, and the open falls back to the journal.
            guard seen.insert(keyspace).inserted else { throw DecodeFailure("keyspace \(keyspace) appears twice") }
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
    static func decodeIndexes(_ r: inout ByteReader) throws -> [UInt32: OrderedIndex] {
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
            /// Point `i` is at entry `i * seekInterval` (not stored: 24 bytes a point, not 32).
            struct Point: Sendable {
                var offset: Int
                var primaryKey: UInt64
                var keyEnd: Int
            }
            private(set) var points: [Point] = []
            private(set) var keys: [UInt8] = []

            var count: Int { points.count }
            /// The memory the points and their keys take.
            var estimatedBytes: Int { points.capacity * MemoryLayout<Point>.stride + keys.capacity }
            /// Point `i`: its entry, where its bytes begin, and the primary key before it.
            subscript(i: Int) -> (entry: Int, offset: Int, primaryKey: UInt64) {
                (i * Checkpoint.seekInterval, points[i].offset, points[i].primaryKey)
            }

            /// Room for `n` points, with keys of 8 bytes (a date, a number) or less.
            mutating func reserve(_ n: Int) {
                points.reserveCapacity(n)
                keys.reserveCapacity(8 * n)
            }

            mutating func append(entry: Int, offset: Int, key: UnsafeRawBufferPointer, primaryKey: UInt64) {
                precondition(entry == points.count * Checkpoint.seekInterval, "a point every seekInterval entries")
                keys.append(contentsOf: key)
                points.append(Point(offset: offset, primaryKey: primaryKey, keyEnd: keys.count))
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
    /// lookup decodes at most this many entries past a binary search (about half a
    /// microsecond). The points of an index of ten million entries take 3 MB (64 took 7.5).
    static let seekInterval = 128

    /// Moves past the secondary-index section, making every check `decodeIndexes` makes on
    /// what it reads, without building anything; returns the restart points of each index.
    static func skipIndexes(_ r: inout ByteReader) throws -> [IndexSection] {
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
    static func boundedVarint(
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
    static func decodeLeaves(
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
    static func checkedVarint(_ p: inout UnsafeRawPointer) -> UInt64 {
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
    static func copySuffix(
        _ bytes: UnsafeRawBufferPointer, into key: UnsafeMutableRawBufferPointer, at offset: Int
    ) {
        if bytes.count <= 16 {
            for j in 0..<bytes.count { key[offset + j] = bytes[j] }
        } else {
            key.baseAddress!.advanced(by: offset).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
        }
    }

    /// Per set keyspace: set ids (delta-coded) and their members (delta-coded).
    static func decodeSets(_ r: inout ByteReader) throws -> RadixMap<MemberSet> {
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
    static func skipSets(_ r: inout ByteReader) throws {
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
}
