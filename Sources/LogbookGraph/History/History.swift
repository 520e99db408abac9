import Foundation
import LogbookEngine

/// A point in a store's history: the version of one committed transaction (Core Data's
/// `NSPersistentHistoryToken`).
///
/// A token is the store version the transaction made. Tokens are `Codable` (keep the last one you processed, in user defaults or a
/// file, and ask for the changes after it next time), and ordered: a later transaction has a
/// greater token. A token stays valid across reopening and compaction.
///
/// ```swift
/// let token = container.currentHistoryToken
/// let data = try JSONEncoder().encode(token)
/// // … later, maybe in another process …
/// let since = try JSONDecoder().decode(PersistentHistoryToken.self, from: data)
/// let transactions = try container.history(after: since)
/// ```
public struct PersistentHistoryToken: Sendable, Hashable, Comparable, Codable, CustomStringConvertible {
    /// The store version of the transaction the token names (what `logbook history` prints).
    public let version: UInt64

    /// The token of the transaction that made store version `version`.
    public init(version: UInt64) { self.version = version }

    public static func < (a: PersistentHistoryToken, b: PersistentHistoryToken) -> Bool { a.version < b.version }

    public init(from decoder: any Decoder) throws {
        version = try decoder.singleValueContainer().decode(UInt64.self)
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(version)
    }

    public var description: String { "PersistentHistoryToken(\(version))" }
}

/// What happened to one object in a transaction (Core Data's `NSPersistentHistoryChangeType`).
public enum PersistentHistoryChangeType: String, Sendable, Hashable, Codable {
    case insert
    case update
    case delete
}

/// One object's change in a recorded transaction (Core Data's `NSPersistentHistoryChange`).
public struct PersistentHistoryChange: Sendable {
    /// Insert, update or delete.
    public var changeType: PersistentHistoryChangeType
    /// The object changed (a deleted object's ID no longer finds an object).
    public var changedObjectID: ObjectID
    /// The entity of the object.
    public var entityName: String
    /// For an update: the attributes and relationships whose values changed (to-one
    /// relationships by name; a change to a to-many relationship names it on the owner when the
    /// owner's own record changed too). Nil for inserts and deletes.
    public var updatedProperties: Set<String>?
    /// For a delete: the values, at the time of the delete, of the attributes marked
    /// `preservesValueInHistoryOnDeletion` (attributes with no value are left out). Nil for
    /// inserts and updates.
    public var tombstone: [String: any Sendable]?
}

/// What one transaction did to one object's to-many relationship, recorded with
/// `ContainerOptions.historyRecordsMemberChanges` (Core Data records only that a relationship
/// changed): the members it added and removed, and whether it changed an ordered
/// relationship's order (read the order itself from the store).
///
/// ```swift
/// for change in transaction.memberChanges where change.relationship == "tags" {
///     print(change.owner, "+", change.added.count, "-", change.removed.count)
/// }
/// ```
public struct PersistentHistoryMemberChange: Sendable, Hashable {
    /// The object whose relationship changed.
    public var owner: ObjectID
    /// The relationship's name (on the owner's entity).
    public var relationship: String
    /// The members added, in key order.
    public var added: [ObjectID]
    /// The members removed, in key order.
    public var removed: [ObjectID]
    /// Whether the transaction set the order of an ordered relationship.
    public var reordered: Bool
}

/// One committed transaction, as history recorded it (Core Data's
/// `NSPersistentHistoryTransaction`).
public struct PersistentHistoryTransaction: Sendable {
    /// The transaction's token: ask for the changes `after:` it to read what came next.
    public var token: PersistentHistoryToken
    /// When the transaction was committed.
    public var timestamp: Date
    /// The saving context's `transactionAuthor`, if it had one.
    public var author: String?
    /// The saving context's `name`, if it had one.
    public var contextName: String?
    /// The objects the transaction inserted, updated and deleted, in that order.
    public var changes: [PersistentHistoryChange]
    /// The members each to-many relationship gained and lost, when the store records them
    /// (`ContainerOptions.historyRecordsMemberChanges`; empty otherwise).
    public var memberChanges: [PersistentHistoryMemberChange] = []

    /// The number of changes of each type for each entity, for summaries.
    public func counts() -> [String: (inserted: Int, updated: Int, deleted: Int)] {
        var out: [String: (inserted: Int, updated: Int, deleted: Int)] = [:]
        for c in changes {
            var n = out[c.entityName] ?? (0, 0, 0)
            switch c.changeType {
            case .insert: n.inserted += 1
            case .update: n.updated += 1
            case .delete: n.deleted += 1
            }
            out[c.entityName] = n
        }
        return out
    }
}

/// A history request, executed by a context (Core Data's `NSPersistentHistoryChangeRequest`):
/// fetch the transactions after a token or a date, or purge those before one.
///
/// ```swift
/// let result = try context.execute(HistoryRequest.fetchHistory(after: lastToken))
/// for transaction in result.transactions { … }
/// try context.execute(HistoryRequest.deleteHistory(before: lastToken))
/// ```
public struct HistoryRequest: Sendable {
    enum Kind: Sendable {
        case fetch(after: PersistentHistoryToken?)
        case fetchAfterDate(Date)
        case delete(before: PersistentHistoryToken)
        case deleteBeforeDate(Date)
    }
    let kind: Kind

    /// The transactions after `token` (all recorded ones with nil), oldest first.
    public static func fetchHistory(after token: PersistentHistoryToken?) -> HistoryRequest {
        .init(kind: .fetch(after: token))
    }
    /// The transactions committed at or after `date`, oldest first.
    public static func fetchHistory(after date: Date) -> HistoryRequest { .init(kind: .fetchAfterDate(date)) }
    /// The same as `fetchHistory(after:)`, by the name SwiftData's history API leads to.
    public static func changes(after token: PersistentHistoryToken?) -> HistoryRequest { fetchHistory(after: token) }
    /// The same as `fetchHistory(after:)` with a date.
    public static func changes(after date: Date) -> HistoryRequest { fetchHistory(after: date) }
    /// Purges the transactions before `token` (the one it names is kept).
    public static func deleteHistory(before token: PersistentHistoryToken) -> HistoryRequest {
        .init(kind: .delete(before: token))
    }
    /// Purges the transactions committed before `date`.
    public static func deleteHistory(before date: Date) -> HistoryRequest { .init(kind: .deleteBeforeDate(date)) }
}

/// What a history request gives back.
public struct HistoryResult: Sendable {
    /// The transactions fetched (empty for a purge).
    public var transactions: [PersistentHistoryTransaction]
    /// The number of transactions purged (0 for a fetch).
    public var deletedCount: Int
}

extension PersistentContainer {
    /// The token of the store's latest transaction (Core Data's
    /// `currentPersistentHistoryToken(fromStores:)`): history after it is what comes next.
    public var currentHistoryToken: PersistentHistoryToken { PersistentHistoryToken(version: store.version) }

    /// The recorded transactions after `token` (all of them with nil), oldest first.
    ///
    /// History is recorded only while `ContainerOptions.persistentHistoryTracking` is on;
    /// commits made with it off (and the container's own, such as a schema migration) have no
    /// transaction here, so tokens of consecutive transactions need not be consecutive.
    ///
    /// A token of a transaction that was purged since (`deleteHistory(before:)`, the
    /// retention), or of one before it, is expired: reading after it could silently miss
    /// purged transactions, so it is a
    /// `.historyTokenExpired` error (Core Data's `NSPersistentHistoryTokenExpiredError`); start
    /// again from `nil` or `currentHistoryToken`.
    public func history(after token: PersistentHistoryToken?) throws -> [PersistentHistoryTransaction] {
        // A writer reads other writing processes' transactions too (a read-only container
        // follows the writer on its own thread).
        if !store.isReadOnly {
            do { try store.catchUpIfOthersCommitted() } catch { throw LogbookError.wrap(error) }
        }
        let snapshot = store.snapshot()
        if let token, let purged = HistoryRecord.purgedThrough(snapshot), token.version <= purged {
            throw LogbookError(
                .historyTokenExpired,
                "the history after \(token) was purged up to version \(purged): start again from the current token")
        }
        let start = token.map { $0.version &+ 1 } ?? 0
        var out: [PersistentHistoryTransaction] = []
        var failure: (any Error)?
        let names = storeLayout.entityByKeyspace.mapValues { model.entities[$0].name }
        snapshot.forEachKey(inKeyspace: HistoryRecord.keyspace, from: HistoryRecord.key(version: start)) { key in
            do {
                guard let bytes = try snapshot.value(forKey: key) else { return true }
                out.append(
                    try HistoryRecord.decode(
                        bytes, version: EngineKey(rawValue: key).id, entityNames: names, store: storeLayout.identity))
                return true
            } catch {
                failure = error
                return false
            }
        }
        if let failure { throw LogbookError.wrap(failure) }
        return out
    }

    /// A read-only context that sees the store exactly as it was after the transaction
    /// `token` names: its fetches, counts and faults read that version, whatever was saved
    /// since. (Core Data has no counterpart; a query generation pins the present instead.)
    ///
    /// The journal keeps every version since the store was created or last compacted, so this
    /// copies nothing: it replays the journal up to the version (about what an open without a
    /// checkpoint costs) and pins the segments it reads until the context goes. A token before
    /// the oldest version the store keeps (`oldestReadableToken`) or after the last commit is
    /// a `.store` error whose engine error is `.versionUnavailable`. The context cannot save
    /// (`.readOnly`), and does not merge later saves.
    ///
    /// ```swift
    /// let token = container.currentHistoryToken
    /// …                                             // later saves
    /// let then = try container.snapshot(asOf: token)
    /// let openThen = try then.count(for: FetchRequest<Item>(predicate: "done == NO"))
    /// ```
    public func snapshot(
        asOf token: PersistentHistoryToken, concurrencyType: ManagedObjectContext.ConcurrencyType = .confinement
    ) throws -> ManagedObjectContext {
        let past: Snapshot
        do { past = try store.snapshot(asOf: token.version) } catch { throw LogbookError.wrap(error) }
        let context = newContext(concurrencyType: concurrencyType)
        context.pinnedSnapshot = past
        context.isHistorical = true
        return context
    }

    /// A read-only context as of the last transaction committed at or before `date`
    /// (`snapshot(asOf:)` with its token). Finding it needs the transactions' times: with
    /// history tracking off, or the transactions before `date` purged, this is an
    /// `.invalidArgument` error.
    public func snapshot(
        asOf date: Date, concurrencyType: ManagedObjectContext.ConcurrencyType = .confinement
    ) throws -> ManagedObjectContext {
        let all = try history(after: nil)
        guard let last = all.last(where: { $0.timestamp <= date }) else {
            throw LogbookError(
                .invalidArgument,
                all.isEmpty
                    ? "a snapshot as of a date needs recorded history (ContainerOptions.persistentHistoryTracking)"
                    : "no recorded transaction was committed at or before \(date)")
        }
        return try snapshot(asOf: last.token, concurrencyType: concurrencyType)
    }

    /// The token of the oldest version `snapshot(asOf:)` can read: the store's first (0) if it
    /// was never compacted, else the version its last compaction folded the earlier ones into.
    public var oldestReadableToken: PersistentHistoryToken {
        get throws {
            do { return PersistentHistoryToken(version: try store.oldestVersion()) } catch {
                throw LogbookError.wrap(error)
            }
        }
    }

    /// The recorded transactions committed at or after `date`, oldest first.
    public func history(after date: Date) throws -> [PersistentHistoryTransaction] {
        try history(after: nil).filter { $0.timestamp >= date }
    }

    /// Purges the recorded transactions before `token` (the transaction `token` names is
    /// kept); returns how many were purged. Purged history is gone for every reader; the
    /// space it took is reclaimed by the next compaction.
    @discardableResult
    public func deleteHistory(before token: PersistentHistoryToken) throws -> Int {
        try purgeHistory { version, _ in version < token.version }
    }

    /// Purges the recorded transactions committed before `date`; returns how many.
    @discardableResult
    public func deleteHistory(before date: Date) throws -> Int {
        let limit = Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
        return try purgeHistory { _, bytes in (HistoryRecord.timestampMilliseconds(bytes) ?? .max) < limit }
    }

    /// Purges what `historyRetention` lets go; returns how many transactions. Each compaction
    /// calls it as it starts (`ContainerOptions.historyRetention`).
    @discardableResult
    public func applyHistoryRetention() throws -> Int {
        switch historyRetention {
        case .all: return 0
        case .none: return try purgeHistory { _, _ in true }
        case .after(let token): return try purgeHistory { version, _ in version <= token.version }
        case .age(let seconds): return try deleteHistory(before: Date().addingTimeInterval(-seconds))
        }
    }

    /// The version of the oldest recorded transaction (nil with none).
    func oldestKeptHistoryVersion() -> UInt64? {
        var oldest: UInt64?
        store.snapshot().forEachKey(inKeyspace: HistoryRecord.keyspace) { key in
            oldest = EngineKey(rawValue: key).id
            return false
        }
        return oldest
    }

    /// Purges the records from the oldest on while `matches` holds (versions and times both
    /// grow: the first record kept ends the purge).
    private func purgeHistory(_ matches: (UInt64, [UInt8]) -> Bool) throws -> Int {
        try purgeHistory(stoppingAtFirstKept: true, matches)
    }

    /// Purges the records `matches` picks among all of them (`stoppingAtFirstKept`: only the
    /// first ones, up to the first it keeps), and records the newest version purged, which
    /// expires older tokens (docs/journal-format.md, "History records").
    package func purgeHistory(stoppingAtFirstKept: Bool, _ matches: (UInt64, [UInt8]) -> Bool) throws -> Int {
        try writer.withSaveLock { _ in
            let snapshot = store.snapshot()
            var t = Transaction()
            var failure: (any Error)?
            var newest: UInt64?
            snapshot.forEachKey(inKeyspace: HistoryRecord.keyspace) { key in
                do {
                    guard let bytes = try snapshot.value(forKey: key) else { return true }
                    let version = EngineKey(rawValue: key).id
                    if matches(version, bytes) {
                        t.delete(key)
                        newest = version
                        return true
                    }
                    return !stoppingAtFirstKept
                } catch {
                    failure = error
                    return false
                }
            }
            if let failure { throw LogbookError.wrap(failure) }
            let count = t.operationCount
            if let newest {
                let through = max(newest, HistoryRecord.purgedThrough(snapshot) ?? 0)
                t.put(HistoryRecord.purgedThroughKey, value: withUnsafeBytes(of: through.littleEndian) { Array($0) })
                try StoreWriter.commit(t, to: store)
            }
            return count
        }
    }
}

/// What a compaction keeps of the recorded history (`ContainerOptions.historyRetention`).
///
/// ```swift
/// var options = ContainerOptions()
/// options.persistentHistoryTracking = true
/// options.historyRetention = .age(7 * 24 * 3600)   // a week of transactions
/// ```
public enum HistoryRetention: Sendable, Hashable {
    /// Every transaction not purged with `deleteHistory(before:)` (the default).
    case all
    /// None: each compaction purges all recorded history (it is still recorded, and readable
    /// until the next compaction).
    case none
    /// The transactions after the token (a follower's last acknowledged one, say).
    case after(PersistentHistoryToken)
    /// The transactions of the last so many seconds.
    case age(TimeInterval)
}

/// Runs the container's retention from the engine's compaction thread; holds the container
/// weakly (the store holds the hook, the container the store).
final class RetentionHook: Sendable {
    let shared = Locked<WeakShared>(WeakShared())

    struct WeakShared {
        weak var value: SharedStore?
        init() {}
    }

    /// Applies the retention, and returns the version before the oldest transaction kept: the
    /// versions after it stay readable with `snapshot(asOf:)` (nil: no history is kept).
    func run() -> UInt64? {
        // Any container of the store applies it (they agree on the retention).
        guard let container = shared.withLock({ $0.value })?.containers.first else { return nil }
        do { try container.applyHistoryRetention() } catch {
            StoreOptions.standardError("logbook: the history retention was not applied before a compaction: \(error)")
        }
        return container.oldestKeptHistoryVersion().map { $0 - 1 }
    }
}

/// The record a tracked save writes beside its changes: keyed by the version of its own
/// transaction in a keyspace of its own, so that history is read in commit order by key, is
/// kept by compaction until purged (a purge deletes the records), and costs nothing when
/// tracking is off. The layout is in docs/journal-format.md ("History records").
struct HistoryRecord {
    /// The keyspace of history records (the highest; entities' keyspaces count up from 1).
    static let keyspace: UInt16 = 0xFFFF
    static let formatVersion: UInt8 = 1
    /// The format of a record that names its to-many changes' members after its changes.
    static let memberChangesFormat: UInt8 = 2

    static func key(version: UInt64) -> UInt64 { EngineKey(keyspace: keyspace, id: version).rawValue }

    /// The engine key (keyspace 0) of the newest version whose history record was purged:
    /// tokens up to it are expired.
    static let purgedThroughKey: UInt64 = 3

    static func purgedThrough(_ snapshot: Snapshot) -> UInt64? {
        guard let bytes = try? snapshot.value(forKey: purgedThroughKey), bytes.count == 8 else { return nil }
        return bytes.withUnsafeBytes { UInt64(littleEndian: $0.loadUnaligned(as: UInt64.self)) }
    }

    /// Writes a record change by change, with no list of changes kept beside it (a save of a
    /// million objects writes a million changes).
    struct Writer {
        private var w: ByteWriter
        private var previous: UInt64 = 0

        /// A record of `changes` changes (exactly that many are written after); with
        /// `memberChanges`, in format 2, to end with `members(_:)`.
        init(timestamp: Date, author: String?, contextName: String?, changes: Int, memberChanges: Bool = false) {
            w = ByteWriter(capacity: 64 + changes * 3)
            w.append(memberChanges ? memberChangesFormat : formatVersion)
            w.appendLE(Int64((timestamp.timeIntervalSince1970 * 1000).rounded(.down)))
            w.append((author == nil ? 0 : 1) | (contextName == nil ? 0 : 2))
            if let author { appendString(author, &w) }
            if let contextName { appendString(contextName, &w) }
            w.appendVarint(changes)
        }

        mutating func insert(_ key: UInt64) {
            w.append(1)
            appendKey(key, &previous, &w)
        }

        mutating func update(_ key: UInt64, _ names: [String]) {
            w.append(2)
            appendKey(key, &previous, &w)
            w.appendVarint(names.count)
            for n in names { appendString(n, &w) }
        }

        /// A delete, with the preserved attributes' names, values and types.
        mutating func delete(_ key: UInt64, _ values: [(String, FieldValue, AttributeType)]) {
            w.append(3)
            appendKey(key, &previous, &w)
            w.appendVarint(values.count)
            for (name, slot, type) in values {
                appendString(name, &w)
                appendValue(slot, type, &w)
            }
        }

        /// The to-many changes of a format-2 record, after its changes: owner, relationship
        /// name, whether reordered, the members added and removed (each in key order).
        mutating func members(
            _ changes: [(owner: UInt64, name: String, added: [UInt64], removed: [UInt64], reordered: Bool)]
        ) {
            w.appendVarint(changes.count)
            var owner: UInt64 = 0
            for c in changes {
                appendKey(c.owner, &owner, &w)
                appendString(c.name, &w)
                w.append(c.reordered ? 1 : 0)
                for list in [c.added, c.removed] {
                    w.appendVarint(list.count)
                    var previous: UInt64 = 0
                    for k in list { appendKey(k, &previous, &w) }
                }
            }
        }

        var bytes: [UInt8] { w.bytes }
    }

    /// A key as the zigzag difference from the previous one (a save's keys are mostly close).
    private static func appendKey(_ key: UInt64, _ previous: inout UInt64, _ w: inout ByteWriter) {
        w.appendVarint(zigzag(Int64(bitPattern: key &- previous)))
        previous = key
    }

    private static func appendString(_ s: String, _ w: inout ByteWriter) {
        let utf8 = Array(s.utf8)
        w.appendVarint(utf8.count)
        w.append(contentsOf: utf8)
    }

    /// A tombstone value: a tag, then the value (see docs/journal-format.md).
    private static func appendValue(_ slot: FieldValue, _ type: AttributeType, _ w: inout ByteWriter) {
        switch slot {
        case .null: w.append(0)
        case .string(let s):
            w.append(1)
            appendString(s, &w)
        case .int(let v):
            w.append(2)
            w.appendLE(v)
        case .bool(let b):
            w.append(4)
            w.appendLE(Int64(b ? 1 : 0))
        case .double(let d):
            w.append(type == .date ? 10 : 3)
            w.appendLE(d.bitPattern)
        case .data(let d):
            w.append(5)
            w.appendVarint(d.count)
            w.append(contentsOf: Array(d))
        case .boxed(let b):
            switch b.value {
            case .uuid(let u):
                w.append(6)
                w.append(contentsOf: withUnsafeBytes(of: u.uuid) { Array($0) })
            case .url(let u):
                w.append(7)
                appendString(u.absoluteString, &w)
            case .decimal(let d):
                w.append(8)
                appendString("\(d)", &w)
            }
        case .object: w.append(0)
        }
    }

    /// The commit time of a record, without decoding the rest.
    static func timestampMilliseconds(_ bytes: [UInt8]) -> Int64? {
        bytes.withUnsafeBytes { raw in
            var r = ByteReader(raw)
            guard let format = try? r.readByte(), format == formatVersion || format == memberChangesFormat else {
                return nil
            }
            return try? r.readLE(Int64.self)
        }
    }

    static func decode(
        _ bytes: [UInt8], version: UInt64, entityNames: [UInt16: String], store: StoreIdentity
    ) throws -> PersistentHistoryTransaction {
        try bytes.withUnsafeBytes { raw in
            var r = ByteReader(raw)
            func fail(_ reason: String) -> LogbookError {
                LogbookError(.store, "the history record of version \(version) is malformed: \(reason)")
            }
            do {
                let format = try r.readByte()
                guard format == formatVersion || format == memberChangesFormat else { throw fail("unknown format") }
                let ms = try r.readLE(Int64.self)
                let flags = try r.readByte()
                let author = flags & 1 != 0 ? try readString(&r) : nil
                let contextName = flags & 2 != 0 ? try readString(&r) : nil
                let count = try r.readLength(limit: r.remaining)
                var changes: [PersistentHistoryChange] = []
                changes.reserveCapacity(count)
                var previous: UInt64 = 0
                for _ in 0..<count {
                    let type = try r.readByte()
                    let z = try r.readVarint()
                    previous = previous &+ UInt64(bitPattern: unzigzag(z))
                    let key = previous
                    let entityName = entityNames[EngineKey(rawValue: key).keyspace] ?? "?"
                    let id = ObjectID(store: store, key: key)
                    switch type {
                    case 1:
                        changes.append(
                            PersistentHistoryChange(changeType: .insert, changedObjectID: id, entityName: entityName))
                    case 2:
                        let n = try r.readLength(limit: r.remaining)
                        var names = Set<String>()
                        for _ in 0..<n { names.insert(try readString(&r)) }
                        changes.append(
                            PersistentHistoryChange(
                                changeType: .update, changedObjectID: id, entityName: entityName,
                                updatedProperties: names))
                    case 3:
                        let n = try r.readLength(limit: r.remaining)
                        var values: [String: any Sendable] = [:]
                        for _ in 0..<n {
                            let name = try readString(&r)
                            if let v = try readValue(&r) { values[name] = v }
                        }
                        changes.append(
                            PersistentHistoryChange(
                                changeType: .delete, changedObjectID: id, entityName: entityName, tombstone: values))
                    default: throw fail("unknown change type \(type)")
                    }
                }
                var members: [PersistentHistoryMemberChange] = []
                if format == memberChangesFormat {
                    let n = try r.readLength(limit: r.remaining)
                    var owner: UInt64 = 0
                    for _ in 0..<n {
                        owner = owner &+ UInt64(bitPattern: unzigzag(try r.readVarint()))
                        let name = try readString(&r)
                        let reordered = try r.readByte() != 0
                        var lists: [[ObjectID]] = []
                        for _ in 0..<2 {
                            let count = try r.readLength(limit: r.remaining)
                            var previous: UInt64 = 0
                            var list: [ObjectID] = []
                            for _ in 0..<count {
                                previous = previous &+ UInt64(bitPattern: unzigzag(try r.readVarint()))
                                list.append(ObjectID(store: store, key: previous))
                            }
                            lists.append(list)
                        }
                        members.append(
                            PersistentHistoryMemberChange(
                                owner: ObjectID(store: store, key: owner), relationship: name, added: lists[0],
                                removed: lists[1], reordered: reordered))
                    }
                }
                guard r.isAtEnd else { throw fail("bytes after the last change") }
                return PersistentHistoryTransaction(
                    token: PersistentHistoryToken(version: version),
                    timestamp: Date(timeIntervalSince1970: Double(ms) / 1000),
                    author: author, contextName: contextName, changes: changes, memberChanges: members)
            } catch is ByteReader.OutOfBounds {
                throw fail("truncated")
            }
        }
    }

    private static func readString(_ r: inout ByteReader) throws -> String {
        let n = try r.readLength(limit: r.remaining)
        return String(decoding: try r.readBytes(n), as: UTF8.self)
    }

    private static func readValue(_ r: inout ByteReader) throws -> (any Sendable)? {
        switch try r.readByte() {
        case 0: return nil
        case 1: return try readString(&r)
        case 2: return Int(try r.readLE(Int64.self))
        case 3: return Double(bitPattern: try r.readLE(UInt64.self))
        case 4: return try r.readLE(Int64.self) != 0
        case 5:
            let n = try r.readLength(limit: r.remaining)
            return Data(try r.readBytes(n))
        case 6:
            let b = Array(try r.readBytes(16))
            return UUID(
                uuid: (
                    b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]
                ))
        case 7: return URL(string: try readString(&r))
        case 8: return Decimal(string: try readString(&r))
        // Written before format 2 of the schema: seconds since 1970 (the last bits lost).
        case 9: return Date(timeIntervalSince1970: Double(bitPattern: try r.readLE(UInt64.self)))
        case 10: return Date(timeIntervalSinceReferenceDate: Double(bitPattern: try r.readLE(UInt64.self)))
        default:
            throw LogbookError(.store, "a history record holds a value of an unknown kind")
        }
    }
}
