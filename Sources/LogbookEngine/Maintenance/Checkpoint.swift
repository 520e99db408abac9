import Dispatch
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Checkpoints: the indexes written out so that an open replays only the journal after them.
///
/// A checkpoint file is a 32-byte header (magic "LBKCKPT\0") followed by `checkpointData`
/// frames (LZ4-compressed chunks of one serialized stream, at most 1 MiB each before
/// compression) and a `checkpointEnd` frame (chunk count u32 · stream length u64). It is
/// written under a temporary name, synced, renamed, and only then named by a new manifest.
enum Checkpoint {
    static let chunkSize = 1 << 20

    static func fileName(_ number: UInt64) -> String {
        JournalFormat.checkpointPrefix + hex12(number) + JournalFormat.checkpointSuffix
    }

    struct Loaded {
        var state: IndexState
        /// The journal position the state covers: replay continues here.
        var segment: UInt64
        var offset: Int
    }

    /// A checkpoint stream that does not decode: which section, and where in the
    /// (uncompressed) stream the reader was when it gave up.
    struct Malformed: Error, CustomStringConvertible {
        var section: String
        var offset: Int
        var reason: String
        var description: String { "\(section) section malformed at stream offset \(offset): \(reason)" }
    }

    /// A result written by one thread and read after it joined (sent as `UncheckedSendable`).
    final class ResultBox<T> {
        var value: T?
    }

    /// A reason a section does not decode (wrapped into `Malformed` with its offset).
    struct DecodeFailure: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }
}
