import ArgumentParser
import Foundation
import LogbookEngine
import LogbookGraph

/// `--key-file PATH`: the key of an encrypted store, a file of exactly 32 bytes.
struct KeyOption: ParsableArguments {
    @Option(
        name: .customLong("key-file"),
        help: ArgumentHelp(
            "The key of an encrypted store: a file of 32 bytes (head -c 32 /dev/urandom > key).", valueName: "path"))
    var keyFile: String?

    /// The key in the file, or nil without `--key-file`.
    func key() throws -> EncryptionKey? { try keyFile.map { try EncryptionKey(contentsOfFile: $0) } }
}

/// Opens a store read-only with the model it records; the context reads the store as it
/// was at version `asOf` when one is given (`snapshot(asOf:)`).
func openRecorded(_ directory: String, asOf: UInt64? = nil, key: EncryptionKey? = nil) throws -> (
    PersistentContainer, ManagedObjectContext
) {
    let model = try ManagedObjectModel(recordedIn: directory, encryptionKey: key)
    var options = ContainerOptions()
    options.readOnly = true
    options.encryptionKey = key
    let container = try PersistentContainer(name: "inspect", model: model, directory: directory, options: options)
    if let asOf { return (container, try container.snapshot(asOf: PersistentHistoryToken(version: asOf))) }
    return (container, container.newContext(concurrencyType: .confinement))
}

/// The help of `--as-of`, shared by the commands that read.
let asOfHelp = ArgumentHelp(
    "Read the store as it was at this version (`logbook history` lists them; versions before the last compaction are gone).",
    valueName: "version")

/// Prints one error line and exits non-zero (no stack trace).
func fail(_ error: any Error, code: Int32 = 1) -> Never {
    printError("logbook: \(error)")
    exit(code)
}

func render(_ v: Any?) -> String {
    switch v {
    case nil: return "nil"
    case let s as String: return "\"\(s)\""
    case let d as Date: return exactISO(d)
    case let d as Data: return d.base64EncodedString()
    default: return "\(v!)"
    }
}

func escape(_ s: String) -> String {
    var out = ""
    for c in s.unicodeScalars {
        switch c {
        case "\"": out += "\\\""
        case "\\": out += "\\\\"
        case "\n": out += "\\n"
        case "\t": out += "\\t"
        default:
            if c.value < 0x20 { out += String(format: "\\u%04x", c.value) } else { out.unicodeScalars.append(c) }
        }
    }
    return out
}

func jsonValue(_ v: Any?) -> String {
    switch v {
    case nil: return "null"
    case let b as Bool: return b ? "true" : "false"
    case let s as String: return "\"\(escape(s))\""
    case let d as Date: return "\"\(exactISO(d))\""
    case let d as Data: return "\"\(d.base64EncodedString())\""
    case let x as Int16: return "\(x)"
    case let x as Int32: return "\(x)"
    case let x as Int64: return "\(x)"
    case let x as Double: return x.isFinite ? "\(x)" : "null"
    case let x as Float: return x.isFinite ? "\(x)" : "null"
    default: return "\"\(escape("\(v!)"))\""
    }
}

/// Standard output in 64 KiB writes.
struct OutputBuffer {
    private var bytes: [UInt8] = []

    init() { bytes.reserveCapacity(1 << 16) }

    mutating func write(_ s: String) {
        bytes.append(contentsOf: s.utf8)
        if bytes.count >= 1 << 16 { flush() }
    }

    mutating func flush() {
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { Foundation.write(1, $0.baseAddress!, $0.count) }
            if n <= 0 { break }
            offset += n
        }
        bytes.removeAll(keepingCapacity: true)
    }
}

// Used from the main thread only (the tool is single-threaded).
/// A date in ISO 8601 (UTC) with every digit its interval needs to be read back bit for bit:
/// the whole seconds, then the fraction's shortest decimal digits (`818022387.7552129` seconds
/// since 2001 is `2026-12-02T10:26:27.7552129Z`). An interval whose shortest form has an
/// exponent (beyond ±2^53 seconds, or a fraction below 10⁻⁴ s written as `5e-324`) is written
/// as that number of seconds since 2001, which reads back as exactly.
func exactISO(_ date: Date) -> String {
    let t = date.timeIntervalSinceReferenceDate
    guard t.isFinite else { return "\(t)" }
    let whole = t.rounded(.down)
    let fraction = t - whole  // exact: the low bits of `t`
    let digits = "\(fraction)"
    guard !"\(t)".contains("e"), !digits.contains("e"), digits.hasPrefix("0.") else { return "\(t)" }
    let seconds = isoSeconds.string(from: Date(timeIntervalSinceReferenceDate: whole))
    // "…:27Z" → "…:27.7552129Z"; a zero fraction is left out.
    return fraction == 0 ? seconds : String(seconds.dropLast()) + digits.dropFirst() + "Z"
}

nonisolated(unsafe) let isoSeconds: ISO8601DateFormatter = {
    let f = ISO8601DateFormatter()
    f.formatOptions = [.withInternetDateTime]
    return f
}()

nonisolated(unsafe) let isoFormatter: ISO8601DateFormatter = {
    let f = ISO8601DateFormatter()
    f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
    return f
}()
