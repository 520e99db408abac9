import Foundation
import LogbookEngine
import LogbookGraph
import LogbookTestSupport

#if canImport(Glibc)
    import Glibc
#endif

// Real processes contending for one store of the checker's model, at once (the context
// checker's "two processes" mode takes turns in one process, step by step, against a
// reference; here the interleavings are the kernel's). A seed gives each process a merge
// policy, automatic merging of remote changes or not, and its own random steps: renames of
// the shared items it owns, `done`, folder, owner and tag changes on any item, ordered inserts
// and moves, inserts and deletes of its own items, constrained tags, counters incremented
// read-modify-write (by the processes under `.error`, retrying on conflict), saves, rollbacks
// and refreshes. Each process writes down, unbuffered, what each save carries and what it
// acknowledged. Afterwards the parent checks, whatever the interleaving was:
//
// - no lost update: a counter holds exactly the increments acknowledged; a shared item's name
//   (written only by its owner) is its owner's last acknowledged one;
// - nothing acknowledged is lost and nothing unsaved appears: each process's own items are
//   exactly those whose insert it acknowledged and whose delete it did not;
// - the store's invariants (inverses agree, no dangling reference, ordered relationships are
//   permutations of their members, tag codes unique) and `Store.verify`;
// - convergence: every process reads the same store, and the contexts that merge remote
//   changes automatically come to hold it too;
// - a save fails only with a conflict, and only under `.error`.
//
// A process may be killed with SIGKILL mid-run (`ProcessesTests`): what its last save carried
// may then be in the store or not, never in part.

/// One process of a contention run: its merge policy and how it hears of the others' saves.
package struct ContentionWorkerSpec: Sendable, CustomStringConvertible {
    package var policy: MergePolicy
    /// Its container observes remote changes and its context merges them automatically.
    package var mergesRemoteChanges: Bool
    package var description: String {
        "\(policy)\(mergesRemoteChanges ? ", merging remote changes automatically" : "")"
    }
}

package enum ProcessContention {
    /// Shared items `i0`…: the name of `iK` belongs to process K mod N (`iK.pP.n` once renamed).
    package static let sharedItems = 12
    /// Folders `L0`… that items are linked to (ordered `items`, unordered `owned`).
    package static let linkFolders = 3
    /// Folders `C0:0`… whose name is a counter (`Cf:n`); no item is ever linked to them, so no
    /// save of a linked object rewrites them.
    package static let counters = 2
    static let codes = ["red", "green", "blue", "amber"]

    /// The processes of `seed`: policies drawn from all five, and `.error` for the first (and,
    /// for odd seeds, the second), so that the counters are incremented, and contended.
    package static func plan(seed: UInt64, processes: Int) -> [ContentionWorkerSpec] {
        var random = SeededGenerator(seed: seed &* 0x9E37_79B9)
        let policies: [MergePolicy] = [
            .error, .mergeByPropertyObjectTrump, .mergeByPropertyStoreTrump, .overwrite, .rollback
        ]
        return (0..<processes).map { p in
            ContentionWorkerSpec(
                policy: p == 0 || (p == 1 && seed % 2 == 1) ? .error : policies.randomElement(using: &random)!,
                mergesRemoteChanges: p > 0 && Bool.random(using: &random))
        }
    }

    /// A new store at `path` with the shared objects.
    package static func prepare(at path: String) throws {
        let container = try PersistentContainer(name: "Check", model: CheckedModel.make(), directory: path)
        let c = container.newContext(concurrencyType: .confinement)
        for f in 0..<linkFolders { try c.insertNewObject(forEntityName: "Folder").setValue("L\(f)", forKey: "name") }
        for f in 0..<counters { try c.insertNewObject(forEntityName: "Folder").setValue("C\(f):0", forKey: "name") }
        for i in 0..<sharedItems { try c.insertNewObject(forEntityName: "Item").setValue("i\(i)", forKey: "name") }
        try c.save()
        try container.close()
    }

    /// Writes `line` to standard output at once (a killed process's lines are all there).
    static func emit(_ line: String) {
        let text = line + "\n"
        _ = text.withCString { write(1, $0, strlen($0)) }
    }

    /// The process `id` of `seed`'s run (`LogbookCrashHelper contend`): its steps, then, once
    /// `barrier` exists (every process finished), what it reads of the store.
    package static func work(seed: UInt64, id: Int, processes: Int, steps: Int, path: String, barrier: String) throws {
        let spec = plan(seed: seed, processes: processes)[id]
        var worker = try ContentionWorker(seed: seed, id: id, processes: processes, spec: spec, path: path)
        // All start together (`barrier` + ".go"), so that their steps overlap.
        emit("ready")
        while !FileManager.default.fileExists(atPath: barrier + ".go") {
            if getppid() == 1 { exit(4) }  // the test that started it is gone
            usleep(2_000)
        }
        for _ in 0..<steps { try worker.step() }
        try worker.finish()
        emit("finished")
        while !FileManager.default.fileExists(atPath: barrier) {
            if getppid() == 1 { exit(4) }
            usleep(10_000)
        }
        try worker.converge()
    }
}

/// The steps of one contending process.
struct ContentionWorker {
    let id: Int
    let processes: Int
    let spec: ContentionWorkerSpec
    var random: SeededGenerator
    let container: PersistentContainer
    let c: ManagedObjectContext
    var renames = 0
    var inserts = 0

    init(seed: UInt64, id: Int, processes: Int, spec: ContentionWorkerSpec, path: String) throws {
        self.id = id
        self.processes = processes
        self.spec = spec
        random = SeededGenerator(seed: seed &* 1_000_003 &+ UInt64(id))
        var options = ContainerOptions()
        options.observesRemoteChanges = spec.mergesRemoteChanges
        container = try PersistentContainer(
            name: "Check", model: CheckedModel.make(), directory: path, options: options)
        c = container.newContext(concurrencyType: .privateQueue)
        c.mergePolicy = spec.policy
        c.automaticallyMergesChangesFromOtherContexts = spec.mergesRemoteChanges
    }

    func emit(_ line: String) { ProcessContention.emit(line) }

    /// The objects of `entity` this context sees (the store's, as of now, and its own).
    func all(_ entity: String) throws -> [ManagedObject] {
        try c.fetch(FetchRequest<ManagedObject>(entityName: entity)).filter { !$0.isDeleted }
    }

    func name(_ o: ManagedObject) -> String { ((try? o.value(forKey: "name")) as? String) ?? "" }

    /// The shared item's number, for names `iK` and `iK.…`.
    static func sharedNumber(_ name: String) -> Int? {
        guard name.hasPrefix("i") else { return nil }
        return Int(name.dropFirst().prefix { $0 != "." })
    }

    /// Whether this process may change the record of `item` (its attributes, its to-one
    /// relationships): under `.overwrite` only its own items and the shared ones it owns, as
    /// the whole record it writes would put back what others set (by design).
    func mayRewrite(_ item: ManagedObject) -> Bool {
        guard spec.policy == .overwrite else { return true }
        let n = name(item)
        if let k = Self.sharedNumber(n) { return k % processes == id }
        return n.hasPrefix("p\(id)-")
    }

    mutating func step() throws {
        let roll = Int.random(in: 0..<100, using: &random)
        do { try change(roll) } catch let error as LogbookError
            where [.invalidArgument, .objectNotFound].contains(error.code)
        {
            // Another process's save can take an object away under a step: a relationship is
            // read from the newest store at each access (docs/object-graph.md), so a member
            // counted may be gone at the move; an object deleted in the store cannot be
            // linked (it is read again first when its view is stale).
            emit("op failed: \(error)")
        }
        switch roll {
        case 77..<92: try save()
        case 92..<100:
            if spec.policy == .error { try increment(Int.random(in: 0..<ProcessContention.counters, using: &random)) }
        default: break
        }
    }

    /// The change of step `roll` (the steps from 77 on save or increment).
    mutating func change(_ roll: Int) throws {
        try c.performAndWait {
            let items = try all("Item")
            let folders = try all("Folder").filter { name($0).hasPrefix("L") }
            guard let item = items.randomElement(using: &random) else { return }
            switch roll {
            case 0..<16:
                // A shared item this process owns gets a new name.
                let mine = items.filter { Self.sharedNumber(name($0)).map { $0 % processes == id } ?? false }
                guard let o = mine.randomElement(using: &random), let k = Self.sharedNumber(name(o)) else { return }
                renames += 1
                try o.setValue("i\(k).p\(id).\(renames)", forKey: "name")
            case 16..<26:
                guard mayRewrite(item) else { return }
                try item.setValue(Bool.random(using: &random), forKey: "done")
            case 26..<34:
                guard mayRewrite(item), spec.policy != .overwrite else { return }
                let folder = Bool.random(using: &random) ? folders.randomElement(using: &random) : nil
                emit("op \(name(item)).folder = \(folder.map(name) ?? "nil")")
                try item.setValue(folder, forKey: "folder")
            case 34..<40:
                guard mayRewrite(item), spec.policy != .overwrite else { return }
                let folder = Bool.random(using: &random) ? folders.randomElement(using: &random) : nil
                emit("op \(name(item)).owner = \(folder.map(name) ?? "nil")")
                try item.setValue(folder, forKey: "owner")
            case 40..<48:
                guard let tag = try all("Tag").randomElement(using: &random) else { return }
                if Bool.random(using: &random) {
                    try item.add(tag, toRelationship: "tags")
                } else {
                    try item.remove(tag, fromRelationship: "tags")
                }
            case 48..<54:
                guard spec.policy != .overwrite, let folder = folders.randomElement(using: &random) else { return }
                let members = try folder.orderedObjects(forKey: "items")
                guard !members.contains(where: { $0 === item }) else { return }
                let at = Int.random(in: 0...members.count, using: &random)
                emit("op \(name(folder)).items insert \(name(item)) at \(at) of \(members.map(name))")
                try folder.insert(item, at: at, inRelationship: "items")
            case 54..<60:
                guard spec.policy != .overwrite, let folder = folders.randomElement(using: &random) else { return }
                let count = try folder.orderedObjects(forKey: "items").count
                guard count > 1 else { return }
                let (from, to) = (Int.random(in: 0..<count, using: &random), Int.random(in: 0..<count, using: &random))
                emit(
                    "op \(name(folder)).items move \(from) → \(to) of \(try folder.orderedObjects(forKey: "items").map(name))"
                )
                try folder.moveObject(at: from, to: to, inRelationship: "items")
            case 60..<66:
                inserts += 1
                try c.insertNewObject(forEntityName: "Item").setValue("p\(id)-\(inserts)", forKey: "name")
            case 66..<69:
                guard let own = items.filter({ name($0).hasPrefix("p\(id)-") }).randomElement(using: &random) else {
                    return
                }
                emit("op delete \(name(own))")
                c.delete(own)
            case 69..<72:
                try c.insertNewObject(forEntityName: "Tag").setValue(
                    ProcessContention.codes.randomElement(using: &random)!, forKey: "code")
            case 72..<74:
                emit("op rollback")
                c.rollback()
            case 74..<77:
                let merge = Bool.random(using: &random)
                emit("op refresh \(name(item)) merging \(merge)")
                c.refresh(item, mergeChanges: merge)
            default:
                break
            }
        }
    }

    /// Saves, writing down first what the save carries (the renames of shared items, the own
    /// items inserted and deleted), then the outcome, then the names its shared items read.
    /// A failure rolls back. Returns whether it saved.
    @discardableResult
    func save() throws -> Bool {
        try c.performAndWait {
            for o in c.insertedObjects where o.entity.name == "Item" { emit("pending insert \(name(o))") }
            for o in c.deletedObjects where o.entity.name == "Item" && name(o).hasPrefix("p\(id)-") {
                emit("pending delete \(name(o))")
            }
            for o in c.updatedObjects where o.entity.name == "Item" || o.entity.name == "Folder" {
                let n = name(o)
                if Self.sharedNumber(n) != nil || n.hasPrefix("C") { emit("pending name \(n)") }
            }
            emit("saving v\(container.store.version) r\(container.store.remoteVersion)")
            do {
                try c.save()
            } catch let error as LogbookError
                where spec.policy == .error && [.mergeConflict, .constraintConflict].contains(error.code)
            {
                emit("conflict \(error.code)")
                c.rollback()
                return false
            } catch {
                emit("failed \(error)".replacingOccurrences(of: "\n", with: " "))
                c.rollback()
                return false
            }
            emit("saved v\(container.store.version)")
            if ProcessInfo.processInfo.environment["LOGBOOK_CONTENTION_CHECK_EACH_SAVE"] != nil {
                do { try ContextModelRun.checkStore(container) } catch {
                    emit("broken after the save, at v\(container.store.version): \(error)")
                    for line in try ContextModelRun.dump(container) { emit("broken \(line)") }
                }
            }
            // What this process's shared items hold now (no other process renames them).
            for o in try all("Item") {
                let n = name(o)
                if let k = Self.sharedNumber(n), k % processes == id { emit("ack \(n)") }
            }
            for o in try all("Folder") where name(o).hasPrefix("C") { emit("read \(name(o))") }
            return true
        }
    }

    /// Adds one to counter `f` read-modify-write, alone in its save; on a conflict, reads the
    /// counter again and retries (up to 20 times).
    func increment(_ f: Int) throws {
        // What is pending goes first, in a save of its own.
        if c.performAndWait({ c.hasChanges }) { try save() }
        for _ in 0..<20 {
            try c.performAndWait {
                guard let counter = try all("Folder").first(where: { name($0).hasPrefix("C\(f):") }) else { return }
                let value = Int(name(counter).split(separator: ":")[1])!
                try counter.setValue("C\(f):\(value + 1)", forKey: "name")
            }
            if try save() {
                emit("ack increment \(f)")
                return
            }
            c.performAndWait {
                // The store's value, for the next try.
                for o in c.registeredObjects where name(o).hasPrefix("C\(f):") { c.refresh(o, mergeChanges: false) }
            }
        }
    }

    /// The last save, rolled back when it fails.
    func finish() throws {
        if c.performAndWait({ c.hasChanges }) { try save() }
    }

    /// Once every process has finished: what a new context reads of the store, and whether
    /// this process's long-lived context came to hold the same (when it merges remote changes;
    /// waited for up to ten seconds).
    func converge() throws {
        let store = try ContextModelRun.dump(container)
        for line in store { emit("store \(line)") }
        guard spec.mergesRemoteChanges else { return }
        let deadline = Date().addingTimeInterval(10)
        var live: [String] = []
        repeat {
            live = try c.performAndWait { try ContextModelRun.dump(c) }
            if live == store {
                emit("converged")
                return
            }
            usleep(20_000)
        } while Date() < deadline
        for line in live where !store.contains(line) { emit("stale \(line)") }
    }
}

extension ProcessContention {
    /// Runs `seed` with `processes` copies of `helper` (`LogbookCrashHelper contend`) on a new
    /// store in `directory`, each making `steps` steps; with `killing`, one of them (drawn from
    /// the seed) is killed with SIGKILL at a moment drawn from the seed. Returns what failed
    /// (nothing when every check holds).
    package static func run(
        seed: UInt64, processes: Int, steps: Int, killing: Bool, helper: String, directory: String
    ) throws -> [String] {
        let path = directory + "/store"
        let barrier = directory + "/all-finished"
        try prepare(at: path)
        var random = SeededGenerator(seed: seed ^ 0x5EED)
        let victim = killing ? Int.random(in: 0..<processes, using: &random) : nil
        var running: [Process] = []
        var outputs: [String] = []
        for id in 0..<processes {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: helper)
            process.arguments = ["contend", "\(seed)", "\(id)", "\(processes)", "\(steps)", path, barrier]
            let output = directory + "/out\(id)"
            _ = FileManager.default.createFile(atPath: output, contents: nil)
            process.standardOutput = FileHandle(forWritingAtPath: output)
            let errors = directory + "/err\(id)"
            _ = FileManager.default.createFile(atPath: errors, contents: nil)
            process.standardError = FileHandle(forWritingAtPath: errors)
            try process.run()
            running.append(process)
            outputs.append(output)
        }
        defer { for p in running where p.isRunning && p.processIdentifier > 0 { kill(p.processIdentifier, SIGKILL) } }
        func lines(_ id: Int) -> [Substring] {
            ((try? String(contentsOfFile: outputs[id], encoding: .utf8)) ?? "").split(separator: "\n")
        }
        let deadline = Date().addingTimeInterval(120)
        func waitFor(_ done: () -> Bool) -> Bool {
            while !done() {
                if Date() > deadline { return false }
                usleep(10_000)
            }
            return true
        }
        _ = waitFor { (0..<processes).allSatisfy { id in lines(id).contains("ready") || !running[id].isRunning } }
        _ = FileManager.default.createFile(atPath: barrier + ".go", contents: nil)
        if let victim {
            usleep(UInt32.random(in: 200_000...1_500_000, using: &random))
            let pid = running[victim].processIdentifier
            if pid > 0 { kill(pid, SIGKILL) }
        }
        // Every process that is not killed finishes its steps; then they read the store.
        let survivors = (0..<processes).filter { $0 != victim }
        var failures: [String] = []
        if !waitFor({ survivors.allSatisfy { id in lines(id).contains("finished") || !running[id].isRunning } }) {
            failures.append("processes did not finish their steps within two minutes")
        }
        _ = FileManager.default.createFile(atPath: barrier, contents: nil)
        if !waitFor({ running.allSatisfy { !$0.isRunning } }) { failures.append("processes did not exit") }
        for id in survivors where running[id].terminationStatus != 0 {
            let complaint = (try? String(contentsOfFile: directory + "/err\(id)", encoding: .utf8)) ?? ""
            failures.append("process \(id) exited with status \(running[id].terminationStatus): \(complaint)")
        }
        guard failures.isEmpty else { return failures }
        let specs = plan(seed: seed, processes: processes)
        let container = try PersistentContainer(name: "Check", model: CheckedModel.make(), directory: path)
        let killed: Set<Int> = victim.map { [$0] } ?? []
        failures = try check(container, logs: (0..<processes).map(lines), specs: specs, killed: killed)
        try container.close()
        do {
            failures += try Store.verify(at: path).problems.map { "verify: \($0)" }
        } catch {
            failures.append("verify: \(error)")
        }
        return failures
    }

    /// What one process's log says it acknowledged.
    struct Acknowledged {
        /// The name each shared item it owns read after its last save.
        var names: [Int: String] = [:]
        /// Its own items whose insert it acknowledged and delete it did not.
        var items: Set<String> = []
        var increments: [Int: Int] = [:]
        /// The last save whose outcome the log does not show, or whose acknowledgement it
        /// shows in part (a killed process): its pending lines.
        var uncertain: [Substring] = []
        var failures: [String] = []
        var store: [String] = []
        var converged = false
        var stale: [String] = []

        init(_ lines: [Substring], id: Int) {
            var block: [Substring] = []
            for line in lines {
                if line.hasPrefix("pending ") {
                    block.append(line)
                } else if line.hasPrefix("saving") {
                    uncertain = block
                    block = []
                } else if line.hasPrefix("saved") {
                    for l in uncertain {
                        if l.hasPrefix("pending insert ") { items.insert(String(l.dropFirst(15))) }
                        if l.hasPrefix("pending delete ") { items.remove(String(l.dropFirst(15))) }
                    }
                    // Its names and counter are acknowledged by the lines that follow.
                    uncertain = uncertain.filter { $0.hasPrefix("pending name ") }
                } else if line.hasPrefix("conflict ") {
                    uncertain = []
                } else if line.hasPrefix("failed ") {
                    failures.append("process \(id): a save \(line)")
                    uncertain = []
                } else if line.hasPrefix("ack increment ") {
                    increments[Int(line.dropFirst(14))!, default: 0] += 1
                    uncertain = []
                } else if line.hasPrefix("ack ") {
                    let name = String(line.dropFirst(4))
                    names[ContentionWorker.sharedNumber(name)!] = name
                } else if line.hasPrefix("read ") {
                    // The counters read after a save that was no increment: nothing pending.
                    if !uncertain.contains(where: { $0.hasPrefix("pending name C") }) { uncertain = [] }
                } else if line.hasPrefix("store ") {
                    store.append(String(line.dropFirst(6)))
                } else if line == "converged" {
                    converged = true
                } else if line.hasPrefix("stale ") {
                    stale.append(String(line.dropFirst(6)))
                }
            }
        }
    }

    /// The checks of a run, on the store the processes left.
    static func check(
        _ container: PersistentContainer, logs: [[Substring]], specs: [ContentionWorkerSpec], killed: Set<Int>
    ) throws -> [String] {
        let processes = specs.count
        var failures: [String] = []
        do { try ContextModelRun.checkStore(container) } catch { failures.append("\(error)") }
        let acknowledged = logs.enumerated().map { Acknowledged($1, id: $0) }
        let c = container.newContext(concurrencyType: .confinement)
        let items = try c.fetch(FetchRequest<ManagedObject>(entityName: "Item"))
        let names = try items.map { try $0.value(forKey: "name") as? String ?? "" }
        let folders = try c.fetch(FetchRequest<ManagedObject>(entityName: "Folder")).map {
            try $0.value(forKey: "name") as? String ?? ""
        }
        for (p, a) in acknowledged.enumerated() {
            failures += a.failures
            let isKilled = killed.contains(p)
            if !isKilled && !a.uncertain.isEmpty {
                failures.append("process \(p) finished with a save unaccounted for")
            }
            let maybe = isKilled ? a.uncertain.filter { $0.hasPrefix("pending name i") } : []
            // Shared items: exactly one each; its owner's last name, or what its owner's last
            // save carried when that save's end is not known.
            for k in 0..<sharedItems where k % processes == p {
                let found = names.filter { ContentionWorker.sharedNumber($0) == k }
                let allowed = Set([a.names[k] ?? "i\(k)"] + maybe.map { String($0.dropFirst(13)) })
                if found.count != 1 || !allowed.contains(found[0]) {
                    failures.append(
                        "shared item i\(k) reads \(found), process \(p) (\(specs[p])) acknowledged \(a.names[k] ?? "i\(k)")"
                            + (maybe.isEmpty ? "" : " (or \(maybe))"))
                }
            }
            // Its own items: those acknowledged, or those with its last save applied.
            let own = Set(names.filter { $0.hasPrefix("p\(p)-") })
            var after = a.items
            for l in isKilled ? a.uncertain : [] {
                if l.hasPrefix("pending insert ") { after.insert(String(l.dropFirst(15))) }
                if l.hasPrefix("pending delete ") { after.remove(String(l.dropFirst(15))) }
            }
            if own != a.items && own != after {
                failures.append(
                    "process \(p)'s own items are \(own.sorted()), acknowledged \(a.items.sorted())"
                        + (after != a.items ? " (or \(after.sorted()))" : ""))
            }
            if own.count != names.filter({ $0.hasPrefix("p\(p)-") }).count {
                failures.append("an own item of process \(p) is in the store twice")
            }
            if !isKilled {
                let expected = try ContextModelRun.dump(container)
                if a.store != expected {
                    failures.append(
                        "process \(p) read another store: \(a.store.filter { !expected.contains($0) }) "
                            + "where the store holds \(expected.filter { !a.store.contains($0) })")
                }
                if specs[p].mergesRemoteChanges && !a.converged {
                    failures.append("process \(p)'s context never merged the others' saves: it still reads \(a.stale)")
                }
            }
        }
        // Counters: exactly the increments acknowledged (one more where a killed process's
        // increment was saving). A context that merges automatically takes the store's value
        // as its new base, keeping its own change (Core Data's merge: `refreshObject(_:
        // mergeChanges: true)`), so a read-modify-write in it can be overtaken without a
        // conflict: with such a process among the incrementing ones, the counter holds at most
        // the increments acknowledged (never one that was not).
        let exact = !specs.contains { $0.policy == .error && $0.mergesRemoteChanges }
        for f in 0..<counters {
            let acked = acknowledged.reduce(0) { $0 + ($1.increments[f] ?? 0) }
            let maybe = killed.filter { p in acknowledged[p].uncertain.contains { $0.hasPrefix("pending name C\(f):") }
            }
            .count
            let found = folders.filter { $0.hasPrefix("C\(f):") }
            guard found.count == 1, let value = Int(found[0].split(separator: ":")[1]),
                ((exact ? acked : 0)...(acked + maybe)).contains(value)
            else {
                failures.append("counter \(f) reads \(found), \(acked) increments were acknowledged (a lost update)")
                continue
            }
        }
        return failures
    }
}
