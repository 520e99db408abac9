import Foundation
import LogbookEngine
import LogbookGraph

/// The global identity of objects for sync: a UUID beside each local key. An object made in
/// this store has a UUID computed from the store's identifier and its key (the first 8 bytes
/// of the store's UUID, then the last 8 XORed with a bijective mix of the key), so nothing is
/// stored for it and the key comes back from the UUID. An object pulled from another store
/// keeps its UUID in a mapping record (keyspace 65534, written in the same commit as the
/// pull that made it); so does the pull's position (record 0).
struct Identity: Sendable {
    let high: UInt64
    let low: UInt64
    private(set) var byUUID: [UUID: UInt64] = [:]
    private(set) var byKey: [UInt64: UUID] = [:]
    private(set) var nextMapping: UInt64 = 1

    static let keyspace = ManagedObjectContext.attachedKeyspace
    static let stateKey = EngineKey(keyspace: keyspace, id: 0).rawValue

    init(store: UUID) {
        let b = store.uuid
        high = [b.0, b.1, b.2, b.3, b.4, b.5, b.6, b.7].reduce(0) { $0 << 8 | UInt64($1) }
        low = [b.8, b.9, b.10, b.11, b.12, b.13, b.14, b.15].reduce(0) { $0 << 8 | UInt64($1) }
    }

    /// The identity of a store, with the mappings its records hold.
    static func load(_ container: PersistentContainer) throws -> Identity {
        guard let store = UUID(uuidString: container.storeIdentifier) else {
            throw SyncError(.store, "the store's identifier is not a UUID")
        }
        var identity = Identity(store: store)
        try identity.catchUp(container)
        return identity
    }

    /// Reads the mapping records written since this identity was read (by another engine on
    /// the same store, in this process or another): those from `nextMapping` on. One look-up
    /// when there are none.
    mutating func catchUp(_ container: PersistentContainer) throws {
        let snapshot = container.store.snapshot()
        var failure: (any Error)?
        var found: [(UInt64, UInt64, UUID)] = []
        let from = EngineKey(keyspace: Self.keyspace, id: nextMapping).rawValue
        snapshot.forEachKey(inKeyspace: Self.keyspace, from: from) { key in
            // The last id holds the values a resolver gave up (`TakenValues`), not a mapping.
            if EngineKey(rawValue: key).id == EngineKey.maxID { return false }
            do {
                guard let bytes = try snapshot.value(forKey: key), bytes.count == 24 else {
                    throw SyncError(.store, "sync mapping record \(EngineKey(rawValue: key).id) is malformed")
                }
                let local = bytes[0..<8].enumerated().reduce(UInt64(0)) { $0 | UInt64($1.element) << (8 * $1.offset) }
                let uuid = UUID(
                    uuid: (
                        bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15],
                        bytes[16], bytes[17], bytes[18], bytes[19], bytes[20], bytes[21], bytes[22], bytes[23]
                    ))
                found.append((EngineKey(rawValue: key).id, local, uuid))
                return true
            } catch {
                failure = error
                return false
            }
        }
        if let failure { throw failure }
        for (id, local, uuid) in found {
            byUUID[uuid] = local
            byKey[local] = uuid
            nextMapping = max(nextMapping, id + 1)
        }
    }

    static func mix(_ x: UInt64) -> UInt64 {
        var z = x
        z = (z ^ (z >> 30)) &* 0xbf58_476d_1ce4_e5b9
        z = (z ^ (z >> 27)) &* 0x94d0_49bb_1331_11eb
        return z ^ (z >> 31)
    }

    static func unmix(_ x: UInt64) -> UInt64 {
        var z = x
        z = z ^ (z >> 31) ^ (z >> 62)
        z = z &* 0x3196_42b2_d24d_8ec3
        z = z ^ (z >> 27) ^ (z >> 54)
        z = z &* 0x96de_1b17_3f11_9089
        return z ^ (z >> 30) ^ (z >> 60)
    }

    /// The UUID of the object with local key `key`.
    func uuid(forKey key: UInt64) -> UUID {
        if let mapped = byKey[key] { return mapped }
        return Self.uuid(high, low ^ Self.mix(key))
    }

    /// The local key of the object with `uuid`, if this store knows it.
    func key(for uuid: UUID) -> UInt64? {
        let (h, l) = Self.halves(uuid)
        if h == high { return Self.unmix(l ^ low) }
        return byUUID[uuid]
    }

    /// Whether `uuid` names an object made in this store.
    func isOwn(_ uuid: UUID) -> Bool { Self.halves(uuid).0 == high }

    /// Records that `key` is the local object of `uuid` (made by a pull); the record that keeps
    /// it, to commit with that pull.
    mutating func map(_ uuid: UUID, to key: UInt64) -> (key: UInt64, value: [UInt8]) {
        byUUID[uuid] = key
        byKey[key] = uuid
        let id = nextMapping
        nextMapping += 1
        var value = (0..<8).map { UInt8(truncatingIfNeeded: key >> (8 * $0)) }
        value += withUnsafeBytes(of: uuid.uuid) { Array($0) }
        return (EngineKey(keyspace: Self.keyspace, id: id).rawValue, value)
    }

    /// Takes back mappings `map` made (of a batch that failed), and the ids they took.
    mutating func forget(_ uuids: [UUID], restoring next: UInt64) {
        for uuid in uuids {
            if let key = byUUID.removeValue(forKey: uuid) { byKey[key] = nil }
        }
        nextMapping = next
    }

    static func halves(_ uuid: UUID) -> (UInt64, UInt64) {
        let b = uuid.uuid
        let h = [b.0, b.1, b.2, b.3, b.4, b.5, b.6, b.7].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        let l = [b.8, b.9, b.10, b.11, b.12, b.13, b.14, b.15].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        return (h, l)
    }

    static func uuid(_ h: UInt64, _ l: UInt64) -> UUID {
        func byte(_ v: UInt64, _ i: Int) -> UInt8 { UInt8(truncatingIfNeeded: v >> (56 - 8 * i)) }
        return UUID(
            uuid: (
                byte(h, 0), byte(h, 1), byte(h, 2), byte(h, 3), byte(h, 4), byte(h, 5), byte(h, 6), byte(h, 7),
                byte(l, 0), byte(l, 1), byte(l, 2), byte(l, 3), byte(l, 4), byte(l, 5), byte(l, 6), byte(l, 7)
            ))
    }
}
