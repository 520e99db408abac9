/// What `Store.verify(at:)` found.
public struct VerificationReport: Sendable {
    /// Journal segments read, and their bytes.
    public var segments = 0
    /// Bytes of the segments read.
    public var segmentBytes = 0
    /// Commits replayed from the start of the journal.
    public var commits = 0
    /// The store's version (its last commit).
    public var version: UInt64 = 0
    /// Records read and compared.
    public var records = 0
    /// Secondary index entries compared, and set members compared.
    public var indexEntries = 0
    /// Set members compared.
    public var setMembers = 0
    /// The checkpoint checked against the journal (nil when there is none).
    public var checkpoint: UInt64?
    /// Bytes after the last commit that the next writable open will cut (a torn write, not damage).
    public var uncommittedTailBytes = 0
    /// Damage found, each naming the file and offset or the key; empty when the store is sound.
    public var problems: [String] = []

    /// True when nothing was found wrong.
    public var isSound: Bool { problems.isEmpty }
}

extension Store {
    /// Checks a store without changing it: every frame's checksum and every block of every
    /// segment (by replaying the whole journal from its first segment), the checkpoint, and the
    /// state the checkpoint gives (every record, index entry and set member) against the state
    /// the journal alone gives.
    ///
    /// Damage that stops an open throws `EngineError` with `.corruption` (file and offset);
    /// a directory that is not a store throws `.notAStore`. Differences between the checkpoint
    /// and the journal are listed in `problems`.
    ///
    /// ```swift
    /// let report = try Store.verify(at: "/data/items.logbook")
    /// print(report.isSound ? "sound" : report.problems.joined(separator: "\n"))
    /// ```
    ///
    /// An encrypted store is verified with its key (`encryptionKey`): every frame's tag is
    /// checked as its checksum is.
    public static func verify(
        at directory: String, encryptionKey: (any EncryptionKeyProvider)? = nil
    ) throws -> VerificationReport {
        try verify(at: directory, fileSystem: PosixFileSystem(), encryptionKey: encryptionKey)
    }

    /// `verify(at:)` through a file system of the caller's (the crash-state explorer's).
    package static func verify(
        at directory: String, fileSystem: any FileSystem, encryptionKey: (any EncryptionKeyProvider)? = nil
    ) throws -> VerificationReport {
        var options = StoreOptions()
        options.encryptionKey = try encryptionKey?.encryptionKey()
        options.readOnly = true
        options.createIfMissing = false
        options.checkpointOnClose = false
        options.compaction = .manual
        // Beside a writer (readers take no lock) the two opens below may find the store at two
        // versions: the journal's state is then taken as of the version the normal open found.
        // A compaction between them can fold that version: the check starts again.
        var attempt = 0
        while true {
            attempt += 1
            if let report = try verifyOnce(
                at: directory, fileSystem: fileSystem, options: options, lastTry: attempt == 3)
            {
                return report
            }
        }
    }

    /// One pass of `verify`: nil when the store changed under it in a way that needs another.
    private static func verifyOnce(
        at directory: String, fileSystem: any FileSystem, options: StoreOptions, lastTry: Bool
    ) throws -> VerificationReport? {
        var report = VerificationReport()
        // The checkpoint and the journal after it, as a normal open reads the store.
        let opened = try Store.open(at: directory, options: options, fileSystem: fileSystem)
        defer { try? opened.close() }
        let state = opened.snapshot()

        // The journal alone, from its first byte, as of the same version.
        var fromJournal = options
        fromJournal.ignoresCheckpoint = true
        let journal = try Store.open(at: directory, options: fromJournal, fileSystem: fileSystem)
        defer { try? journal.close() }
        var replayed = journal.snapshot()
        if replayed.version > state.version {
            do { replayed = try journal.snapshot(asOf: state.version) } catch let error as EngineError
                where error.code == .versionUnavailable && !lastTry
            {
                return nil
            }
        }
        let stats = journal.statistics()
        report.segments = stats.segments.count
        report.segmentBytes = stats.segments.reduce(0) { $0 + $1.bytes }
        report.commits = journal.recoveryReport.commitsReplayed
        report.version = state.version
        report.uncommittedTailBytes = journal.recoveryReport.truncatedBytes
        report.checkpoint = opened.recoveryReport.checkpoint
        if let problem = opened.recoveryReport.checkpointProblem {
            report.problems.append("checkpoint: \(problem)")
        }
        // The secondary-index section, checked after the open (replaced from the journal
        // when it failed: the comparison below then finds nothing to say about it).
        if let problem = state.state.secondary.checkProblem() {
            report.problems.append("checkpoint: \(problem)")
        }
        // The whole leaves, checked after the open too (mended from the journal when a frame
        // was damaged: the comparison below then finds nothing to say about them).
        if let problem = state.state.slotCheck?.problem() {
            report.problems.append("checkpoint: \(problem)")
        }
        compare(state, replayed, into: &report)
        return report
    }

    /// Compares the state a normal open gives (`a`) with the journal's (`b`).
    static func compare(_ a: Snapshot, _ b: Snapshot, into report: inout VerificationReport) {
        func note(_ problem: String) {
            if report.problems.count < 100 { report.problems.append(problem) }
        }
        if a.version != b.version { note("the checkpoint's state is version \(a.version), the journal's \(b.version)") }
        if a.keyspaces != b.keyspaces {
            note("keyspaces differ: \(a.keyspaces) from the checkpoint, \(b.keyspaces) from the journal")
        }
        for keyspace in Set(a.keyspaces).union(b.keyspaces).sorted() {
            var aKeys: [UInt64] = []
            var bKeys: [UInt64] = []
            a.forEachKey(inKeyspace: keyspace) {
                aKeys.append($0)
                return true
            }
            b.forEachKey(inKeyspace: keyspace) {
                bKeys.append($0)
                return true
            }
            if aKeys != bKeys {
                let (onlyA, onlyB) = (Set(aKeys).subtracting(bKeys), Set(bKeys).subtracting(aKeys))
                note(
                    "keyspace \(keyspace): \(aKeys.count) records from the checkpoint, \(bKeys.count) from the journal"
                        + (onlyA.min().map { "; record \(String($0, radix: 16)) only in the checkpoint's state" } ?? "")
                        + (onlyB.min().map { "; record \(String($0, radix: 16)) only in the journal's" } ?? ""))
                aKeys = aKeys.filter { !onlyA.contains($0) }
            }
            // Every record read from both (checksums and decompression checked on the way).
            for chunk in stride(from: 0, to: aKeys.count, by: 4096) {
                let keys = Array(aKeys[chunk..<min(chunk + 4096, aKeys.count)])
                var fromA = [[UInt8]](repeating: [], count: keys.count)
                do {
                    try a.forEachValue(forKeys: keys, caching: false) { i, _, raw in fromA[i] = Array(raw) }
                    try b.forEachValue(forKeys: keys, caching: false) { i, key, raw in
                        if !fromA[i].elementsEqual(raw) {
                            note(
                                "record \(String(key, radix: 16)): the checkpoint and the journal hold different values"
                            )
                        }
                    }
                } catch {
                    note("keyspace \(keyspace): \(error)")
                }
                report.records += keys.count
            }
        }
        for keyspace in Set(a.setKeyspaces).union(b.setKeyspaces).sorted() {
            var aSets: [UInt64: [UInt64]] = [:]
            a.forEachSet(inKeyspace: keyspace) {
                aSets[$0] = $1
                return true
            }
            var n = 0
            b.forEachSet(inKeyspace: keyspace) { key, members in
                if aSets[key] != members {
                    note("set \(String(key, radix: 16)): the checkpoint and the journal hold different members")
                }
                report.setMembers += members.count
                n += 1
                return true
            }
            if n != aSets.count {
                note("keyspace \(keyspace): \(aSets.count) sets from the checkpoint, \(n) from the journal")
            }
        }
        do { try compareIndexes(a, b, into: &report) } catch { note("secondary indexes: \(error)") }
    }

    /// The indexes' part of `compare`: throws when `a`'s or `b`'s indexes cannot be read.
    private static func compareIndexes(_ a: Snapshot, _ b: Snapshot, into report: inout VerificationReport) throws {
        func note(_ problem: String) {
            if report.problems.count < 100 { report.problems.append(problem) }
        }
        let (aIndexes, bIndexes) = (try a.indexes, try b.indexes)
        if aIndexes != bIndexes {
            note("indexes differ: \(aIndexes) from the checkpoint, \(bIndexes) from the journal")
        }
        for index in Set(aIndexes).intersection(bIndexes).sorted() {
            var aEntries: [([UInt8], UInt64)] = []
            try a.forEachIndexEntry(index: index) { k, pk in
                aEntries.append((Array(k), pk))
                return true
            }
            var n = 0
            var differs = false
            try b.forEachIndexEntry(index: index) { k, pk in
                if n >= aEntries.count || aEntries[n].1 != pk || !aEntries[n].0.elementsEqual(k) {
                    differs = true
                    return false
                }
                n += 1
                return true
            }
            if differs || n != aEntries.count {
                note(
                    "\(index): its entries differ between the checkpoint and the journal (\(aEntries.count) from the checkpoint)"
                )
            }
            report.indexEntries += aEntries.count
            // Each entry names a record that exists.
            for (_, pk) in aEntries where !a.contains(pk) {
                note("\(index): an entry names the missing record \(String(pk, radix: 16))")
                break
            }
        }
        // The records' own index keys, counted, match the indexes' entries.
        var expected: [IndexID: Int] = [:]
        for keyspace in a.keyspaces {
            var keys: [UInt64] = []
            a.forEachKey(inKeyspace: keyspace) {
                keys.append($0)
                return true
            }
            for key in keys {
                do {
                    for k in try a.indexKeys(forKey: key) { expected[k.index, default: 0] += 1 }
                } catch {
                    note("record \(String(key, radix: 16)): \(error)")
                }
            }
        }
        for index in Set(expected.keys).union(aIndexes).sorted() {
            let count = try a.indexCount(index: index)
            if expected[index, default: 0] != count {
                note("\(index): \(count) entries, but the records carry \(expected[index, default: 0]) keys for it")
            }
        }
    }
}
