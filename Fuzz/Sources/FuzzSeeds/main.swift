// Writes the seed corpus of each fuzz target (Fuzz/Corpus/<target>/) from what the encoders
// really produce: swift run --package-path Fuzz FuzzSeeds
import Foundation
import FuzzModel

@testable import LogbookEngine
@testable import LogbookGraph

func write(_ bytes: [UInt8], _ directory: String, _ name: String) {
    // Fuzz/Corpus, found from this file's place (Fuzz/Sources/FuzzSeeds/main.swift).
    let fuzz = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
    let url = fuzz.appendingPathComponent("Corpus/\(directory)", isDirectory: true)
    try! FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    try! Data(bytes).write(to: url.appendingPathComponent(name))
}

// Frames: a transaction of puts, deletes and set operations, raw and LZ4, with its commit.
var transaction = Transaction()
for i in 0..<40 {
    transaction.put(
        EngineKey(keyspace: 1, id: UInt64(i)), value: Array("value \(i) \(String(repeating: "z", count: i))".utf8),
        indexKeys: [IndexKey(index: 1, orderedUInt64: UInt64(i % 7)), IndexKey(index: 2, bytes: Array("k\(i)".utf8))])
}
transaction.delete(EngineKey(keyspace: 1, id: 3))
transaction.addMembers(
    [EngineKey(keyspace: 1, id: 1), EngineKey(keyspace: 1, id: 9)], toSet: EngineKey(keyspace: 2, id: 1))
transaction.replaceMembers([EngineKey(keyspace: 1, id: 5)], ofSet: EngineKey(keyspace: 2, id: 2))
var frames: [UInt8] = []
for block in transaction.finishedBlocks() {
    Frame.append(type: .operations, payload: block, compress: true, salt: 0x0102_0304, to: &frames)
    Frame.append(type: .operations, payload: block, compress: false, salt: 0x0102_0304, to: &frames)
}
let commit = CommitRecord(
    version: 1, operationFrames: 2, operations: transaction.operationCount, firstFrameOffset: 0,
    timestampMillis: 1_700_000_000_000, syncedOffset: 0, transactionCRC: CRC32C.checksum(frames))
Frame.append(type: .commit, payload: commit.encoded(), compress: false, salt: 0x0102_0304, to: &frames)
write(frames, "frames", "transaction")

// A checkpoint stream of a small store: records, two indexes, sets.
var state = IndexState()
let reader = BlockReader(segments: SegmentSet([:]), cache: FrameCache(capacityBytes: 1 << 20))
try! state.apply(
    transaction: transaction.finishedBlocks().enumerated().map { (32 + $0.offset * 70_000, $0.element) },
    segment: 1, reader: reader)
state.version = 1
write(Checkpoint.encode(state, segment: 1, offset: 4096), "checkpoint", "small-store")

// A version-3 checkpoint's whole leaves and stream, as FuzzCheckpoint's whole-leaf path reads
// its input: the number of leaves, the leaves (512 bytes each), then the stream.
var dense = IndexState()
for i in 0..<160 { _ = dense.primary.set(EngineKey(keyspace: 1, id: UInt64(i)).rawValue, UInt64(32 + i * 16)) }
dense.version = 1
var leafBytes: [UInt8] = []
var leafStream: [UInt8] = []
Checkpoint.encode(
    dense, segment: 1, offset: 4096,
    leaf: { leafBytes += UnsafeRawBufferPointer(start: $0, count: JournalFormat.wholeLeafSize) },
    chunk: { leafStream += $0 })
write([UInt8(leafBytes.count / JournalFormat.wholeLeafSize)] + leafBytes + leafStream, "checkpoint", "whole-leaves")

// A manifest and a segment header.
var manifest = Manifest()
manifest.segments = [1, 2, 5]
manifest.checkpoint = 4
manifest.nextFileNumber = 6
write(manifest.encoded(), "manifest", "three-segments")
write(FileHeader(magic: JournalFormat.segmentMagic, number: 1, salt: 0x0102_0304).encoded(), "manifest", "header")

// Records of every attribute type.
let model = try! everythingModel()
let layout = model.layouts[0]
let values: [Any?] = [
    "text", Int16(-3), Int32(70_000), Int64.max, 2.5, Float(1.5), true, Date(timeIntervalSince1970: 1_700_000_000),
    Data([1, 2, 3]), UUID(uuid: (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16)),
    URL(string: "https://example.com/a?b=c")!, Decimal(string: "12.345")!
]
var slots = layout.defaultSlots
for (i, value) in values.enumerated() {
    slots[i] = try! FieldValue(
        value as Any, type: layout.entity.attributes[i].type, transformers: AttributeTransformers.registry)
}
slots[values.count] = .object(EngineKey(keyspace: 1, id: 7).rawValue)
var record: [UInt8] = []
RecordCodec.encode(slots, layout: layout, into: &record)
write(record, "record", "every-type")
var empty: [UInt8] = []
RecordCodec.encode(layout.defaultSlots, layout: layout, into: &empty)
write(empty, "record", "no-values")

// Predicates of the format language.
for (i, text) in [
    "age >= %d AND lastName BEGINSWITH[c] %@", "name CONTAINS[cd] 'é' OR done == YES",
    "ANY employees.age > 30", "SUBQUERY(employees, $e, $e.age < 20).@count > 0", "createdAt BETWEEN {%@, %@}",
    "NOT (name LIKE 'Item 1*') && tags IN %@", "manager.lastName MATCHES '[A-Z].*'", "TRUEPREDICATE",
    "employees.@count == 3 AND score.@avg >= 2.5", "%K == nil"
].enumerated() {
    write(Array(text.utf8), "predicate", "p\(i)")
}
print("seeds written under Corpus/")
