import Foundation
import LogbookTestSupport
import Testing

@testable import LogbookEngine

/// Small commits are written into space allocated ahead of them (so that their syncs flush
/// data, not the inode): the zeros after the last commit are the end of the journal to every
/// reader, never damage, and a sealed segment or a closed store ends with its last commit.
@Suite struct PreallocationTests {
    static let directory = "/store"
    static func segment(_ number: Int) -> String {
        "/store/" + JournalFormat.segmentPrefix + hex12(UInt64(number)) + JournalFormat.segmentSuffix
    }

    func commitValues(_ store: Store, _ range: Range<Int>, prefix: String = "value") throws {
        for i in range {
            var t = Transaction()
            t.put(key(1, UInt64(i)), value: bytes("\(prefix) \(i)"))
            try store.commit(t)
        }
    }

    func expected(_ range: Range<Int>, prefix: String = "value") -> [UInt64: String] {
        Dictionary(uniqueKeysWithValues: range.map { (UInt64($0), "\(prefix) \($0)") })
    }

    /// On disk: while the store is open its segment is longer than its journal (allocated
    /// ahead), statistics count the journal, and a close leaves the file ending at the last
    /// commit, which the store opens from with nothing cut.
    @Test func aClosedStoreEndsAtItsLastCommit() throws {
        let temporary = TemporaryDirectory()
        defer { temporary.cleanUp() }
        let path = temporary.store()
        let store = try Store.open(at: path, options: quietOptions(.full))
        try commitValues(store, 0..<20)
        let segmentPath = path + "/" + SegmentFile.fileName(1)
        let journalEnd = try #require(store.statistics().segments.last).bytes
        let whileOpen = try #require(try FileManager.default.attributesOfItem(atPath: segmentPath)[.size] as? Int)
        #expect(journalEnd > JournalFormat.fileHeaderSize && journalEnd < 4096)
        #expect(whileOpen >= Store.preallocationBytes, "the segment is allocated ahead of small commits")
        #expect(store.statistics().fileBytes == journalEnd, "statistics count the journal, not the space after it")
        try store.close()
        let closed = try #require(try FileManager.default.attributesOfItem(atPath: segmentPath)[.size] as? Int)
        #expect(closed == journalEnd)
        let reopened = try Store.open(at: path, options: quietOptions(.full))
        #expect(try contents(reopened.snapshot()) == expected(0..<20))
        #expect(reopened.recoveryReport.truncatedBytes == 0)
        try reopened.close()
        let report = try Store.verify(at: path)
        #expect(report.isSound, "\(report.problems)")
        #expect(report.uncommittedTailBytes == 0)
    }

    /// The files of a store whose process stopped without closing it (copied as they are, the
    /// zeros after the last commit included) open with every commit and nothing reported cut;
    /// the next commits overwrite the zeros, and the store opens again with all of them.
    @Test func zerosLeftByAProcessThatDidNotCloseAreTheEnd() throws {
        let temporary = TemporaryDirectory()
        defer { temporary.cleanUp() }
        let path = temporary.store()
        let store = try Store.open(at: path, options: quietOptions(.full))
        try commitValues(store, 0..<50)
        let copy = temporary.store("copy")
        try FileManager.default.createDirectory(atPath: copy, withIntermediateDirectories: false)
        for name in try FileManager.default.contentsOfDirectory(atPath: path) where name != "LOCK" {
            writeFileBytes(copy + "/" + name, fileBytes(path + "/" + name))
        }
        try store.close()
        let copied = fileBytes(copy + "/" + SegmentFile.fileName(1))
        #expect(copied.count >= Store.preallocationBytes && copied.last == 0, "the copy holds the zeros")

        let verified = try Store.verify(at: copy)
        #expect(verified.isSound, "\(verified.problems)")
        #expect(verified.uncommittedTailBytes == 0)
        let reopened = try Store.open(at: copy, options: quietOptions(.full))
        #expect(try contents(reopened.snapshot()) == expected(0..<50))
        #expect(reopened.recoveryReport.truncatedBytes == 0, "\(reopened.recoveryReport)")
        try commitValues(reopened, 50..<60)
        try reopened.close()
        let again = try Store.open(at: copy, options: quietOptions(.full))
        #expect(try contents(again.snapshot()) == expected(0..<60))
        #expect(again.recoveryReport.truncatedBytes == 0)
        try again.close()
    }

    /// A power loss after commits into allocated space: what was synced is there, the zeros
    /// after it are no damage, and writing goes on after the last commit.
    @Test func aPowerLossInsideAllocatedSpaceKeepsEveryCommit() throws {
        let fs = FaultFileSystem(preallocates: true)
        let store = try Store.open(at: Self.directory, options: quietOptions(.full), fileSystem: fs)
        try commitValues(store, 0..<30)
        let end = try #require(store.statistics().segments.last).bytes
        #expect(fs.contents(Self.segment(1))!.count == Store.preallocationBytes + JournalFormat.fileHeaderSize)
        fs.powerLoss()
        let reopened = try Store.open(at: Self.directory, options: quietOptions(.full), fileSystem: fs)
        #expect(try contents(reopened.snapshot()) == expected(0..<30))
        #expect(reopened.recoveryReport.truncatedBytes == 0)
        #expect(try #require(reopened.statistics().segments.last).bytes == end)
        try commitValues(reopened, 30..<40)
        fs.powerLoss()
        let again = try Store.open(at: Self.directory, options: quietOptions(.full), fileSystem: fs)
        #expect(try contents(again.snapshot()) == expected(0..<40))
    }

    /// `count` incompressible bytes (LZ4 cannot shrink them).
    func noise(_ seed: UInt64, _ count: Int) -> [UInt8] {
        var random = SeededGenerator(seed: seed)
        return (0..<count).map { _ in UInt8.random(in: 0...255, using: &random) }
    }

    /// Zeros after a transaction's frames whose commit record never reached the disk are its
    /// torn tail: cut back to the last commit and reported, not taken for allocated space.
    @Test func zerosAfterATransactionWithoutItsCommitRecordAreATornTail() throws {
        let fs = FaultFileSystem(preallocates: true)
        let store = try Store.open(at: Self.directory, options: quietOptions(.full), fileSystem: fs)
        try commitValues(store, 0..<10)
        let end = try #require(store.statistics().segments.last).bytes
        let allocated = fs.contents(Self.segment(1))!.count
        var torn = Transaction()
        for i in 0..<40 { torn.put(key(2, UInt64(i)), value: noise(UInt64(i), 8 << 10)) }
        // Written into the allocated space in one write; the power fails at its sync.
        fs.inject(.crash, atStep: fs.steps + 2)
        #expect(throws: EngineError.self) { try store.commit(torn) }
        let written = fs.contents(Self.segment(1))!
        #expect(written.count == allocated, "the transaction went into allocated space")
        var last = written.count - 1
        while written[last] == 0 { last -= 1 }
        #expect(last - end > 300 << 10)
        // Every page of it reached the disk but the one holding its commit record.
        fs.powerLoss(
            pageSize: 4096, keepsNewLength: { _ in true },
            keepsNewPage: { path, page in !(path == Self.segment(1) && page == last / 4096) })
        let reopened = try Store.open(at: Self.directory, options: quietOptions(.full), fileSystem: fs)
        #expect(try contents(reopened.snapshot()) == expected(0..<10))
        #expect(reopened.snapshot().count(inKeyspace: 2) == 0, "nothing of the torn transaction is visible")
        #expect(reopened.recoveryReport.truncatedBytes == allocated - end, "\(reopened.recoveryReport)")
        #expect(fs.contents(Self.segment(1))!.count == end, "cut back to the last commit")
        try commitValues(reopened, 10..<12)
        try reopened.close()
        let again = try Store.open(at: Self.directory, options: quietOptions(.full), fileSystem: fs)
        #expect(try contents(again.snapshot()) == expected(0..<12))
    }

    /// A byte that is not zero far after the last commit makes the tail damage, judged as
    /// before (here a torn tail: no later commit record proves it was synced), not space.
    @Test func aStrayByteAfterTheZerosIsNotAllocatedSpace() throws {
        let fs = FaultFileSystem(preallocates: true)
        let store = try Store.open(at: Self.directory, options: quietOptions(.full), fileSystem: fs)
        try commitValues(store, 0..<10)
        let end = try #require(store.statistics().segments.last).bytes
        var segment = fs.contents(Self.segment(1))!
        segment[segment.count - 1] = 0x5A
        fs.setContents(Self.segment(1), segment)
        fs.powerLoss()
        let reopened = try Store.open(at: Self.directory, options: quietOptions(.full), fileSystem: fs)
        #expect(try contents(reopened.snapshot()) == expected(0..<10))
        #expect(reopened.recoveryReport.truncatedBytes == segment.count - end)
        #expect(reopened.recoveryReport.truncationReason == "zero fill")
    }

    /// A segment is sealed at its last commit: the sealed segments of a store that rolled
    /// over many times hold no zeros, and the store verifies and opens with every commit.
    @Test func aSealedSegmentEndsAtItsLastCommit() throws {
        let fs = FaultFileSystem(preallocates: true)
        var options = quietOptions(.full)
        options.segmentSize = 16 << 10
        options.allowsTinySegments = true
        let store = try Store.open(at: Self.directory, options: options, fileSystem: fs)
        for i in 0..<200 {
            var t = Transaction()
            t.put(key(1, UInt64(i)), value: noise(UInt64(i), 400))
            try store.commit(t)
        }
        let statistics = store.statistics()
        #expect(statistics.segments.count > 3)
        for segment in statistics.segments.dropLast() {
            let file = try #require(fs.contents(Self.segment(Int(segment.number))))
            #expect(file.count == segment.bytes, "sealed segment \(segment.number) ends at its last commit")
            #expect(file.count <= options.segmentSize + 512)
        }
        fs.powerLoss()
        let reopened = try Store.open(at: Self.directory, options: options, fileSystem: fs)
        #expect(try contents(reopened.snapshot()).count == 200)
        #expect(reopened.recoveryReport.truncatedBytes == 0)
    }
}

extension PreallocationTests {
    /// An allocation that fails (a full disk, a file system without `fallocate`) is not a
    /// failed commit: the commit appends as before and the store goes on.
    @Test func aFailedAllocationIsNotAFailedCommit() throws {
        let fs = FaultFileSystem(preallocates: true)
        let store = try Store.open(at: Self.directory, options: quietOptions(.full), fileSystem: fs)
        // The first commit's steps: allocate (fails), write, sync, the synced offset's hint
        // and the end of the last commit for other writers.
        fs.inject(.error(ENOSPC), atStep: fs.steps + 1)
        try commitValues(store, 0..<1)
        #expect(
            fs.stepNames.suffix(5).map { $0.split(separator: " ").first.map(String.init) } == [
                "preallocate", "write", "sync", "write", "write"
            ])
        #expect(fs.stepNames.dropLast().last?.hasSuffix(JournalFormat.syncedFileName) == true)
        #expect(fs.stepNames.last?.hasSuffix(JournalFormat.tailFileName) == true)
        let end = try #require(store.statistics().segments.last).bytes
        #expect(fs.contents(Self.segment(1))!.count == end, "nothing was allocated: the commit appended")
        // The next commit allocates.
        try commitValues(store, 1..<5)
        #expect(fs.contents(Self.segment(1))!.count == Store.preallocationBytes + end)
        let finalEnd = try #require(store.statistics().segments.last).bytes
        try store.close()
        #expect(fs.contents(Self.segment(1))!.count == finalEnd, "the close gave the space back")
        let reopened = try Store.open(at: Self.directory, options: quietOptions(.full), fileSystem: fs)
        #expect(try contents(reopened.snapshot()) == expected(0..<5))
        #expect(reopened.recoveryReport.truncatedBytes == 0)
    }
}
