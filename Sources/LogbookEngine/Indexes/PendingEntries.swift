/// Index entries waiting to go into one index: keys as ranges of a block, and primary keys.
struct PendingEntries {
    var keys: [Range<Int>] = []
    var primaryKeys: [UInt64] = []
    var count: Int { keys.count }

    mutating func append(_ key: Range<Int>, _ pk: UInt64) {
        keys.append(key)
        primaryKeys.append(pk)
    }

    mutating func removeAll() {
        keys.removeAll(keepingCapacity: true)
        primaryKeys.removeAll(keepingCapacity: true)
    }

    @inline(__always)
    func probe(_ i: Int, _ block: UnsafeRawBufferPointer) -> IndexKeyProbe {
        IndexKeyProbe(UnsafeRawBufferPointer(rebasing: block[keys[i]]))
    }

    func compare(_ a: Int, _ b: Int, _ block: UnsafeRawBufferPointer) -> Int {
        let c = compareBytes(
            UnsafeRawBufferPointer(rebasing: block[keys[a]]), UnsafeRawBufferPointer(rebasing: block[keys[b]]))
        if c != 0 { return c }
        return primaryKeys[a] == primaryKeys[b] ? 0 : (primaryKeys[a] < primaryKeys[b] ? -1 : 1)
    }
}
