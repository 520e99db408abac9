#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// An error of the storage engine.
///
/// Every error names what went wrong (`code`), says it in words (`message`) and, where it
/// applies, the file and byte offset and the system error number. Match on the code:
///
/// ```swift
/// do { _ = try Store.open(at: path) }
/// catch EngineError.Code.locked { print("another process is writing to \(path)") }
/// ```
public struct EngineError: Error, Sendable, CustomStringConvertible {
    /// An extensible error code.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        /// The code's name, for example `"corruption"`.
        public let rawValue: String
        /// A code named `rawValue`.
        public init(_ rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// The directory exists but is not a Logbook store (no manifest, or foreign files).
        public static let notAStore = Code("notAStore")
        /// The store was written with a format version this build does not read.
        public static let unsupportedFormat = Code("unsupportedFormat")
        /// Committed data is damaged (a bad checksum or malformed record before the last commit).
        public static let corruption = Code("corruption")
        /// Another process (or another `Store` in this process) holds the store's lock.
        public static let locked = Code("locked")
        /// A system call failed.
        public static let io = Code("io")
        /// The disk is full (`ENOSPC`).
        public static let diskFull = Code("diskFull")
        /// An earlier write or sync failed; the store refuses writes until it is reopened.
        public static let failed = Code("failed")
        /// A write was attempted on a store opened read-only.
        public static let readOnly = Code("readOnly")
        /// The store was closed.
        public static let closed = Code("closed")
        /// An argument is out of range (an option outside its bounds, an id past 48 bits…).
        public static let invalidArgument = Code("invalidArgument")
        /// A transaction breaks a limit of the format (a value, an index key, the index keys
        /// of one put, an operation, a segment); the message names the limit. Nothing of the
        /// transaction was written.
        public static let transactionTooLarge = Code("transactionTooLarge")
        /// A commit made with `expectingVersion` would have been given another version (some
        /// other commit came first). Nothing of the transaction was written.
        public static let versionMismatch = Code("versionMismatch")
        /// A read as of a version the store no longer holds (compaction folded it into a later
        /// one) or does not hold yet (after the last commit).
        public static let versionUnavailable = Code("versionUnavailable")

        /// The store is encrypted and was opened without a key.
        public static let keyRequired = Code("keyRequired")
        /// The key given is not the encrypted store's key.
        public static let wrongKey = Code("wrongKey")
        /// A key was given for a store that is not encrypted (`Store.changeKey` encrypts one).
        public static let notEncrypted = Code("notEncrypted")

        /// Whether `error` is an `EngineError` with this code, for `catch` patterns.
        public static func ~= (code: Code, error: any Error) -> Bool {
            (error as? EngineError)?.code == code
        }
    }

    /// What kind of error it is.
    public var code: Code
    /// What went wrong, in words.
    public var message: String
    /// The file concerned, if any.
    public var path: String?
    /// The byte offset in `path` where the problem was found, if any.
    public var offset: Int?
    /// The system error number, if a system call failed.
    public var errno: Int32?

    /// An error with its code, message, and where it happened.
    public init(_ code: Code, _ message: String, path: String? = nil, offset: Int? = nil, errno: Int32? = nil) {
        self.code = code
        self.message = message
        self.path = path
        self.offset = offset
        self.errno = errno
    }

    public var description: String {
        var text = "\(code): \(message)"
        if let path {
            text += " (\(path)"
            if let offset { text += " at offset \(offset)" }
            text += ")"
        }
        if let errno { text += " [errno \(errno): \(String(cString: strerror(errno)))]" }
        return text
    }

    static func corruption(_ message: String, path: String, offset: Int) -> EngineError {
        EngineError(.corruption, message, path: path, offset: offset)
    }

    package static func systemCall(_ call: String, path: String, errno: Int32) -> EngineError {
        EngineError(errno == ENOSPC ? .diskFull : .io, "\(call) failed", path: path, errno: errno)
    }
}
