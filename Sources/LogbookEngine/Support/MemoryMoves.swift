/// Moves `count` trivial values from `source` to `destination`, which may overlap (memmove).
@inline(__always)
func overlappingMove<T: BitwiseCopyable>(
    _ destination: UnsafeMutablePointer<T>, from source: UnsafeMutablePointer<T>, count: Int
) {
    UnsafeMutableRawPointer(destination).copyMemory(from: source, byteCount: count * MemoryLayout<T>.stride)
}

/// A copy with no spare capacity (`Array(slice)` may keep the whole buffer).
func exactCopy<C: Collection>(_ source: C) -> [C.Element] where C.Element: BitwiseCopyable {
    // Not the shared empty storage, whose count the initializer would write.
    guard !source.isEmpty else { return [] }
    return [C.Element](unsafeUninitializedCapacity: source.count) { buffer, count in
        _ = buffer.initialize(from: source)
        count = source.count
    }
}
