/// Where an operation lives: segment number · frame offset · offset in the frame's
/// uncompressed block. Packed into 64 bits in the primary index and in checkpoints, with the
/// field widths `JournalFormat` declares (`location*Bits`); this file is the one place that
/// packs and unpacks them.
struct Location: Hashable {
    var segment: UInt64
    var frameOffset: Int
    var blockOffset: Int

    private static var blockBits: UInt64 { UInt64(JournalFormat.locationBlockOffsetBits) }
    private static var frameBits: UInt64 { UInt64(JournalFormat.locationFrameOffsetBits) }
    private static var segmentShift: UInt64 { frameBits + blockBits }
    private static var frameMask: UInt64 { (1 << frameBits) - 1 }
    private static var blockMask: UInt64 { (1 << blockBits) - 1 }

    init(segment: UInt64, frameOffset: Int, blockOffset: Int) {
        self.segment = segment
        self.frameOffset = frameOffset
        self.blockOffset = blockOffset
    }

    init(packed: UInt64) {
        segment = packed >> Self.segmentShift
        frameOffset = Int((packed >> Self.blockBits) & Self.frameMask)
        blockOffset = Int(packed & Self.blockMask)
    }

    var packed: UInt64 {
        segment << Self.segmentShift | UInt64(frameOffset) << Self.blockBits | UInt64(blockOffset)
    }

    /// The frame's cache key: segment number in the high 32 bits, frame offset in the low 32.
    var frameKey: UInt64 { segment << 32 | UInt64(frameOffset) }
}
