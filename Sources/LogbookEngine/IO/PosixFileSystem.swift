#if canImport(Glibc)
    import Glibc
    private let systemRename = Glibc.rename
    private let systemClose = Glibc.close
#elseif canImport(Darwin)
    import Darwin
    private let systemRename = Darwin.rename
    private let systemClose = Darwin.close
#endif

/// The real file system: POSIX calls, each wrapped so that a failure becomes an `EngineError`
/// naming the call, the path and `errno`. `EINTR` is retried.
struct PosixFileSystem: FileSystem {
    package func openFile(_ path: String, writable: Bool, create: Bool, exclusive: Bool) throws -> any StorageFile {
        var flags: Int32 = writable ? O_RDWR : O_RDONLY
        flags |= O_CLOEXEC
        if create { flags |= O_CREAT }
        if exclusive { flags |= O_EXCL }
        let fd = retryingEINTR { open(path, flags, mode_t(JournalFormat.fileMode)) }
        guard fd >= 0 else { throw EngineError.systemCall("open", path: path, errno: errno) }
        return PosixStorageFile(fd: fd, path: path)
    }

    package func rename(_ from: String, to: String) throws {
        guard systemRename(from, to) == 0 else {
            throw EngineError.systemCall("rename to \(to)", path: from, errno: errno)
        }
    }

    package func removeFile(_ path: String) throws {
        guard unlink(path) == 0 else {
            if errno == ENOENT { return }
            throw EngineError.systemCall("unlink", path: path, errno: errno)
        }
    }

    package func syncDirectory(_ path: String) throws {
        let fd = retryingEINTR { open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        guard fd >= 0 else { throw EngineError.systemCall("open directory", path: path, errno: errno) }
        defer { _ = systemClose(fd) }
        guard retryingEINTR({ fsync(fd) }) == 0 else {
            throw EngineError.systemCall("fsync directory", path: path, errno: errno)
        }
    }

    package func listDirectory(_ path: String) throws -> [String] {
        guard let dir = opendir(path) else { throw EngineError.systemCall("opendir", path: path, errno: errno) }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafePointer(to: entry.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names.sorted()
    }

    package func fileExists(_ path: String) -> Bool {
        var st = stat()
        return stat(path, &st) == 0
    }

    package func availableBytes(_ path: String) -> Int? {
        var st = statvfs()
        guard statvfs(path, &st) == 0 else { return nil }
        let (bytes, overflow) = UInt64(st.f_bavail).multipliedReportingOverflow(by: UInt64(st.f_frsize))
        return overflow || bytes > UInt64(Int.max) ? Int.max : Int(bytes)
    }

    package func isDirectory(_ path: String) -> Bool {
        var st = stat()
        return stat(path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR
    }

    /// Creates the directory and any missing parents.
    package func createDirectory(_ path: String) throws {
        if mkdir(path, mode_t(JournalFormat.directoryMode)) == 0 || errno == EEXIST { return }
        guard errno == ENOENT else { throw EngineError.systemCall("mkdir", path: path, errno: errno) }
        let parent = parentDirectory(path)
        guard parent != path, parent != "/", parent != "." else {
            throw EngineError.systemCall("mkdir", path: path, errno: ENOENT)
        }
        try createDirectory(parent)
        guard mkdir(path, mode_t(JournalFormat.directoryMode)) == 0 || errno == EEXIST else {
            throw EngineError.systemCall("mkdir", path: path, errno: errno)
        }
    }

    package func lockFile(_ path: String, exclusive: Bool, create: Bool) throws -> any FileLock {
        var flags = O_RDONLY | O_CLOEXEC
        if create { flags |= O_CREAT }
        let fd = retryingEINTR { open(path, flags, mode_t(JournalFormat.fileMode)) }
        guard fd >= 0 else { throw EngineError.systemCall("open lock file", path: path, errno: errno) }
        // A lock held for a moment only (a child process between fork and exec briefly shares
        // the lock's file description) is waited for, up to a quarter of a second.
        var attempts = 0
        var failed = retryingEINTR({ flock(fd, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) }) != 0
        while failed && errno == EWOULDBLOCK && attempts < 50 {
            usleep(5_000)
            attempts += 1
            failed = retryingEINTR({ flock(fd, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) }) != 0
        }
        if failed {
            let code = errno
            _ = systemClose(fd)
            if code == EWOULDBLOCK {
                throw EngineError(
                    .locked,
                    exclusive
                        ? "the store is open in another process or Store instance; only one writer at a time"
                        : "the store is open for writing by another process", path: path)
            }
            throw EngineError.systemCall("flock", path: path, errno: code)
        }
        return PosixFileLock(fd: fd)
    }

    package func lockFileIfAlone(_ path: String) throws -> (any FileLock)? {
        let fd = retryingEINTR { open(path, O_RDONLY | O_CLOEXEC | O_CREAT, mode_t(JournalFormat.fileMode)) }
        guard fd >= 0 else { throw EngineError.systemCall("open lock file", path: path, errno: errno) }
        if retryingEINTR({ flock(fd, LOCK_EX | LOCK_NB) }) == 0 { return PosixFileLock(fd: fd) }
        let code = errno
        _ = systemClose(fd)
        if code == EWOULDBLOCK { return nil }
        throw EngineError.systemCall("flock", path: path, errno: code)
    }

    package func lockFileShared(_ path: String, timeout: Double) throws -> any FileLock {
        let fd = retryingEINTR { open(path, O_RDONLY | O_CLOEXEC | O_CREAT, mode_t(JournalFormat.fileMode)) }
        guard fd >= 0 else { throw EngineError.systemCall("open lock file", path: path, errno: errno) }
        // Polled rather than blocking, so that a process that holds the store exclusively
        // for too long (a recovery that hangs) is an error here, not a hang.
        let deadline = ContinuousClock.now + .milliseconds(Int(timeout * 1000))
        while retryingEINTR({ flock(fd, LOCK_SH | LOCK_NB) }) != 0 {
            let code = errno
            guard code == EWOULDBLOCK, ContinuousClock.now < deadline else {
                _ = systemClose(fd)
                if code == EWOULDBLOCK {
                    throw EngineError(
                        .locked, "another process has held the store exclusively for \(timeout) s (recovering it)",
                        path: path)
                }
                throw EngineError.systemCall("flock", path: path, errno: code)
            }
            usleep(2_000)
        }
        return PosixFileLock(fd: fd)
    }

    package func openCommitLock(_ path: String) throws -> any CommitLock {
        let fd = retryingEINTR { open(path, O_RDWR | O_CLOEXEC | O_CREAT, mode_t(JournalFormat.fileMode)) }
        guard fd >= 0 else { throw EngineError.systemCall("open", path: path, errno: errno) }
        return PosixCommitLock(PosixStorageFile(fd: fd, path: path))
    }
}

/// The commit lock: `flock(LOCK_EX)` on the `TAIL` file, whose descriptor also reads and
/// writes its bytes. A process that dies holding it lets go of it with its descriptors.
final class PosixCommitLock: CommitLock, Sendable {
    let storage: PosixStorageFile
    var file: any StorageFile { storage }

    init(_ storage: PosixStorageFile) { self.storage = storage }

    func lock() throws {
        guard retryingEINTR({ flock(storage.fd, LOCK_EX) }) == 0 else {
            throw EngineError.systemCall("flock", path: storage.path, errno: errno)
        }
    }

    func unlock() { _ = flock(storage.fd, LOCK_UN) }
}

@inline(__always)
private func retryingEINTR<T: BinaryInteger>(_ call: () -> T) -> T {
    while true {
        let result = call()
        if result == -1 && errno == EINTR { continue }
        return result
    }
}

/// An open file descriptor. Immutable after init; positional I/O only, so it is safe to use
/// from several threads at once (the kernel serializes what needs serializing).
final class PosixStorageFile: StorageFile, @unchecked Sendable {
    let fd: Int32
    package let path: String

    init(fd: Int32, path: String) {
        self.fd = fd
        self.path = path
    }

    deinit { _ = systemClose(fd) }

    package func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int) throws -> Int {
        guard buffer.count > 0 else { return 0 }
        let n = retryingEINTR { pread(fd, buffer.baseAddress, buffer.count, off_t(offset)) }
        guard n >= 0 else { throw EngineError.systemCall("pread", path: path, errno: errno) }
        return n
    }

    package func write(_ buffer: UnsafeRawBufferPointer, at offset: Int) throws {
        var done = 0
        while done < buffer.count {
            let n = retryingEINTR {
                pwrite(fd, buffer.baseAddress!.advanced(by: done), buffer.count - done, off_t(offset + done))
            }
            guard n > 0 else { throw EngineError.systemCall("pwrite", path: path, errno: n == 0 ? EIO : errno) }
            done += n
        }
    }

    package func sync() throws {
        #if os(Linux)
            guard retryingEINTR({ fdatasync(fd) }) == 0 else {
                throw EngineError.systemCall("fdatasync", path: path, errno: errno)
            }
        #elseif canImport(Darwin)
            // fsync on Darwin leaves the data in the drive's volatile cache; F_FULLFSYNC asks the
            // drive to write it out, which is what a durable commit promises.
            guard retryingEINTR({ fcntl(fd, F_FULLFSYNC) }) == 0 else {
                throw EngineError.systemCall("fcntl(F_FULLFSYNC)", path: path, errno: errno)
            }
        #else
            guard retryingEINTR({ fsync(fd) }) == 0 else {
                throw EngineError.systemCall("fsync", path: path, errno: errno)
            }
        #endif
    }

    package func size() throws -> Int {
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw EngineError.systemCall("fstat", path: path, errno: errno) }
        return Int(st.st_size)
    }

    package func truncate(to size: Int) throws {
        guard retryingEINTR({ ftruncate(fd, off_t(size)) }) == 0 else {
            throw EngineError.systemCall("ftruncate", path: path, errno: errno)
        }
    }

    package func preallocate(upTo size: Int) -> Bool {
        #if os(Linux)
            guard let current = try? self.size() else { return false }
            guard size > current else { return true }
            // posix_fallocate returns the error rather than setting errno; where the file
            // system has no fallocate, glibc writes a zero into each block instead.
            var result: Int32
            repeat { result = posix_fallocate(fd, off_t(current), off_t(size - current)) } while result == EINTR
            return result == 0
        #else
            return false
        #endif
    }

    package func close() {}
}

/// A held `flock`. The lock goes with the descriptor, which closes on `unlock()` or deinit.
final class PosixFileLock: FileLock, @unchecked Sendable {
    // Guarded by being written once under `unlockOnce`; fd is immutable.
    private let fd: Int32
    private let released = AtomicFlag()

    init(fd: Int32) { self.fd = fd }

    package func unlock() {
        if released.setOnce() { _ = systemClose(fd) }
    }

    /// `flock(LOCK_SH)` over the exclusive lock (not atomic: for a moment no lock is held,
    /// and a waiting writer may take it exclusively first; this one then waits).
    package func downgrade() {
        guard !released.isSet else { return }
        _ = retryingEINTR { flock(fd, LOCK_SH) }
    }

    package func tryUpgrade() -> Bool {
        guard !released.isSet else { return false }
        return retryingEINTR({ flock(fd, LOCK_EX | LOCK_NB) }) == 0
    }

    deinit { unlock() }
}
