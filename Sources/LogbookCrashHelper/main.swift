// A child process for the kill -9 tests (Tests/LogbookEngineTests/CrashRecoveryTests.swift).
//
//   LogbookCrashHelper STORE_DIR [KEY_FILE]
//
// Opens the store (encrypted with the key in KEY_FILE when one is given) with full durability and commits transactions forever, each writing a
// pair of keys (2i, 2i+1) and a few padding records of varying size, and prints "i" on
// standard output after each commit returns. The parent kills it at a random moment and then
// checks that every acknowledged commit survived and that no commit survived in part.
//
//   LogbookCrashHelper writer ID STORE_DIR [KEY_FILE]
//   LogbookCrashHelper set STORE_PATH NAME ATTRIBUTE VALUE
//
// One of several processes writing one store (below).
//
//   LogbookCrashHelper insert STORE_PATH PREFIX COUNT [PER]
//   LogbookCrashHelper notes STORE_PATH PREFIX COUNT
//
// Another process inserting objects into a store others write or follow: the context
// checker's Items through a container (`insert`), or SwiftData `Note`s through a
// `ModelContainer` (`notes`), named PREFIX-0 … PREFIX-(COUNT-1), saved PER (5 by default) at a
// time; prints "saved".
//
//   LogbookCrashHelper sync push|pull STORE_PATH URL SCHEMA BATCH
//
// A sync engine pushing or pulling the store (its recorded model) in batches of BATCH changes,
// printing "batch N" after each; Tests/LogbookSyncTests kills it in the middle.
//
//   LogbookCrashHelper contend SEED ID PROCESSES STEPS STORE_PATH BARRIER
//
// One of several processes contending for one store (below).
//
//   LogbookCrashHelper contexts SEED STEPS STORE_PATH
//
// Runs the context checker's steps for SEED over a new store at STORE_PATH, printing
// "begin k" before step k and "end k" after it; the parent kills it during a step it chose
// (Tests/LogbookTests/ContextCrashCheckTests.swift) and compares the store with the checker's
// run of the same steps.
import Foundation
import Logbook
import LogbookContextCheck
import LogbookEngine
import LogbookGraph
import LogbookSync
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

func printError(_ message: String) {
    let line = message + "\n"
    _ = line.withCString { write(2, $0, strlen($0)) }
}

func printLine(_ text: String) {
    let line = text + "\n"
    _ = line.withCString { write(1, $0, strlen($0)) }
}

let arguments = CommandLine.arguments
// LogbookCrashHelper set STORE_PATH NAME ATTRIBUTE VALUE: another process's save, for the
// tests of several writing processes (Tests/LogbookTests/ProcessesTests.swift). Opens the
// context checker's model at STORE_PATH, sets ATTRIBUTE ("name", or "done" to true/false) of
// the Item named NAME, saves, and prints "saved" (or the error, exit status 1).
if arguments.count == 6, arguments[1] == "set" {
    do {
        let container = try PersistentContainer(name: "Check", model: CheckedModel.make(), directory: arguments[2])
        let context = container.newContext(concurrencyType: .confinement)
        var request = FetchRequest<ManagedObject>(entityName: "Item")
        request.predicate = try FetchPredicate(format: "name == %@", arguments[3])
        guard let item = try context.fetch(request).first else {
            printError("no Item named \(arguments[3])")
            exit(1)
        }
        if arguments[4] == "done" {
            try item.setValue(arguments[5] == "true", forKey: "done")
        } else {
            try item.setValue(arguments[5], forKey: arguments[4])
        }
        try context.save()
        try container.close()
        printLine("saved")
        exit(0)
    } catch {
        printError("\(error)")
        exit(1)
    }
}
if arguments.count >= 5, arguments[1] == "insert" || arguments[1] == "notes", let count = Int(arguments[4]) {
    let per = arguments.count >= 6 ? max(1, Int(arguments[5]) ?? 5) : 5
    do {
        if arguments[1] == "insert" {
            var options = ContainerOptions()
            options.persistentHistoryTracking = true
            let container = try PersistentContainer(
                name: "Check", model: CheckedModel.make(), directory: arguments[2], options: options)
            let context = container.newContext(concurrencyType: .confinement)
            for i in 0..<count {
                try context.insertNewObject(forEntityName: "Item").setValue("\(arguments[3])-\(i)", forKey: "name")
                if i % per == per - 1 || i == count - 1 { try context.save() }
            }
            try container.close()
        } else {
            let container = try ModelContainer(
                for: Note.self, configurations: ModelConfiguration(url: URL(fileURLWithPath: arguments[2])))
            let context = ModelContext(container)
            for i in 0..<count {
                context.insert(Note(title: "\(arguments[3])-\(i)"))
                if i % 5 == 4 || i == count - 1 { try context.save() }
            }
        }
        printLine("saved")
        exit(0)
    } catch {
        printError("\(error)")
        exit(1)
    }
}
if arguments.count == 7, arguments[1] == "sync", let batch = Int(arguments[6]) {
    let done = DispatchSemaphore(value: 0)
    let status = Locked<Int32>(0)
    // Detached: top-level code is the main actor's, which the wait below blocks.
    Task.detached {
        do {
            let model = try ManagedObjectModel(recordedIn: arguments[3])
            var options = ContainerOptions()
            options.persistentHistoryTracking = true
            options.historyRecordsMemberChanges = true
            let container = try PersistentContainer(
                name: "Sync", model: model, directory: arguments[3], options: options)
            let engine = try SyncEngine(
                container: container,
                configuration: SyncConfiguration(url: arguments[4], schema: arguments[5], batchSize: batch))
            let progress: @Sendable (Int, Int) -> Void = { n, _ in printLine("batch \(n)") }
            if arguments[2] == "push" {
                try await engine.push(progress: progress)
            } else {
                try await engine.pull(progress: progress)
            }
            printLine("done")
        } catch {
            printError("LogbookCrashHelper sync: \(error)")
            status.withLock { $0 = 1 }
        }
        done.signal()
    }
    done.wait()
    exit(status.withLock { $0 })
}
// LogbookCrashHelper writer ID STORE_DIR [KEY_FILE]: one of several processes writing one
// store. Commits forever, each writing its own key (keyspace 10 + ID, id i), padding that every
// writer rewrites (keyspace 2) and a set member; prints "i t" after each commit returns (t:
// the monotonic clock in nanoseconds, to tell acknowledgements after a moment from those
// before it). Tests/LogbookEngineTests/CrashRecoveryTests.swift kills some of them.
// With HELPER_PAUSE=POINT (a `StorePausePoint`'s name) and HELPER_PAUSED_FILE=PATH, the
// writer stops for good the first time its store reaches POINT (with HELPER_PAUSE_AFTER=N, the
// N-th time), after creating PATH: the test kills it there, knowing where it is.
if arguments.count >= 4, arguments[1] == "writer", let id = UInt16(arguments[2]) {
    do {
        var options = StoreOptions()
        options.durability = .full
        options.segmentSize = 256 << 10
        options.checkpointInterval = 128 << 10
        options.compaction = .automatic(deadRatio: 0.3, minimumBytes: 256 << 10)
        let environment = ProcessInfo.processInfo.environment
        if environment["HELPER_NO_COMPACTION"] != nil { options.compaction = .manual }
        if environment["HELPER_NO_CHECKPOINT"] != nil { options.checkpointInterval = 0 }
        if arguments.count >= 5 { options.encryptionKey = try EncryptionKey(contentsOfFile: arguments[4]) }
        if let name = environment["HELPER_PAUSE"], let point = StorePausePoint(rawValue: name),
            let marker = environment["HELPER_PAUSED_FILE"]
        {
            let after = Int(environment["HELPER_PAUSE_AFTER"] ?? "") ?? 1
            let hits = Mutex(0)
            options.pausePoint = { reached in
                guard reached == point,
                    hits.withLock({
                        $0 += 1
                        return $0
                    }) == after
                else { return }
                FileManager.default.createFile(atPath: marker, contents: Data(name.utf8))
                while true { sleep(1000) }
            }
        }
        let store = try Store.open(at: arguments[3], options: options)
        var i = UInt64(store.snapshot().count(inKeyspace: 10 + id))
        var rng = SystemRandomNumberGenerator()
        while true {
            var t = Transaction()
            t.put(EngineKey(keyspace: 10 + id, id: i), value: Array("w\(id) \(i)".utf8))
            for p in 0..<Int.random(in: 0..<30, using: &rng) {
                t.put(
                    EngineKey(keyspace: 2, id: UInt64(p)),
                    value: [UInt8](repeating: UInt8(truncatingIfNeeded: i), count: Int.random(in: 1..<600, using: &rng))
                )
            }
            t.addMembers([UInt64(id) << 32 | i], toSet: EngineKey(keyspace: 3, id: 1).rawValue)
            try store.commit(t)
            var now = timespec()
            clock_gettime(CLOCK_MONOTONIC, &now)
            printLine("\(i) \(Int(now.tv_sec) * 1_000_000_000 + now.tv_nsec)")
            i += 1
        }
    } catch {
        printError("LogbookCrashHelper writer: \(error)")
        exit(1)
    }
}
// LogbookCrashHelper contend SEED ID PROCESSES STEPS STORE_PATH BARRIER: process ID of PROCESSES
// contending for one store (Tests/LogbookContextCheck/ProcessContention.swift): its random
// steps, each save written down; then, once BARRIER exists, what it reads of the store.
if arguments.count == 8, arguments[1] == "contend", let seed = UInt64(arguments[2]), let id = Int(arguments[3]),
    let processes = Int(arguments[4]), let steps = Int(arguments[5])
{
    do {
        try ProcessContention.work(
            seed: seed, id: id, processes: processes, steps: steps, path: arguments[6], barrier: arguments[7])
        exit(0)
    } catch {
        printError("LogbookCrashHelper contend: \(error)")
        exit(3)
    }
}
if arguments.count == 5, arguments[1] == "contexts", let seed = UInt64(arguments[2]), let count = Int(arguments[3]) {
    let (specs, steps) = ContextModelChecker.draw(seed: seed, steps: count)
    do {
        let run = try ContextModelRun(
            specs: specs, path: arguments[4], encryptionKey: ContextModelChecker.encryptionKey(seed: seed))
        for (k, step) in steps.enumerated() {
            printLine("begin \(k)")
            try run.run(step)
            printLine("end \(k)")
        }
        exit(0)
    } catch {
        printError("LogbookCrashHelper contexts: \(error)")
        exit(3)
    }
}
guard arguments.count >= 2 else {
    printError("usage: LogbookCrashHelper STORE_DIR")
    exit(2)
}
do {
    var options = StoreOptions()
    options.durability = .full
    options.segmentSize = 256 << 10
    options.checkpointInterval = 128 << 10
    options.compaction = .automatic(deadRatio: 0.3, minimumBytes: 256 << 10)
    if arguments.count >= 3 { options.encryptionKey = try EncryptionKey(contentsOfFile: arguments[2]) }
    let store = try Store.open(at: arguments[1], options: options)
    var i = UInt64(store.snapshot().count(inKeyspace: 1) / 2)
    var rng = SystemRandomNumberGenerator()
    while true {
        var t = Transaction()
        t.put(
            EngineKey(keyspace: 1, id: 2 * i), value: Array("a\(i)".utf8),
            indexKeys: [IndexKey(index: 1, orderedUInt64: i)])
        t.put(EngineKey(keyspace: 1, id: 2 * i + 1), value: Array("b\(i)".utf8))
        let padding = Int.random(in: 0..<40, using: &rng)
        for p in 0..<padding {
            // Padding rewrites the same keys, so compaction has dead bytes to reclaim.
            t.put(
                EngineKey(keyspace: 2, id: UInt64(p)),
                value: [UInt8](repeating: UInt8(truncatingIfNeeded: i), count: Int.random(in: 1..<600, using: &rng)))
        }
        t.addMembers([2 * i], toSet: EngineKey(keyspace: 3, id: i % 7).rawValue)
        try store.commit(t)
        let line = "\(i)\n"
        _ = line.withCString { write(1, $0, strlen($0)) }
        i += 1
    }
} catch {
    printError("LogbookCrashHelper: \(error)")
    exit(1)
}

/// The SwiftData model of the `notes` mode (Tests/SwiftDataStyleTests/ProcessesTests.swift
/// declares the same).
@Model final class Note {
    var title: String
    init(title: String) { self.title = title }
}
