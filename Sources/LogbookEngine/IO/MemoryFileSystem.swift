import Foundation

/// A file system in memory, for stores that live as long as their `Store` (SwiftData's
/// `isStoredInMemoryOnly`, tests, previews): the same journal, checkpoints and compaction as on
/// disk, nothing written to a file. Syncs do nothing; every path is this instance's own.
final class MemoryFileSystem: FileSystem, Sendable {
    private struct State {
        var files: [String: MemoryFile] = [:]
        var directories: Set<String> = ["/"]
        var locks: Set<String> = []
    }
    private let state = Locked(State())

    package func openFile(_ path: String, writable: Bool, create: Bool, exclusive: Bool) throws -> any StorageFile {
        try state.withLock { s in
            if let file = s.files[path] {
                if exclusive { throw EngineError.systemCall("open", path: path, errno: EEXIST) }
                return file
            }
            guard create else { throw EngineError.systemCall("open", path: path, errno: ENOENT) }
            let file = MemoryFile(path: path)
            s.files[path] = file
            return file
        }
    }

    package func rename(_ from: String, to: String) throws {
        try state.withLock { s in
            guard let file = s.files.removeValue(forKey: from) else {
                throw EngineError.systemCall("rename to \(to)", path: from, errno: ENOENT)
            }
            file.path = to
            s.files[to] = file
        }
    }

    package func removeFile(_ path: String) throws { state.withLock { s in _ = s.files.removeValue(forKey: path) } }

    package func syncDirectory(_ path: String) throws {}

    package func listDirectory(_ path: String) throws -> [String] {
        try state.withLock { s in
            guard s.directories.contains(path) else {
                throw EngineError.systemCall("opendir", path: path, errno: ENOENT)
            }
            let prefix = path.hasSuffix("/") ? path : path + "/"
            return s.files.keys.filter { $0.hasPrefix(prefix) && !$0.dropFirst(prefix.count).contains("/") }
                .map { String($0.dropFirst(prefix.count)) }.sorted()
        }
    }

    package func fileExists(_ path: String) -> Bool {
        state.withLock { s in s.files[path] != nil || s.directories.contains(path) }
    }

    package func isDirectory(_ path: String) -> Bool { state.withLock { s in s.directories.contains(path) } }

    package func createDirectory(_ path: String) throws { _ = state.withLock { s in s.directories.insert(path) } }

    package func lockFile(_ path: String, exclusive: Bool, create: Bool) throws -> any FileLock {
        try state.withLock { s in
            guard s.locks.insert(path).inserted else {
                throw EngineError(.locked, "the in-memory store is already open", path: path)
            }
        }
        let state = self.state
        return MemoryFileLock { state.withLock { s in _ = s.locks.remove(path) } }
    }

    package func availableBytes(_ path: String) -> Int? { nil }
}

final class MemoryFile: StorageFile, Sendable {
    private let contents = Locked<[UInt8]>([])
    private let name: Locked<String>

    init(path: String) { name = Locked(path) }

    package var path: String {
        get { name.withLock { $0 } }
        set { name.withLock { $0 = newValue } }
    }

    package func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int) throws -> Int {
        contents.withLock { bytes in
            guard offset < bytes.count else { return 0 }
            let n = min(buffer.count, bytes.count - offset)
            bytes.withUnsafeBytes { source in
                buffer.baseAddress!.copyMemory(from: source.baseAddress! + offset, byteCount: n)
            }
            return n
        }
    }

    package func write(_ buffer: UnsafeRawBufferPointer, at offset: Int) throws {
        contents.withLock { bytes in
            let end = offset + buffer.count
            if bytes.count < end { bytes.append(contentsOf: repeatElement(0, count: end - bytes.count)) }
            bytes.withUnsafeMutableBytes { target in
                guard let base = buffer.baseAddress, buffer.count > 0 else { return }
                (target.baseAddress! + offset).copyMemory(from: base, byteCount: buffer.count)
            }
        }
    }

    package func sync() throws {}
    package func size() throws -> Int { contents.withLock { $0.count } }
    package func truncate(to size: Int) throws {
        contents.withLock { bytes in
            if size < bytes.count {
                bytes.removeSubrange(size...)
            } else {
                bytes.append(contentsOf: repeatElement(0, count: size - bytes.count))
            }
        }
    }
    package func close() {}
}

final class MemoryFileLock: FileLock, Sendable {
    private let release: @Sendable () -> Void
    init(_ release: @escaping @Sendable () -> Void) { self.release = release }
    package func unlock() { release() }
}
