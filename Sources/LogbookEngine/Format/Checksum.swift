import CLogbookSupport

/// CRC-32C (Castagnoli). Frames, file headers and the manifest are checked with it.
enum CRC32C {
    @inline(__always)
    static func checksum(_ buffer: UnsafeRawBufferPointer, seed: UInt32 = 0) -> UInt32 {
        guard let base = buffer.baseAddress else { return seed }
        return logbook_crc32c(seed, base, buffer.count)
    }

    static func checksum(_ bytes: [UInt8], seed: UInt32 = 0) -> UInt32 {
        bytes.withUnsafeBytes { checksum($0, seed: seed) }
    }
}
