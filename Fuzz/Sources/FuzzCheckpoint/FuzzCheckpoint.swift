// The checkpoint decoder: a (decompressed) checkpoint stream.
import FuzzDriver

@testable import LogbookEngine

@_cdecl("FuzzCheckpoint_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    logbook_run_fuzzer(argc, argv) { data, size in fuzz(data!, size) }
}

func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let stream = Array(UnsafeBufferPointer(start: data, count: size))
    fuzzWholeLeaves(stream)
    fuzzSealedFile(stream)
    // Both layouts of the primary section: files of version 3 (whole leaves named; none
    // here, where no file holds them) and of versions 1 and 2 (every key in the stream).
    for form in [Checkpoint.PrimaryForm.leaves, .entries] {
        func decode(deferring: Bool) -> Checkpoint.Loaded? {
            let bytes = stream
            let again: @Sendable (Range<Int>) -> [UInt8] = { _ in bytes }
            return bytes.withUnsafeBytes { raw -> Checkpoint.Loaded? in
                do { return try Checkpoint.decode(raw, form: form, stream: deferring ? again : nil) } catch {
                    return nil
                }
            }
        }
        let eager = decode(deferring: false)
        // An open defers the secondary indexes once their section passes a check; building
        // them later must then succeed (it traps otherwise) and give what an eager decode gives.
        let deferred = decode(deferring: true)
        precondition(
            (eager == nil) == (deferred == nil),
            "the deferred decode accepts what the eager one does not, or not what it does")
        if let eager, let deferred {
            precondition(eager.state.indexes.keys.sorted() == deferred.state.indexes.keys.sorted())
            for (id, index) in eager.state.indexes { precondition(deferred.state.indexes[id]!.count == index.count) }
        }
        // A version-3 open checks the secondary-index section after it returns, and takes the
        // indexes from the journal (here: none) when that check fails. What the eager decode
        // rejects, it must reject at open or replace; what the eager decode accepts, it must
        // accept as it is, with the same indexes.
        guard form == .leaves else { continue }
        let bytes = stream
        let later = try? Checkpoint.decode(stream, stream: { _ in bytes }, fallback: { _, _ in [:] }, atOnce: true)
        precondition(later != nil || eager == nil, "the later check rejects at open what the eager decode accepts")
        if let later {
            let problem = later.state.secondary.checkProblem()
            precondition((problem != nil) == (eager == nil), "the later check disagrees with the eager decode")
            if let eager, problem == nil {
                precondition(eager.state.indexes.keys.sorted() == later.state.indexes.keys.sorted())
                for (id, index) in eager.state.indexes { precondition(later.state.indexes[id]!.count == index.count) }
            }
        }
    }
    return 0
}

/// The whole-leaf path of a version-3 file: the input's first byte says how many whole leaves
/// (0–16) follow it, 512 bytes each, as a file's slot frames hold them; the rest is the
/// stream, whose primary section names them. The decode either rejects the input or gives a
/// map whose every entry can be read (nothing read from disk may reach a trap).
func fuzzWholeLeaves(_ input: [UInt8]) {
    guard let first = input.first else { return }
    let leafCount = Int(first) % 17
    let leafBytes = leafCount * JournalFormat.wholeLeafSize
    guard input.count >= 1 + leafBytes else { return }
    let fs = MemoryFileSystem()
    guard let file = try? fs.openFile("/leaves", writable: true, create: true, exclusive: false) else { return }
    defer { file.close() }
    if leafBytes > 0 { try? file.write(Array(input[1..<(1 + leafBytes)]), at: 0) }
    guard let image = try? FileImage(file, size: leafBytes) else { return }
    let stream = Array(input[(1 + leafBytes)...])
    let source = Checkpoint.LeafSource(image: image, frames: leafCount > 0 ? [(0, leafCount)] : [])
    let loaded = stream.withUnsafeBytes { raw -> Checkpoint.Loaded? in
        try? Checkpoint.decode(raw, form: .leaves, leaves: source)
    }
    guard let loaded else { return }
    var n = 0
    for keyspace in loaded.state.primary.keyspaces {
        _ = loaded.state.primary.forEach(inKeyspace: keyspace) { _, _ in
            n += 1
            return true
        }
    }
    withExtendedLifetime(image) { precondition(n >= 0) }
}

/// A checkpoint file of an encrypted store: the input, behind a plain checkpoint header, is
/// written through the sealing file system and read back whole (its chunks authenticated):
/// exactly the same bytes. The sealed file with one byte changed (the input's last byte says
/// where) is refused, at its open or at the read.
func fuzzSealedFile(_ input: [UInt8]) {
    let fs = MemoryFileSystem()
    let sealing = SealedFileSystem(
        base: fs,
        cipher: StoreCipher(
            key: try! EncryptionKey(bytes: [UInt8](repeating: 3, count: 32)), keySalt: [UInt8](repeating: 1, count: 16))
    )
    var header = FileHeader(magic: JournalFormat.checkpointMagic, number: 7, salt: 11)
    header.version = JournalFormat.checkpointVersion
    let plain = header.encoded() + input
    let path = "/" + Checkpoint.fileName(7)
    guard let file = try? sealing.openFile(path, writable: true, create: true, exclusive: true) else { return }
    var written = 0
    // In pieces of the sizes the input's first bytes give, as a checkpoint writes it.
    var piece = 1
    while written < plain.count {
        let n = min(plain.count - written, 1 + Int(input.isEmpty ? 0 : input[piece % input.count]) * 997)
        try! plain.withUnsafeBytes {
            try file.write(UnsafeRawBufferPointer(rebasing: $0[written..<(written + n)]), at: written)
        }
        written += n
        piece += 1
    }
    try! file.sync()
    file.close()
    let back = try! sealing.openFile(path, writable: false, create: false, exclusive: false)
    precondition(try! back.read(count: plain.count + 1, at: 0) == plain, "a sealed checkpoint reads back otherwise")
    guard !input.isEmpty, let raw = try? fs.openFile(path, writable: true, create: false, exclusive: false),
        let size = try? raw.size(), size > 0
    else { return }
    let at = Int(input[input.count - 1]) * 131 % size
    var byte = try! raw.read(count: 1, at: at)
    byte[0] ^= 0x20
    try! raw.write(byte, at: at)
    raw.close()
    // Refused at the open (the header, the last chunk) or at the read of the changed chunk.
    let changed = try? sealing.openFile(path, writable: false, create: false, exclusive: false)
    precondition((try? changed?.read(count: plain.count, at: 0)) == nil, "a changed sealed checkpoint reads")
}
