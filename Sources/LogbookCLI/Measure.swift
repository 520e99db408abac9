#if canImport(Glibc)
import Glibc
#endif

/// Peak resident set size of this process, in MiB (VmHWM).
func peakRSSMegabytes() -> Int {
    guard let f = fopen("/proc/self/status", "r") else { return 0 }
    defer { fclose(f) }
    var line = [CChar](repeating: 0, count: 256)
    while fgets(&line, Int32(line.count), f) != nil {
        let s = line.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        if s.hasPrefix("VmHWM:") {
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
        let name = withUnsafePointer(to: entry.pointee.d_name) { $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) } }
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

/// Prints one phase line: `PHASE key=value …`.
func report(_ phase: String, _ fields: KeyValuePairs<String, Any>) {
    var line = phase
    for (k, v) in fields {
        if let d = v as? Double { line += " \(k)=\(String(format: "%.4f", d))" } else { line += " \(k)=\(v)" }
    }
    print(line)
}

func printError(_ message: String) {
    let line = message + "\n"
    _ = line.withCString { write(2, $0, strlen($0)) }
}
