/// The engine's only door to the operating system. Every byte the engine writes, every sync,
/// rename and removal goes through one of these calls, so that a test can put a file system
/// in its place that fails any chosen call or forgets what was never synced.
package protocol FileSystem: Sendable {
    /// Opens a file. `create` makes it if missing (mode 0600); `exclusive` fails if it exists.
    func openFile(_ path: String, writable: Bool, create: Bool, exclusive: Bool) throws -> any StorageFile
    func rename(_ from: String, to: String) throws
    func removeFile(_ path: String) throws
    /// Makes the directory's entries (creations, renames, removals) durable.
    func syncDirectory(_ path: String) throws
    func listDirectory(_ path: String) throws -> [String]
    func fileExists(_ path: String) -> Bool
    func isDirectory(_ path: String) -> Bool
    func createDirectory(_ path: String) throws
    /// Takes the advisory lock on `path` without waiting; throws `.locked` if it is held.
    func lockFile(_ path: String, exclusive: Bool, create: Bool) throws -> any FileLock
    /// Takes the advisory lock on `path` exclusively when no one else holds it (no waiting);
    /// nil when someone does.
    func lockFileIfAlone(_ path: String) throws -> (any FileLock)?
    /// Takes the advisory lock on `path` shared (creating the file), waiting while another
    /// holds it exclusively (a writer recovering the store) up to `timeout` seconds; throws
    /// `.locked` after that.
    func lockFileShared(_ path: String, timeout: Double) throws -> any FileLock
    /// Opens (creating) the file whose advisory lock writers take one at a time, around each
    /// commit, and whose bytes they read and write (`TAIL`).
    func openCommitLock(_ path: String) throws -> any CommitLock
    /// Bytes an unprivileged writer can still add to the file system holding `path`; nil when
    /// unknown.
    func availableBytes(_ path: String) -> Int?
}

/// An open file. Positional reads and writes only: no shared file offset.
package protocol StorageFile: AnyObject, Sendable {
    var path: String { get }
    /// Reads up to `buffer.count` bytes at `offset`; returns the count read (short at end of file).
    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int) throws -> Int
    /// Writes all of `buffer` at `offset`.
    func write(_ buffer: UnsafeRawBufferPointer, at offset: Int) throws
    /// Makes the file's data durable (`fdatasync`).
    func sync() throws
    func size() throws -> Int
    func truncate(to size: Int) throws
    /// Extends the file to `size` bytes with space that the file system has allocated and that
    /// reads as zeros (`posix_fallocate`); a file already as long is left alone. A write
    /// inside that space then changes neither the file's length nor its allocation, so its
    /// sync flushes the data alone and not the inode as well: about half what an appending
    /// commit's `fdatasync` costs on ext4. Returns false, having changed nothing the caller
    /// relies on, where the file system cannot (the writer then appends as before).
    func preallocate(upTo size: Int) -> Bool
    func close()
}

extension StorageFile {
    package func preallocate(upTo size: Int) -> Bool { false }
}

/// A held advisory lock; released by `unlock()` or when the holder goes away.
package protocol FileLock: AnyObject, Sendable {
    func unlock()
    /// Turns an exclusive lock into a shared one.
    func downgrade()
    /// Turns a shared lock into an exclusive one when no one else holds it (no waiting);
    /// false when someone does.
    func tryUpgrade() -> Bool
}

extension FileLock {
    /// Turns an exclusive lock into a shared one (nothing where locks are not shared).
    package func downgrade() {}
    /// Where locks are not shared, the holder is alone.
    package func tryUpgrade() -> Bool { true }
}

/// The commit lock: taken and released around each commit, by one writer at a time, across
/// processes; `file` is the lock's file, read and written under it.
package protocol CommitLock: AnyObject, Sendable {
    var file: any StorageFile { get }
    /// Waits for the lock.
    func lock() throws
    func unlock()
}

/// A commit lock within one process (file systems on which only one writer can open a store:
/// in memory, and the tests' fault-injecting one).
final class InProcessCommitLock: CommitLock, Sendable {
    let file: any StorageFile
    private let mutex = ConditionLock()

    init(file: any StorageFile) { self.file = file }

    func lock() throws { mutex.lock() }
    func unlock() { mutex.unlock() }
}

extension FileSystem {
    package func lockFileIfAlone(_ path: String) throws -> (any FileLock)? {
        do { return try lockFile(path, exclusive: true, create: true) } catch let error as EngineError
            where error.code == .locked
        {
            return nil
        }
    }

    package func lockFileShared(_ path: String, timeout: Double) throws -> any FileLock {
        try lockFile(path, exclusive: true, create: true)
    }

    package func openCommitLock(_ path: String) throws -> any CommitLock {
        InProcessCommitLock(file: try openFile(path, writable: true, create: true, exclusive: false))
    }
}

extension StorageFile {
    /// Reads exactly `count` bytes at `offset`, or fewer only at the end of the file.
    package func read(count: Int, at offset: Int) throws -> [UInt8] {
        var result = [UInt8](repeating: 0, count: count)
        var total = 0
        try result.withUnsafeMutableBytes { buffer in
            while total < count {
                let n = try read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[total...]), at: offset + total)
                if n == 0 { break }
                total += n
            }
        }
        if total < count { result.removeSubrange(total...) }
        return result
    }

    package func write(_ bytes: [UInt8], at offset: Int) throws {
        try bytes.withUnsafeBytes { try write($0, at: offset) }
    }
}

/// Joins a directory and a file name.
@inline(__always)
func joinPath(_ directory: String, _ name: String) -> String {
    directory.hasSuffix("/") ? directory + name : directory + "/" + name
}
