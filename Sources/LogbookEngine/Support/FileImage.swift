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
/// The mapping is private and writable: a leaf written after the open (only ever through a
/// uniquely referenced leaf, by the radix map's rules) changes a private copy of its page,
/// never the file. Checkpoint files are never changed once renamed into place, so a mapping
/// never sees its bytes change under it; a file removed while mapped (a later checkpoint's
/// clean-up) keeps its blocks until the last leaf that uses it is freed.
///
/// Thread safety: the bytes are read by any thread (the checkpoint's frames, immutable) and
/// written only in the slots of leaves, each of which belongs to one map path at a time.
final class FileImage: @unchecked Sendable {
    let bytes: UnsafeMutableRawBufferPointer
    private let mapped: Bool

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
        if mapped {
            #if canImport(Glibc) || canImport(Darwin)
                munmap(bytes.baseAddress, bytes.count)
            #endif
        } else {
            bytes.deallocate()
        }
    }

    var raw: UnsafeRawBufferPointer { UnsafeRawBufferPointer(bytes) }
}
