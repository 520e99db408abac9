import Dispatch
import LogbookEngine

#if canImport(Glibc)
    import Glibc
#endif

/// An in-memory file system that counts every mutating I/O step (create, write, sync,
/// truncate, rename, remove, directory sync), can fail any chosen step, and can simulate a
/// power loss: file contents fall back to what was last synced, and directory entries
/// (creations, renames, removals) to what the last directory sync made durable.
package final class FaultFileSystem: FileSystem, @unchecked Sendable {
    package enum Fault {
        case error(Int32)
        case crash
        /// At a sync: `EIO`, and the pages the sync should have written are dropped as Linux
        /// drops them (PostgreSQL's "fsyncgate"): marked clean, never written by a later sync
        /// unless written again; a power loss finds their old bytes.
        case failedSync
    }

    package struct FileData {
        var current: [UInt8] = []
        var durable: [UInt8] = []
        /// Pages (of `droppedPageSize`) a failed sync dropped.
        var dropped: Set<Int> = []
    }

    /// The page size of `FileData.dropped`.
    package static let droppedPageSize = 4096
    private var dropsAtThisSync = false

    /// Whether files can be extended with allocated zeros (`StorageFile.preallocate`), as
    /// `posix_fallocate` extends them on Linux. Off by default: tests that measure a segment
    /// by its file's length see it end with the last commit.
    package let preallocates: Bool

    package init(preallocates: Bool = false) { self.preallocates = preallocates }

    // Everything below is guarded by `mutex`.
    private let mutex = Locked(())
    private var files: [Int: FileData] = [:]
    private var entries: [String: Int] = [:]
    private var durableEntries: [String: Int] = [:]
    private var directories: Set<String> = ["/"]
    private var locks: [String: Int] = [:]
    private var lockTokens = 0
    private var nextID = 1
    package private(set) var steps = 0
    private var failAt: Int?
    private var fault: Fault = .crash
    package private(set) var crashed = false
    /// Steps at which a fault was injected (for messages).
    package private(set) var stepNames: [String] = []

    package func inject(_ fault: Fault, atStep step: Int) {
        mutex.withLock { _ in
            self.fault = fault
            failAt = step
        }
    }

    package func clearFaults() { mutex.withLock { _ in failAt = nil } }

    // MARK: Pausing a step (to hold a background task in the middle of its work)

    private var pauseCondition: (@Sendable (String, String, Int) -> Bool)?
    private let paused = DispatchSemaphore(value: 0)
    private let resumed = DispatchSemaphore(value: 0)

    /// The next write whose path and byte count satisfy `condition` blocks its thread until
    /// `resume()`.
    package func pauseNextWrite(where condition: @escaping @Sendable (String, Int) -> Bool) {
        mutex.withLock { _ in pauseCondition = { name, path, count in name == "write" && condition(path, count) } }
    }

    /// Waits until a write has paused (false after `seconds`).
    package func waitUntilPaused(seconds: Int = 30) -> Bool {
        paused.wait(timeout: .now() + .seconds(seconds)) == .success
    }

    package func resume() { resumed.signal() }

    /// Forgets a pause not reached yet and wakes `waitUntilPaused` (the task that would have
    /// paused ended first, for instance stopped by an injected fault).
    package func cancelPause() {
        let pending = mutex.withLock { _ -> Bool in
            defer { pauseCondition = nil }
            return pauseCondition != nil
        }
        if pending { paused.signal() }
    }

    private func pauseIfAsked(_ name: String, _ path: String, _ count: Int) {
        let pause = mutex.withLock { _ -> Bool in
            guard let condition = pauseCondition, condition(name, path, count) else { return false }
            pauseCondition = nil
            return true
        }
        guard pause else { return }
        paused.signal()
        resumed.wait()
    }

    /// A power loss as real disks have it (the model of ALICE and CrashMonkey): of each file's
    /// unsynced pages, an arbitrary subset reached the disk and the rest did not. The file's
    /// length is either what was last synced or what was last written; each page inside it
    /// that differs from its synced content keeps either its new bytes or its synced bytes
    /// (zeros past the synced end), chosen by `random`. Directory entries fall back to the
    /// last directory sync, locks are released, and I/O works again.
    package func powerLoss(pageSize: Int, random: inout some RandomNumberGenerator) {
        powerLoss(
            pageSize: pageSize, keepsNewLength: { _ in Bool.random(using: &random) },
            keepsNewPage: { _, _ in Bool.random(using: &random) })
    }

    /// The same, with the choices made by the caller: `keepsNewLength(path)` and
    /// `keepsNewPage(path, pageIndex)`; `keepsNewEntries` keeps the directory entries as the
    /// last operations left them (creations, renames and removals not yet made durable by a
    /// directory sync reached the disk) instead of falling back to the last directory sync.
    package func powerLoss(
        pageSize: Int, keepsNewEntries: Bool = false, keepsNewLength: (String) -> Bool,
        keepsNewPage: (String, Int) -> Bool
    ) {
        mutex.withLock { _ in
            if !keepsNewEntries { entries = durableEntries }
            durableEntries = entries
            let pathOf = Dictionary(entries.map { ($0.value, $0.key) }, uniquingKeysWith: { a, _ in a })
            files = files.filter { pathOf[$0.key] != nil }
            for id in files.keys.sorted() {
                let file = files[id]!
                guard file.current != file.durable else { continue }
                let path = pathOf[id]!
                let length = keepsNewLength(path) ? file.current.count : file.durable.count
                var result = [UInt8](repeating: 0, count: length)
                var start = 0
                while start < length {
                    let end = min(start + pageSize, length)
                    // A page a failed sync dropped is never written back: the disk keeps its old bytes.
                    let keepsNewBytes =
                        !file.dropped.contains(start / Self.droppedPageSize) && keepsNewPage(path, start / pageSize)
                    for i in start..<end {
                        if keepsNewBytes && i < file.current.count {
                            result[i] = file.current[i]
                        } else {
                            result[i] = i < file.durable.count ? file.durable[i] : 0
                        }
                    }
                    start = end
                }
                files[id] = FileData(current: result, durable: result)
            }
            locks = [:]
            crashed = false
            failAt = nil
        }
    }

    // MARK: Crash states (the crash-state explorer)

    /// A file system in the same state as this one (files, entries, what is durable), with no
    /// fault armed: each crash state the explorer opens is made on a copy.
    package func copy() -> FaultFileSystem {
        let other = FaultFileSystem(preallocates: preallocates)
        mutex.withLock { _ in
            other.files = files
            other.entries = entries
            other.durableEntries = durableEntries
            other.directories = directories
            other.nextID = nextID
        }
        return other
    }

    /// What a power loss may keep or lose now: each file's pages (of `pageSize`) whose
    /// current bytes differ from the synced ones, the files whose length differs, and whether
    /// the directory entries differ from the last directory sync.
    package func unsynced(pageSize: Int) -> (pages: [(path: String, page: Int)], lengths: [String], entries: Bool) {
        mutex.withLock { _ in
            var pages: [(String, Int)] = []
            var lengths: [String] = []
            for (path, id) in entries.sorted(by: { $0.key < $1.key }) {
                guard let file = files[id], file.current != file.durable else { continue }
                if file.current.count != file.durable.count { lengths.append(path) }
                let end = max(file.current.count, file.durable.count)
                var start = 0
                while start < end {
                    let stop = min(start + pageSize, end)
                    let new = file.current[min(start, file.current.count)..<min(stop, file.current.count)]
                    let old = file.durable[min(start, file.durable.count)..<min(stop, file.durable.count)]
                    if !new.elementsEqual(old) && !file.dropped.contains(start / Self.droppedPageSize) {
                        pages.append((path, start / pageSize))
                    }
                    start = stop
                }
            }
            return (pages, lengths, entries != durableEntries)
        }
    }

    /// The process died, the machine did not: every write is still in the page cache (also
    /// the pages a failed sync dropped, until they are evicted), locks are released, and I/O
    /// works again. A reopen in the same boot reads this.
    package func processCrash() {
        mutex.withLock { _ in
            locks = [:]
            crashed = false
            failAt = nil
        }
    }

    /// Drops everything that was never synced, releases locks, and lets I/O work again.
    package func powerLoss() {
        mutex.withLock { _ in
            entries = durableEntries
            let alive = Set(entries.values)
            files = files.filter { alive.contains($0.key) }
            for id in files.keys { files[id]!.current = files[id]!.durable }
            locks = [:]
            crashed = false
            failAt = nil
        }
    }

    private func step(_ name: String, _ path: String) throws {
        try mutex.withLock { _ in try stepLocked(name, path) }
    }

    private func stepLocked(_ name: String, _ path: String) throws {
        if crashed { throw EngineError.systemCall(name, path: path, errno: EIO) }
        steps += 1
        stepNames.append("\(name) \(path.split(separator: "/").last ?? "")")
        if steps == failAt {
            switch fault {
            case .crash:
                crashed = true
                throw EngineError.systemCall(name, path: path, errno: EIO)
            case .error(let code):
                throw EngineError.systemCall(name, path: path, errno: code)
            case .failedSync:
                dropsAtThisSync = name == "sync"
                throw EngineError.systemCall(name, path: path, errno: EIO)
            }
        }
    }

    package func openFile(_ path: String, writable: Bool, create: Bool, exclusive: Bool) throws -> any StorageFile {
        try mutex.withLock { _ in
            if let id = entries[path] {
                if exclusive { throw EngineError.systemCall("open", path: path, errno: EEXIST) }
                return FaultStorageFile(fs: self, id: id, path: path)
            }
            guard create else { throw EngineError.systemCall("open", path: path, errno: ENOENT) }
            try stepLocked("create", path)
            let id = nextID
            nextID += 1
            files[id] = FileData()
            entries[path] = id
            return FaultStorageFile(fs: self, id: id, path: path)
        }
    }

    package func rename(_ from: String, to: String) throws {
        try mutex.withLock { _ in
            try stepLocked("rename", from)
            guard let id = entries.removeValue(forKey: from) else {
                throw EngineError.systemCall("rename", path: from, errno: ENOENT)
            }
            entries[to] = id
        }
    }

    package func removeFile(_ path: String) throws {
        try mutex.withLock { _ in
            guard entries[path] != nil else { return }
            try stepLocked("remove", path)
            entries[path] = nil
        }
    }

    package func syncDirectory(_ path: String) throws {
        try mutex.withLock { _ in
            try stepLocked("syncdir", path)
            let prefix = path.hasSuffix("/") ? path : path + "/"
            durableEntries = durableEntries.filter {
                !$0.key.hasPrefix(prefix) || $0.key.dropFirst(prefix.count).contains("/")
            }
            for (name, id) in entries where name.hasPrefix(prefix) && !name.dropFirst(prefix.count).contains("/") {
                durableEntries[name] = id
            }
        }
    }

    package func listDirectory(_ path: String) throws -> [String] {
        mutex.withLock { _ in
            let prefix = path.hasSuffix("/") ? path : path + "/"
            return entries.keys.filter { $0.hasPrefix(prefix) && !$0.dropFirst(prefix.count).contains("/") }
                .map { String($0.dropFirst(prefix.count)) }.sorted()
        }
    }

    package func fileExists(_ path: String) -> Bool {
        mutex.withLock { _ in entries[path] != nil || directories.contains(path) }
    }
    package func isDirectory(_ path: String) -> Bool { mutex.withLock { _ in directories.contains(path) } }
    /// What `availableBytes` answers (nil: unknown).
    package nonisolated(unsafe) var freeSpace: Int?
    /// Reads whose path and offset this accepts fail with `EIO` (a bad sector under them).
    package nonisolated(unsafe) var failingReads: (@Sendable (String, Int) -> Bool)?
    package func availableBytes(_ path: String) -> Int? { mutex.withLock { _ in freeSpace } }
    package func createDirectory(_ path: String) throws { mutex.withLock { _ in _ = directories.insert(path) } }

    package func lockFile(_ path: String, exclusive: Bool, create: Bool) throws -> any FileLock {
        try mutex.withLock { _ in
            if locks[path] != nil { throw EngineError(.locked, "locked", path: path) }
            lockTokens += 1
            locks[path] = lockTokens
            return FaultLock(fs: self, path: path, token: lockTokens)
        }
    }

    fileprivate func unlock(_ path: String, token: Int) {
        mutex.withLock { _ in if locks[path] == token { locks[path] = nil } }
    }

    // MARK: File access for handles and tests

    fileprivate func read(_ id: Int, into buffer: UnsafeMutableRawBufferPointer, at offset: Int) -> Int {
        mutex.withLock { _ in
            guard let data = files[id]?.current, offset < data.count else { return 0 }
            let n = min(buffer.count, data.count - offset)
            data.withUnsafeBytes { buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[offset..<offset + n])) }
            return n
        }
    }

    fileprivate func write(_ id: Int, _ bytes: UnsafeRawBufferPointer, at offset: Int, path: String) throws {
        pauseIfAsked("write", path, bytes.count)
        try mutex.withLock { _ in
            try stepLocked("write", path)
            guard files[id] != nil else { return }
            if files[id]!.current.count < offset + bytes.count {
                files[id]!.current.append(
                    contentsOf: repeatElement(0, count: offset + bytes.count - files[id]!.current.count))
            }
            files[id]!.current.withUnsafeMutableBytes { dst in
                UnsafeMutableRawBufferPointer(rebasing: dst[offset..<offset + bytes.count]).copyMemory(from: bytes)
            }
            if !files[id]!.dropped.isEmpty, bytes.count > 0 {
                // Written again: dirty again, and a sync writes it.
                let p = Self.droppedPageSize
                for page in (offset / p)...((offset + bytes.count - 1) / p) { files[id]!.dropped.remove(page) }
            }
        }
    }

    fileprivate func sync(_ id: Int, path: String) throws {
        try mutex.withLock { _ in
            do {
                try stepLocked("sync", path)
            } catch {
                if dropsAtThisSync, let file = files[id] {
                    dropsAtThisSync = false
                    let p = Self.droppedPageSize
                    let end = max(file.current.count, file.durable.count)
                    for page in 0..<((end + p - 1) / p) {
                        let range = (page * p)..<min((page + 1) * p, end)
                        let new = file.current[
                            min(range.lowerBound, file.current.count)..<min(range.upperBound, file.current.count)]
                        let old = file.durable[
                            min(range.lowerBound, file.durable.count)..<min(range.upperBound, file.durable.count)]
                        if !new.elementsEqual(old) { files[id]!.dropped.insert(page) }
                    }
                }
                throw error
            }
            guard let file = files[id] else { return }
            var durable = file.current
            for page in file.dropped where page * Self.droppedPageSize < durable.count {
                // A dropped page keeps what the disk had (zeros past its old end).
                let p = Self.droppedPageSize
                for i in (page * p)..<min((page + 1) * p, durable.count) {
                    durable[i] = i < file.durable.count ? file.durable[i] : 0
                }
            }
            files[id]!.durable = durable
        }
    }

    fileprivate func size(_ id: Int) -> Int { mutex.withLock { _ in files[id]?.current.count ?? 0 } }

    fileprivate func truncate(_ id: Int, to size: Int, path: String) throws {
        try mutex.withLock { _ in
            try stepLocked("truncate", path)
            guard files[id] != nil else { return }
            if size < files[id]!.current.count {
                files[id]!.current.removeSubrange(size...)
            } else {
                files[id]!.current.append(contentsOf: repeatElement(0, count: size - files[id]!.current.count))
            }
        }
    }

    /// Extends a file with zeros, as `posix_fallocate` does (a step that can fail: it then
    /// changes nothing and answers false).
    fileprivate func preallocate(_ id: Int, upTo size: Int, path: String) -> Bool {
        mutex.withLock { _ in
            guard preallocates, (try? stepLocked("preallocate", path)) != nil, files[id] != nil else { return false }
            if files[id]!.current.count < size {
                files[id]!.current.append(contentsOf: repeatElement(0, count: size - files[id]!.current.count))
            }
            return true
        }
    }

    /// The current bytes of a file (tests use this to damage files).
    /// The names of the files in `directory` now.
    package func files(in directory: String) -> [String] {
        mutex.withLock { _ in
            entries.keys.filter { $0.hasPrefix(directory + "/") }.map { String($0.dropFirst(directory.count + 1)) }
        }
    }

    package func contents(_ path: String) -> [UInt8]? {
        mutex.withLock { _ in entries[path].flatMap { files[$0]?.current } }
    }

    package func setContents(_ path: String, _ bytes: [UInt8]) {
        mutex.withLock { _ in
            if let id = entries[path] { files[id] = FileData(current: bytes, durable: bytes) }
        }
    }
}

package final class FaultStorageFile: StorageFile, @unchecked Sendable {
    package let fs: FaultFileSystem
    package let id: Int
    package let path: String
    package init(fs: FaultFileSystem, id: Int, path: String) {
        self.fs = fs
        self.id = id
        self.path = path
    }
    package func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int) throws -> Int {
        if let failing = fs.failingReads, failing(path, offset) {
            throw EngineError.systemCall("pread", path: path, errno: EIO)
        }
        return fs.read(id, into: buffer, at: offset)
    }
    package func write(_ buffer: UnsafeRawBufferPointer, at offset: Int) throws {
        try fs.write(id, buffer, at: offset, path: path)
    }
    package func sync() throws { try fs.sync(id, path: path) }
    package func size() throws -> Int { fs.size(id) }
    package func truncate(to size: Int) throws { try fs.truncate(id, to: size, path: path) }
    package func preallocate(upTo size: Int) -> Bool { fs.preallocate(id, upTo: size, path: path) }
    package func close() {}
}

package final class FaultLock: FileLock, @unchecked Sendable {
    package let fs: FaultFileSystem
    package let path: String
    package let token: Int
    private let released = Locked(false)
    package init(fs: FaultFileSystem, path: String, token: Int) {
        self.fs = fs
        self.path = path
        self.token = token
    }
    package func unlock() {
        let first = released.withLock { r -> Bool in
            defer { r = true }
            return !r
        }
        if first { fs.unlock(path, token: token) }
    }
}
