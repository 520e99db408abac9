import CLZ4

/// LZ4 block compression through the system's liblz4.
enum LZ4 {
    /// Compresses `source`, appending `uncompressedLength u32 · block` to `output`.
    /// Returns false (and leaves `output` unchanged) when compression does not save space.
    ///
    /// The block is compressed into scratch memory (the compression bound, never zeroed) and
    /// appended at its size: `output` grows by exactly what it holds.
    static func compress(_ source: UnsafeRawBufferPointer, appendingTo output: inout [UInt8]) -> Bool {
        guard source.count > 64, source.count <= Int(LZ4_MAX_INPUT_SIZE) else { return false }
        let bound = Int(LZ4_compressBound(Int32(source.count)))
        return withUnsafeTemporaryAllocation(byteCount: bound, alignment: 16) { scratch in
            let written = Int(
                LZ4_compress_default(
                    source.baseAddress!.assumingMemoryBound(to: CChar.self),
                    scratch.baseAddress!.assumingMemoryBound(to: CChar.self), Int32(source.count), Int32(bound)))
            guard written > 0, written + 4 < source.count else { return false }
            output.reserveCapacity(output.count + 4 + written)
            withUnsafeBytes(of: UInt32(source.count).littleEndian) { output.append(contentsOf: $0) }
            output.append(contentsOf: UnsafeRawBufferPointer(rebasing: scratch[0..<written]))
            return true
        }
    }

    /// The length an `uncompressedLength u32 · block` payload declares (nil when too short).
    static func declaredLength(_ payload: UnsafeRawBufferPointer) -> Int? {
        payload.count >= 4 ? Int(payload.loadLE(at: 0, as: UInt32.self)) : nil
    }

    /// Decodes an `uncompressedLength u32 · block` payload into `output`, which must be
    /// exactly the declared length; false when the payload is malformed.
    static func decompress(_ payload: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) -> Bool {
        guard let length = declaredLength(payload), length == output.count, length > 0, payload.count > 4 else {
            return false
        }
        let compressed = UnsafeRawBufferPointer(rebasing: payload[4...])
        let decoded = LZ4_decompress_safe(
            compressed.baseAddress!.assumingMemoryBound(to: CChar.self),
            output.baseAddress!.assumingMemoryBound(to: CChar.self), Int32(compressed.count), Int32(length))
        return Int(decoded) == length
    }

    /// Decodes the first `count` bytes (or fewer, when it declares fewer) of an
    /// `uncompressedLength u32 · block` payload into the start of `output` (the declared
    /// length, as for `decompress(_:into:)`); how many, or nil when the payload is malformed
    /// before then. The rest of the block is not read.
    static func decompressPrefix(
        _ payload: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer, count: Int
    ) -> Int? {
        guard let length = declaredLength(payload), length == output.count, length > 0, payload.count > 4 else {
            return nil
        }
        let compressed = UnsafeRawBufferPointer(rebasing: payload[4...])
        let target = min(count, length)
        let decoded = LZ4_decompress_safe_partial(
            compressed.baseAddress!.assumingMemoryBound(to: CChar.self),
            output.baseAddress!.assumingMemoryBound(to: CChar.self), Int32(compressed.count), Int32(target),
            Int32(length))
        return decoded >= 0 ? Int(decoded) : nil
    }

    /// Decodes an `uncompressedLength u32 · block` payload with the safe decompressor.
    /// Returns nil when the payload is malformed or declares more than `limit` bytes.
    static func decompress(_ payload: UnsafeRawBufferPointer, limit: Int) -> [UInt8]? {
        guard payload.count >= 4 else { return nil }
        let length = Int(payload.loadLE(at: 0, as: UInt32.self))
        guard length > 0, length <= limit else { return nil }
        let compressed = UnsafeRawBufferPointer(rebasing: payload[4...])
        guard compressed.count > 0 else { return nil }
        var decoded = 0
        let result = [UInt8](unsafeUninitializedCapacity: length) { buffer, initialized in
            decoded = Int(
                LZ4_decompress_safe(
                    compressed.baseAddress!.assumingMemoryBound(to: CChar.self),
                    UnsafeMutableRawPointer(buffer.baseAddress!).assumingMemoryBound(to: CChar.self),
                    Int32(compressed.count), Int32(length)))
            initialized = decoded == length ? length : 0
        }
        return decoded == length ? result : nil
    }
}
