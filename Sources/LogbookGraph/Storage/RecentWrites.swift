/// The keys recent saves replaced or deleted, by version (a map of recent writes, not the
/// journal): a save need compare only the records written after its objects were read. Bounded: past `capacity` keys it forgets
/// them all and records the version from which it knows nothing (`horizon`). A write of more
/// than `largeWrite` keys at once (a batch request) is not listed key by key: it moves the
/// horizon to its own version, which costs a later save of objects read before it a
/// comparison of their values with the store's (the conflict check below), never a lost
/// change; objects read after it are not compared.
struct RecentWrites {
    private var lastWrite: [UInt64: UInt64] = [:]
    private(set) var horizon: UInt64 = 0
    static let capacity = 1 << 20
    static let largeWrite = 1 << 16

    /// Whether no save has replaced or deleted anything since the container opened.
    var isEmpty: Bool { horizon == 0 && lastWrite.isEmpty }

    /// Whether a record read at `version` may have been replaced since.
    func mayHaveChanged(_ key: UInt64, since version: UInt64) -> Bool {
        if version < horizon { return true }
        guard let written = lastWrite[key] else { return false }
        return written > version
    }

    /// Another process committed up to `version`, which keys this map does not know: what was
    /// read before it may have been replaced.
    mutating func sawWrites(before version: UInt64) {
        if version > horizon { horizon = version }
    }

    mutating func record(_ keys: some Collection<UInt64>, version: UInt64) {
        if keys.count > Self.largeWrite {
            // Whatever was read at this version or later saw this write.
            lastWrite = [:]
            horizon = max(horizon, version)
            return
        }
        for k in keys { lastWrite[k] = version }
        if lastWrite.count > Self.capacity {
            lastWrite = [:]
            horizon = version + 1
        }
    }
}
