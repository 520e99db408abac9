import Foundation
import LogbookEngine
import LogbookGraph

// SwiftData's history (iOS 18): transactions of the container's saves, read and purged through
// a context. A `ModelContainer` records history by default, as SwiftData's does.

/// A position in a store's history (SwiftData's `HistoryToken`).
public protocol HistoryToken: Comparable, Codable, Hashable, Identifiable, Sendable {
    associatedtype TokenType: Codable, Hashable, Sendable
    /// The store the token belongs to.
    var storeIdentifier: String { get }
    /// The token's value.
    var tokenValue: TokenType? { get }
}

/// The token of a transaction of a Logbook store: its commit version.
public struct DefaultHistoryToken: HistoryToken {
    /// The store's identifier.
    public let storeIdentifier: String
    /// The transaction's commit version.
    public let tokenValue: UInt64?
    /// The same token in the Core Data–style API (`PersistentContainer.history(after:)`).
    public var persistentHistoryToken: PersistentHistoryToken { PersistentHistoryToken(version: tokenValue ?? 0) }
    public var id: UInt64 { tokenValue ?? 0 }

    init(_ token: PersistentHistoryToken, store: String) {
        storeIdentifier = store
        tokenValue = token.version
    }

    public static func < (a: Self, b: Self) -> Bool { (a.tokenValue ?? 0) < (b.tokenValue ?? 0) }
}

/// A committed transaction (SwiftData's `HistoryTransaction`).
public protocol HistoryTransaction: Hashable, Identifiable, Sendable {
    associatedtype TokenType: Comparable, Hashable, Identifiable, Sendable
    associatedtype TransactionIdentifier: Comparable, Hashable, Sendable
    var author: String? { get }
    var changes: [HistoryChange] { get }
    var storeIdentifier: String { get }
    var timestamp: Date { get }
    var token: TokenType { get }
    var transactionIdentifier: TransactionIdentifier { get }
}

/// One transaction of a Logbook store's history.
///
/// ```swift
/// var descriptor = HistoryDescriptor<DefaultHistoryTransaction>()
/// descriptor.predicate = #Predicate { $0.token > lastToken && $0.author != "widget" }
/// for transaction in try context.fetchHistory(descriptor) {
///     for case .insert(let insert) in transaction.changes {
///         if let trip = insert as? DefaultHistoryInsert<Trip> { show(trip.changedPersistentIdentifier) }
///     }
/// }
/// ```
public struct DefaultHistoryTransaction: HistoryTransaction {
    public typealias TransactionIdentifier = Int64
    public let storeIdentifier: String
    /// The program that saved (its process name: Linux has no bundles).
    public let bundleIdentifier: String
    /// The process that saved, when known (empty: the store does not record it).
    public let processIdentifier: String
    /// The transaction's commit version.
    public let transactionIdentifier: Int64
    public var id: Int64 { transactionIdentifier }
    public let token: DefaultHistoryToken
    /// The context's `author` when it saved.
    public let author: String?
    public let changes: [HistoryChange]
    public let timestamp: Date

    public static func == (a: Self, b: Self) -> Bool { a.token == b.token && a.storeIdentifier == b.storeIdentifier }
    public func hash(into h: inout Hasher) { h.combine(token) }
}

/// One model's change in a transaction.
public enum HistoryChange: Sendable {
    case insert(any HistoryInsert)
    case update(any HistoryUpdate)
    case delete(any HistoryDelete)

    /// The model changed.
    public var changedPersistentIdentifier: PersistentIdentifier {
        switch self {
        case .insert(let c): c.changedPersistentIdentifier
        case .update(let c): c.changedPersistentIdentifier
        case .delete(let c): c.changedPersistentIdentifier
        }
    }
}

/// An insertion in a transaction.
public protocol HistoryInsert: Sendable {
    associatedtype Model: PersistentModel
    var changedPersistentIdentifier: PersistentIdentifier { get }
    var changeIdentifier: Int64 { get }
    var transactionIdentifier: Int64 { get }
}

/// A change of values in a transaction.
public protocol HistoryUpdate: Sendable {
    associatedtype Model: PersistentModel
    var changedPersistentIdentifier: PersistentIdentifier { get }
    var changeIdentifier: Int64 { get }
    var transactionIdentifier: Int64 { get }
    /// The properties whose values changed.
    var updatedAttributes: [PartialKeyPath<Model>] { get }
}

/// A deletion in a transaction.
public protocol HistoryDelete: Sendable {
    associatedtype Model: PersistentModel
    var changedPersistentIdentifier: PersistentIdentifier { get }
    var changeIdentifier: Int64 { get }
    var transactionIdentifier: Int64 { get }
    /// The values kept of the deleted model (its `.preserveValueOnDeletion` attributes).
    var tombstone: HistoryTombstone<Model> { get }
}

/// An insertion of a `Model`.
public struct DefaultHistoryInsert<Model: PersistentModel>: HistoryInsert {
    public let changedPersistentIdentifier: PersistentIdentifier
    public let changeIdentifier: Int64
    public let transactionIdentifier: Int64
}

/// A change of a `Model`'s values.
public struct DefaultHistoryUpdate<Model: PersistentModel>: HistoryUpdate, @unchecked Sendable {
    // @unchecked Sendable: key paths are immutable.
    public let changedPersistentIdentifier: PersistentIdentifier
    public let changeIdentifier: Int64
    public let transactionIdentifier: Int64
    public let updatedAttributes: [PartialKeyPath<Model>]
}

/// A deletion of a `Model`.
public struct DefaultHistoryDelete<Model: PersistentModel>: HistoryDelete {
    public let changedPersistentIdentifier: PersistentIdentifier
    public let changeIdentifier: Int64
    public let transactionIdentifier: Int64
    public let tombstone: HistoryTombstone<Model>
}

/// The values history kept of a deleted model: those of its `.preserveValueOnDeletion`
/// attributes.
///
/// ```swift
/// if let deletion = change as? DefaultHistoryDelete<Trip> { print(deletion.tombstone[\.name] ?? "?") }
/// ```
public struct HistoryTombstone<Model: PersistentModel>: Sendable, Sequence {
    let values: [String: any Sendable]
    let keys: [String: AnyKeyPathBox]

    struct AnyKeyPathBox: @unchecked Sendable {
        // @unchecked Sendable: key paths are immutable.
        let keyPath: AnyKeyPath
    }

    /// The kept value of the property, nil when it was not kept (or had none).
    public subscript<Value>(_ keyPath: KeyPath<Model, Value>) -> Value? {
        guard let name = keys.first(where: { $0.value.keyPath == keyPath })?.key, let value = values[name] else {
            return nil
        }
        if let v = value as? Value { return v }
        if let t = Value.self as? any AttributeValue.Type, let v = t.init(attributeValue: value) as? Value { return v }
        return nil
    }

    /// The kept values, by property key path.
    public func makeIterator() -> AnyIterator<(PartialKeyPath<Model>, Any)> {
        var rest = values.compactMap { name, value -> (PartialKeyPath<Model>, Any)? in
            guard let kp = keys[name]?.keyPath as? PartialKeyPath<Model> else { return nil }
            return (kp, value)
        }
        return AnyIterator { rest.isEmpty ? nil : rest.removeFirst() }
    }
}

/// Which transactions to read or purge (SwiftData's `HistoryDescriptor`).
public struct HistoryDescriptor<T: HistoryTransaction> {
    /// The transactions wanted (all without one).
    public var predicate: Predicate<T>?
    /// Their order (commit order without one).
    public var sortBy: [SortDescriptor<T>] = []
    public init(predicate: Predicate<T>? = nil) { self.predicate = predicate }
}

/// Errors of the SwiftData layer that SwiftData reports with its own type.
public struct SwiftDataError: Error, Hashable, Sendable, CustomStringConvertible {
    let kind: String
    /// A history token from before transactions that were purged: the history after it is
    /// incomplete. Fetch from the start (no token) instead.
    public static let historyTokenExpired = SwiftDataError(kind: "historyTokenExpired")
    public var description: String { "SwiftDataError.\(kind)" }
    /// For `catch SwiftDataError.historyTokenExpired`.
    public static func ~= (lhs: SwiftDataError, rhs: any Error) -> Bool { (rhs as? SwiftDataError) == lhs }
}

extension ModelContext {
    /// The author recorded with this context's saves in history (Core Data's
    /// `transactionAuthor`).
    public var author: String? {
        get { managedObjectContext.transactionAuthor }
        set { managedObjectContext.transactionAuthor = newValue }
    }

    /// The transactions the descriptor asks for, oldest first unless it sorts them. A
    /// predicate that compares `token` with a token from before purged transactions throws
    /// `SwiftDataError.historyTokenExpired`.
    public func fetchHistory<T: HistoryTransaction>(_ descriptor: HistoryDescriptor<T>) throws -> [T] {
        guard T.self == DefaultHistoryTransaction.self else {
            throw LogbookError(.invalidArgument, "a Logbook store's history is made of DefaultHistoryTransaction")
        }
        let store = container.persistentContainer
        // A token the predicate names bounds the read, and must not be expired.
        let tokens = HistoryPredicateTokens.find(in: descriptor.predicate)
        if let oldest = tokens.min() {
            do { _ = try store.history(after: oldest.persistentHistoryToken).first } catch LogbookError.Code
                .historyTokenExpired
            {
                throw SwiftDataError.historyTokenExpired
            }
        }
        let all = try store.history(after: nil).map { transaction($0) as! T }
        var result = try descriptor.predicate.map { p in try all.filter { try p.evaluate($0) } } ?? all
        if !descriptor.sortBy.isEmpty { result.sort(using: descriptor.sortBy) }
        return result
    }

    /// Purges the transactions the descriptor picks (every one without a predicate). Tokens of
    /// transactions before the newest purged one expire.
    public func deleteHistory<T: HistoryTransaction>(_ descriptor: HistoryDescriptor<T>) throws {
        let chosen = Set(
            try fetchHistory(descriptor).compactMap { ($0 as? DefaultHistoryTransaction)?.token.tokenValue })
        guard !chosen.isEmpty else { return }
        _ = try container.persistentContainer.purgeHistory(stoppingAtFirstKept: false) { version, _ in
            chosen.contains(version)
        }
    }

    /// A recorded transaction in SwiftData's form.
    func transaction(_ t: PersistentHistoryTransaction) -> DefaultHistoryTransaction {
        let storeID = container.persistentContainer.storeLayout.identity.uuid.uuidString
        let version = Int64(t.token.version)
        var changes: [HistoryChange] = []
        for (n, change) in t.changes.enumerated() {
            guard let info = container.entityInfo[change.entityName] else { continue }
            let id = PersistentIdentifier(objectID: change.changedObjectID)
            func make<M: PersistentModel>(_: M.Type) -> HistoryChange {
                switch change.changeType {
                case .insert:
                    return .insert(
                        DefaultHistoryInsert<M>(
                            changedPersistentIdentifier: id, changeIdentifier: Int64(n), transactionIdentifier: version)
                    )
                case .update:
                    let names = change.updatedProperties ?? []
                    let keyPaths = info.names.compactMap { kp, name in
                        names.contains(name) ? kp as? PartialKeyPath<M> : nil
                    }
                    return .update(
                        DefaultHistoryUpdate<M>(
                            changedPersistentIdentifier: id, changeIdentifier: Int64(n), transactionIdentifier: version,
                            updatedAttributes: keyPaths))
                case .delete:
                    var keys: [String: HistoryTombstone<M>.AnyKeyPathBox] = [:]
                    for (kp, name) in info.names { keys[name] = .init(keyPath: kp) }
                    return .delete(
                        DefaultHistoryDelete<M>(
                            changedPersistentIdentifier: id, changeIdentifier: Int64(n), transactionIdentifier: version,
                            tombstone: HistoryTombstone(values: change.tombstone ?? [:], keys: keys)))
                }
            }
            changes.append(make(info.type))
        }
        return DefaultHistoryTransaction(
            storeIdentifier: storeID, bundleIdentifier: ProcessInfo.processInfo.processName, processIdentifier: "",
            transactionIdentifier: version, token: DefaultHistoryToken(t.token, store: storeID), author: t.author,
            changes: changes, timestamp: t.timestamp)
    }
}

/// The tokens a history predicate compares with (found in its expression tree).
enum HistoryPredicateTokens {
    static func find<T>(in predicate: Predicate<T>?) -> [DefaultHistoryToken] {
        guard let predicate else { return [] }
        var found: [DefaultHistoryToken] = []
        func walk(_ value: Any, depth: Int) {
            if let token = value as? DefaultHistoryToken {
                found.append(token)
                return
            }
            guard depth < 32 else { return }
            for child in Mirror(reflecting: value).children { walk(child.value, depth: depth + 1) }
        }
        walk(predicate.expression, depth: 0)
        return found
    }
}
