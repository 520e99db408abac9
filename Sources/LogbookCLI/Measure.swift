import LogbookEngine

#if canImport(Glibc)
    import Glibc
#endif

/// Peak resident set size of this process, in MiB (VmHWM).
func peakRSSMegabytes() -> Int { statusMegabytes("VmHWM:") }

/// Starts the peak resident memory (VmHWM) again from the current resident memory (Linux:
/// writing 5 to /proc/self/clear_refs), so that the next `peakRSSMegabytes()` is the peak of
/// what ran since. Where that is not possible the peak stays the process's.
func resetPeakRSS() {
    guard let f = fopen("/proc/self/clear_refs", "w") else { return }
    fputs("5", f)
    fclose(f)
}

/// Resident set size of this process now, in MiB (VmRSS).
func currentRSSMegabytes() -> Int { statusMegabytes("VmRSS:") }

/// A figure of /proc/self/status in kB, as MiB.
private func statusMegabytes(_ field: String) -> Int {
    guard let f = fopen("/proc/self/status", "r") else { return 0 }
    defer { fclose(f) }
    var line = [CChar](repeating: 0, count: 256)
    while fgets(&line, Int32(line.count), f) != nil {
        let s = line.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        if s.hasPrefix(field) {
            let digits = s.filter(\.isNumber)
            return (Int(digits) ?? 0) / 1024
        }
    }
    return 0
}

func now() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}

/// Bytes of all files in a directory (not recursive).
func directoryBytes(_ path: String) -> Int {
    guard let dir = opendir(path) else { return 0 }
    defer { closedir(dir) }
    var total = 0
    while let entry = readdir(dir) {
        let name = withUnsafePointer(to: entry.pointee.d_name) {
            $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
        }
        if name == "." || name == ".." { continue }
        var st = stat()
        if stat(path + "/" + name, &st) == 0 && (st.st_mode & S_IFMT) == S_IFREG { total += Int(st.st_size) }
    }
    return total
}

/// A fresh directory under the system's temporary directory.
func temporaryStorePath(_ prefix: String) -> String {
    let base = getenv("TMPDIR").map { String(cString: $0) } ?? "/tmp"
    var template = Array("\(base)/\(prefix)-XXXXXX".utf8CString)
    _ = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
    return template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) } + "/store"
}

/// How phase lines are printed: `PHASE key=value …`, or one JSON object per line.
nonisolated(unsafe) var reportsJSON = false  // set once from the command line, before any work
/// `logbook bench --history`: the workloads' containers record history (set once, before any work).
nonisolated(unsafe) var tracksHistory = false
/// `logbook bench --key-file`: the workloads' stores are encrypted with this key (set once,
/// before any work), and the file it came from, for child processes.
nonisolated(unsafe) var benchKey: (key: EncryptionKey, file: String)?
/// `logbook bench --segment-size`: the Items stores' segment size (nil: the default).
nonisolated(unsafe) var itemsSegmentSize: Int?

/// Prints one phase line: `PHASE key=value …` (or `{"phase": PHASE, "key": value, …}`).
/// Every line says the process's peak resident memory so far (`peak_rss_mb`), measured here
/// when the phase did not measure it itself.
func report(_ phase: String, _ given: KeyValuePairs<String, Any>) {
    func text(_ v: Any) -> String {
        if let d = v as? Double { return String(format: "%.4f", d) }
        return "\(v)"
    }
    var fields = given.map { (key: $0.key, value: $0.value) }
    if !fields.contains(where: { $0.key == "peak_rss_mb" }) {
        fields.append((key: "peak_rss_mb", value: peakRSSMegabytes()))
    }
    if reportsJSON {
        var parts = ["\"phase\": \"\(phase)\""]
        for (k, v) in fields {
            let value: String
            switch v {
            case let d as Double: value = d.isFinite ? text(d) : "null"
            case is Int, is Int64, is UInt64, is Bool: value = "\(v)"
            default: value = "\"\(v)\""
            }
            parts.append("\"\(k)\": \(value)")
        }
        print("{" + parts.joined(separator: ", ") + "}")
    } else {
        print(([phase] + fields.map { "\($0.key)=\(text($0.value))" }).joined(separator: " "))
    }
    fflush(nil)
}

/// The median of some timings.
func median(_ xs: [Double]) -> Double {
    let s = xs.sorted()
    guard !s.isEmpty else { return 0 }
    return s.count % 2 == 1 ? s[s.count / 2] : (s[s.count / 2 - 1] + s[s.count / 2]) / 2
}

/// A progress bar on standard error, drawn only when it is a terminal.
struct ProgressBar {
    let label: String
    let total: Int
    private var shown = -1
    private let enabled = isatty(2) != 0

    init(_ label: String, total: Int) {
        self.label = label
        self.total = max(1, total)
    }

    @inline(__always)
    mutating func update(_ done: Int) {
        guard enabled else { return }
        let percent = done * 100 / total
        if percent != shown { draw(percent) }
    }

    private mutating func draw(_ percent: Int) {
        shown = percent
        let width = 30
        let filled = percent * width / 100
        printError(
            "\r\(label) [" + String(repeating: "#", count: filled) + String(repeating: " ", count: width - filled)
                + "] \(percent)%", newline: false)
    }

    func finish() {
        if enabled { printError("\r\u{1B}[K", newline: false) }
    }
}

func printError(_ message: String, newline: Bool = true) {
    let line = message + (newline ? "\n" : "")
    _ = line.withCString { write(2, $0, strlen($0)) }
}
