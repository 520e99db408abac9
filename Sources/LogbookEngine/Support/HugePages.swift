#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Anonymous mappings aligned to 2 MiB and advised `MADV_HUGEPAGE` (Linux): memory that a
/// large load fills at once, where the kernel may back each 2 MiB with one page instead of
/// faulting in 512 (with transparent huge pages `always` or `madvise`, the usual settings;
/// otherwise the mapping works the same, a page at a time). Elsewhere there are none.
enum HugePages {
    static var size: Int { 2 << 20 }

    /// `length` bytes (rounded up to 2 MiB), zeroed, or nil if the system gives no mapping.
    static func map(_ length: Int) -> UnsafeMutableRawPointer? {
        #if os(Linux)
            let size = (length + Self.size - 1) & ~(Self.size - 1)
            // 2 MiB more, so that an aligned run of `size` bytes lies inside; the rest is
            // given back at once.
            guard let raw = mmap(nil, size + Self.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0),
                raw != MAP_FAILED
            else { return nil }
            let address = UInt(bitPattern: raw)
            let aligned = (address + UInt(Self.size) - 1) & ~(UInt(Self.size) - 1)
            let head = Int(aligned - address)
            if head > 0 { munmap(raw, head) }
            let tail = Self.size - head
            if tail > 0 { munmap(UnsafeMutableRawPointer(bitPattern: aligned + UInt(size))!, tail) }
            let base = UnsafeMutableRawPointer(bitPattern: aligned)!
            // Advice only: refused, the mapping is ordinary memory.
            _ = madvise(base, size, MADV_HUGEPAGE)
            return base
        #else
            return nil
        #endif
    }

    /// Gives back a mapping `map(length)` returned.
    static func unmap(_ base: UnsafeMutableRawPointer, _ length: Int) {
        #if os(Linux)
            munmap(base, (length + Self.size - 1) & ~(Self.size - 1))
        #endif
    }
}

/// Bytes in one `HugePages` mapping (or on the heap where there is none, or when not asked
/// for), freed with this object: a large buffer filled once and read (a checkpoint's
/// decompressed stream; an open's is on the heap, `huge: false`: see `Checkpoint.read`).
final class MappedBytes: @unchecked Sendable {
    let bytes: UnsafeMutableRawBufferPointer
    private let mapped: Bool

    /// `count` bytes, in a `HugePages` mapping when `huge` and there are 2 MiB or more.
    init(count: Int, huge: Bool = true) {
        if huge && count >= HugePages.size, let base = HugePages.map(count) {
            bytes = UnsafeMutableRawBufferPointer(start: base, count: count)
            mapped = true
        } else {
            bytes = .allocate(byteCount: max(count, 1), alignment: 16)
            mapped = false
        }
    }

    deinit {
        if mapped { HugePages.unmap(bytes.baseAddress!, bytes.count) } else { bytes.deallocate() }
    }
}

/// One 2 MiB `HugePages` mapping whose bytes a bulk load hands out as the slot arrays of many
/// `RadixMap` leaves; unmapped when the last leaf holding a part of it is freed (each such
/// leaf keeps its chunk alive). Loading a primary index of ten million keys (80 MB of slots)
/// so takes some 40 page faults rather than 20,000.
///
/// Thread safety: `used` is advanced only by the one load that made the chunk, before any leaf
/// carved from it is shared; after that the chunk is immutable (its bytes belong to the
/// leaves, which the radix map's own rules guard), and it is released from any thread.
final class SlotChunk: @unchecked Sendable {
    static var size: Int { HugePages.size }

    let base: UnsafeMutableRawPointer
    private(set) var used = 0

    /// A new chunk, or nil if the system has no mapping to give (the caller then allocates
    /// each leaf on the heap, as it does without chunks).
    init?() {
        guard let base = HugePages.map(Self.size) else { return nil }
        self.base = base
    }

    deinit { HugePages.unmap(base, Self.size) }

    /// The next `bytes` bytes (aligned to 8), or nil if the chunk has no room for them.
    func carve(_ bytes: Int) -> UnsafeMutableRawPointer? {
        let length = (bytes + 7) & ~7
        guard used + length <= Self.size else { return nil }
        defer { used += length }
        return base + used
    }
}

/// The chunks of one bulk load, a new one taken when the current one is full.
final class SlotArena {
    private var current: SlotChunk?
    /// False once the system refused a chunk: the rest of the load allocates on the heap.
    private var available = true

    /// Storage for `bytes` bytes and the chunk that holds it, or nil to allocate on the heap.
    func carve(_ bytes: Int) -> (UnsafeMutableRawPointer, SlotChunk)? {
        guard available, bytes <= SlotChunk.size else { return nil }
        if let chunk = current, let p = chunk.carve(bytes) { return (p, chunk) }
        guard let chunk = SlotChunk(), let p = chunk.carve(bytes) else {
            available = false
            return nil
        }
        current = chunk
        return (p, chunk)
    }
}
