#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A checkpoint file's bytes in memory of the process's own, read with `pread`: the primary
/// index's whole leaves are used where they lie (`RadixMap.attachLeaves`), each leaf keeping
/// the image alive.
///
/// In 4 KB pages, not huge pages: the open writes the header of every slot frame (one each
/// 256 KiB), and in 2 MiB pages those writes had the kernel zero the whole image inside the
/// open (80 MB at ten million objects: an open of 0.02 to 0.4 s by how fast the machine gave
/// new pages, 8 ms in 4 KB pages). The slot frames' pages are zeroed by the thread that reads
/// and checks them, after the open.
///
/// Not a mapping of the file: an I/O error on a page of a mapped file reaches the process as
/// `SIGBUS` wherever the page is next touched (the slot check's thread, any reader of a leaf),
/// which no code can recover from. Here a failed read is an error: at the open (the header and
/// every frame but the slot frames are read then), the open replays the journal instead (the
/// checkpoint is only a cache of it); in a slot frame (read by the first check of the frame,
/// `slotFrameReader()`, on whatever thread checks it), the frame is damaged, and its leaves
/// are mended from the journal as those of a frame whose checksum fails. The memory is
/// touched as the file is read, so the slot frames cost nothing until they are checked, as
/// the mapping's pages did.
///
/// Thread safety: the bytes are read by any thread (the checkpoint's frames, immutable once
/// read) and written only by the open (before the image is shared), by the first check of each
/// slot frame (one thread, which the frame's state in `Checkpoint.SlotCheck` lets in alone,
/// before any reader of its leaves goes on), and by the mending of whole leaves, under the slot
/// check's lock (`awaitSlots(_:)`); `slotCheck` is set before the image is shared.
final class FileImage: @unchecked Sendable {
    let bytes: UnsafeMutableRawBufferPointer
    private let storage: MappedBytes
    /// Kept open while the image lives: the slot frames are read when first checked (the file
    /// may have been removed by then; its descriptor still reads it).
    private let file: any StorageFile
    /// The check of the slot frames that an open left to finish after it returned: every read
    /// of a whole leaf waits for its frame's (`awaitSlots(_:)`). Set once, before any leaf of the image is
    /// handed out (`Checkpoint.SlotCheck.leave(_:to:)`), then only read.
    var slotCheck: Checkpoint.SlotCheck?

    /// `file` (`size` bytes): its header and frames read now, each slot frame's header and
    /// padding length but not the rest of its payload (`slotFrameReader()`). Where a frame header does not parse, the rest of
    /// the file is read as it is (the layout's checks then judge it).
    init(_ file: any StorageFile, size: Int) throws {
        storage = MappedBytes(count: max(size, 1), huge: false)  // see the type's comment
        bytes = UnsafeMutableRawBufferPointer(rebasing: storage.bytes[0..<size])
        self.file = file
        let header = JournalFormat.fileHeaderSize
        let frameHeader = JournalFormat.frameHeaderSize
        try read(0..<min(size, header))
        var position = header
        while position + frameHeader <= size {
            try read(position..<(position + frameHeader))
            guard
                case .frame(let frame) = Frame.parseHeader(
                    UnsafeRawBufferPointer(rebasing: bytes[position..<(position + frameHeader)]), at: position,
                    size: size)
            else { break }
            if frame.type != .checkpointSlots {
                try read(frame.payload)
            } else {
                // Its padding's length (the payload's first two bytes) too: the layout reads it.
                try read(frame.payload.lowerBound..<min(frame.payload.upperBound, frame.payload.lowerBound + 2))
            }
            position = frame.end
            if frame.type == .checkpointEnd { break }
        }
        if position < size { try read(position..<size) }
    }

    deinit {
        // No frame is checked or mended once the bytes are gone.
        slotCheck?.release()
        file.close()
    }

    /// Reads `range` of the file into the same range of the image (to the file's end).
    private func read(_ range: Range<Int>) throws { try Self.read(range, of: file, into: bytes) }

    private static func read(
        _ range: Range<Int>, of file: any StorageFile, into bytes: UnsafeMutableRawBufferPointer
    ) throws {
        var at = range.lowerBound
        while at < range.upperBound {
            let n = try file.read(into: UnsafeMutableRawBufferPointer(rebasing: bytes[at..<range.upperBound]), at: at)
            if n == 0 { return }
            at += n
        }
    }

    /// What reads the payload of the slot frame at a position (its header was read by
    /// `init`) into the image; false when the read fails (the frame is then damaged). It holds
    /// the file, not the image: the slot check calls it on its own thread, and the image's
    /// `deinit` waits for the frames that check has begun (`SlotCheck.release()`) before its
    /// bytes go (a reference to the image there made that thread free it, and wait for itself).
    func slotFrameReader() -> @Sendable (Int) -> Bool {
        let target = UncheckedSendable((file, bytes))
        return { position in
            let (file, bytes) = target.value
            let frameHeader = JournalFormat.frameHeaderSize
            guard position + frameHeader <= bytes.count,
                case .frame(let frame) = Frame.parseHeader(
                    UnsafeRawBufferPointer(rebasing: bytes[position..<(position + frameHeader)]), at: position,
                    size: bytes.count)
            else { return false }
            return (try? FileImage.read(frame.payload, of: file, into: bytes)) != nil
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
