#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The whole of a file in memory: a private mapping of it where the file system gives one, or
/// its bytes read into memory of the process's own. A checkpoint is opened through one, and the
/// primary index's leaves it keeps whole are used where they lie (`RadixMap.attachLeaves`), each
/// leaf keeping the image alive.
///
/// The mapping is private and writable: a leaf is copied to the heap before it is written
/// (the radix map's rules), so only the mending of damaged leaves from the journal
/// (`Checkpoint.SlotCheck`) writes here, into a private copy of the page, never the file. Checkpoint files are never changed once renamed into place, so a mapping
/// never sees its bytes change under it; a file removed while mapped (a later checkpoint's
/// clean-up) keeps its blocks until the last leaf that uses it is freed.
///
/// Thread safety: the bytes are read by any thread (the checkpoint's frames, immutable) and
/// written only by the mending of whole leaves, under the slot check's lock, before any
/// reader of a whole leaf goes on (`awaitSlots(_:)`); `slotCheck` is set before the image is
/// shared.
final class FileImage: @unchecked Sendable {
    let bytes: UnsafeMutableRawBufferPointer
    private let mapped: Bool
    /// The check of the slot frames that an open left to finish after it returned: every read
    /// of a whole leaf waits for its frame's (`awaitSlots(_:)`). Set once, before any leaf of the image is
    /// handed out (`Checkpoint.SlotCheck.leave(_:to:)`), then only read.
    var slotCheck: Checkpoint.SlotCheck?

    /// Maps `file` (`size` bytes), or reads it whole when it cannot be mapped.
    init(_ file: any StorageFile, size: Int) throws {
        if size > 0, let base = file.mapPrivately(size) {
            bytes = UnsafeMutableRawBufferPointer(start: base, count: size)
            mapped = true
            return
        }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: max(size, 1), alignment: 4096)
        var total = 0
        do {
            while total < size {
                let n = try file.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[total..<size]), at: total)
                if n == 0 { break }
                total += n
            }
        } catch {
            buffer.deallocate()
            throw error
        }
        bytes = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<total])
        mapped = false
    }

    deinit {
        // No frame is checked or mended once the mapping is gone.
        slotCheck?.release()
        if mapped {
            #if canImport(Glibc) || canImport(Darwin)
                munmap(bytes.baseAddress, bytes.count)
            #endif
        } else {
            bytes.deallocate()
        }
    }

    var raw: UnsafeRawBufferPointer { UnsafeRawBufferPointer(bytes) }

    /// Returns once the whole leaf whose slots are at `slots` in this image may be read: at
    /// once, unless the check of the slot frames that the open left running has not found its
    /// frame sound yet (then this thread checks it, or waits for the one checking it).
    @inline(__always)
    func awaitSlots(_ slots: UnsafeRawPointer) {
        if let slotCheck { slotCheck.awaitLeaf(at: slots - UnsafeRawPointer(bytes.baseAddress!)) }
    }
}
