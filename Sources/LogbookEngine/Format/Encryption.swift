import Crypto
import Foundation

/// A 256-bit key that encrypts a store (AES-256-GCM, swift-crypto).
///
/// A store opened with one (`StoreOptions.encryptionKey`) encrypts every frame it writes —
/// the journal's records, after compression, its commit records, its checkpoints — and
/// authenticates each: a wrong key is refused before anything is read, and a changed byte
/// is reported as corruption, never decrypted into other data.
///
/// ```swift
/// // A file of 32 random bytes: head -c 32 /dev/urandom > store.key
/// var options = StoreOptions()
/// options.encryptionKey = try EncryptionKey(contentsOfFile: "store.key")
/// let store = try Store.open(at: "/var/lib/app/items.logbook", options: options)
/// ```
public struct EncryptionKey: Sendable, Equatable, CustomStringConvertible {
    /// The key's 32 bytes.
    package let bytes: [UInt8]

    /// The key made of exactly 32 bytes; any other count is an `invalidArgument` error.
    public init(bytes: some Sequence<UInt8>) throws {
        let bytes = Array(bytes)
        guard bytes.count == 32 else {
            throw EngineError(.invalidArgument, "an encryption key is 32 bytes, not \(bytes.count)")
        }
        self.bytes = bytes
    }

    /// The key in a file of exactly 32 bytes (as `head -c 32 /dev/urandom > key` makes one).
    public init(contentsOfFile path: String) throws {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw EngineError(.io, "cannot read the key file", path: path)
        }
        guard data.count == 32 else {
            throw EngineError(
                .invalidArgument,
                "a key file holds exactly 32 bytes and this one holds \(data.count) (make one with: head -c 32 /dev/urandom > key)",
                path: path)
        }
        self.bytes = Array(data)
    }

    /// A new key of 32 random bytes from the system's secure generator.
    public static func random() -> EncryptionKey {
        let key = SymmetricKey(size: .bits256)
        return key.withUnsafeBytes { try! EncryptionKey(bytes: Array($0)) }
    }

    /// Never the key's bytes.
    public var description: String { "EncryptionKey(32 bytes)" }
}

/// Where a store's key comes from when it is opened: a keyring, a secrets service, a file.
/// Asked once per open; an error it throws stops the open.
///
/// ```swift
/// struct Keyring: EncryptionKeyProvider {
///     func encryptionKey() throws -> EncryptionKey { try EncryptionKey(contentsOfFile: "/run/secrets/items.key") }
/// }
/// options.encryptionKeyProvider = Keyring()
/// ```
public protocol EncryptionKeyProvider: Sendable {
    /// The key of the store being opened.
    func encryptionKey() throws -> EncryptionKey
}

extension EncryptionKey: EncryptionKeyProvider {
    public func encryptionKey() throws -> EncryptionKey { self }
}

/// A key provider made of a closure.
///
/// ```swift
/// options.encryptionKeyProvider = KeyClosure { try keychain.key(named: "items") }
/// ```
public struct KeyClosure: EncryptionKeyProvider {
    private let body: @Sendable () throws -> EncryptionKey
    public init(_ body: @escaping @Sendable () throws -> EncryptionKey) { self.body = body }
    public func encryptionKey() throws -> EncryptionKey { try body() }
}

/// A store's key with the store's key salt (from its manifest): it checks the key, signs the
/// manifest and derives each file's own key. See "Encryption" in docs/journal-format.md.
struct StoreCipher: Sendable {
    let key: EncryptionKey
    /// 16 random bytes, new whenever a store is encrypted or its key changed.
    let keySalt: [UInt8]

    /// A cipher for a store being encrypted (or given a new key): a fresh key salt.
    static func fresh(_ key: EncryptionKey) -> StoreCipher {
        StoreCipher(key: key, keySalt: (0..<16).map { _ in UInt8.random(in: 0...255) })
    }

    private func derive(_ label: String, _ extra: [UInt8] = []) -> SymmetricKey {
        HKDF<SHA256>.deriveKey(
            inputKeyMaterial: SymmetricKey(data: key.bytes), salt: keySalt,
            info: Array("logbook 1 \(label)".utf8) + extra, outputByteCount: 32)
    }

    /// 16 bytes that tell whether a key is the store's, and nothing about the key.
    func keyCheck() -> [UInt8] {
        Array(
            Array(HMAC<SHA256>.authenticationCode(for: Array("logbook key check".utf8), using: derive("check")))
                .prefix(16))
    }

    /// The manifest's signature: 16 bytes of HMAC-SHA256 over its bytes before it.
    func manifestMAC(_ bytes: some DataProtocol) -> [UInt8] {
        Array(Array(HMAC<SHA256>.authenticationCode(for: bytes, using: derive("manifest"))).prefix(16))
    }

    /// The key of one file: from its kind, number, salt and random value (its header's).
    func fileCipher(magic: [UInt8], header: FileHeader) -> FileCipher {
        var extra = magic
        withUnsafeBytes(of: header.number.littleEndian) { extra += $0 }
        withUnsafeBytes(of: header.salt.littleEndian) { extra += $0 }
        withUnsafeBytes(of: header.keyNonce.littleEndian) { extra += $0 }
        return FileCipher(key: derive("file", extra))
    }
}

/// One file's key: AES-256-GCM with a 96-bit nonce made of the position of what it seals in
/// the file (a frame's offset, a checkpoint chunk's index). A file is written at each position
/// once (see "Encryption" in docs/journal-format.md), so no nonce is used twice with one key.
struct FileCipher: Sendable {
    let key: SymmetricKey
    static let tagSize = 16

    private static func nonce(_ position: UInt64) -> AES.GCM.Nonce {
        var bytes = [UInt8](repeating: 0, count: 12)
        withUnsafeBytes(of: position.littleEndian) { for i in 0..<8 { bytes[i] = $0[i] } }
        return try! AES.GCM.Nonce(data: bytes)
    }

    /// `plaintext` encrypted, its 16-byte tag after it.
    func seal(_ plaintext: UnsafeRawBufferPointer, position: UInt64, authenticating aad: [UInt8]) -> [UInt8] {
        let message =
            plaintext.count == 0
            ? Data()
            : Data(
                bytesNoCopy: UnsafeMutableRawPointer(mutating: plaintext.baseAddress!), count: plaintext.count,
                deallocator: .none)
        let box = try! AES.GCM.seal(message, using: key, nonce: Self.nonce(position), authenticating: aad)
        var out = [UInt8]()
        out.reserveCapacity(plaintext.count + Self.tagSize)
        out.append(contentsOf: box.ciphertext)
        out.append(contentsOf: box.tag)
        return out
    }

    /// The plaintext of `sealed` (ciphertext and tag), or nil when it does not authenticate:
    /// changed bytes, another position, another file or another key.
    func open(_ sealed: UnsafeRawBufferPointer, position: UInt64, authenticating aad: [UInt8]) -> [UInt8]? {
        withOpened(sealed, position: position, authenticating: aad) { Array($0) }
    }

    /// `body` with the plaintext of `sealed` (not copied again); nil when it does not
    /// authenticate.
    func withOpened<R>(
        _ sealed: UnsafeRawBufferPointer, position: UInt64, authenticating aad: [UInt8],
        _ body: (UnsafeRawBufferPointer) throws -> R
    ) rethrows -> R? {
        guard sealed.count >= Self.tagSize else { return nil }
        let n = sealed.count - Self.tagSize
        let base = UnsafeMutableRawPointer(mutating: sealed.baseAddress!)
        let ciphertext = n == 0 ? Data() : Data(bytesNoCopy: base, count: n, deallocator: .none)
        let tag = Data(bytesNoCopy: base + n, count: Self.tagSize, deallocator: .none)
        guard let box = try? AES.GCM.SealedBox(nonce: Self.nonce(position), ciphertext: ciphertext, tag: tag),
            let plain = try? AES.GCM.open(box, using: key, authenticating: aad)
        else { return nil }
        return try plain.withUnsafeBytes(body)
    }
}
