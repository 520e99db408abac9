import Foundation
import LogbookEngine
import LogbookGraph
import LogbookTestSupport

// A randomized, deterministic, model-checked test of contexts (FoundationDB's simulation tests
// and TigerBeetle's VOPR at the scale of a unit test). A seed gives a list of random steps over
// several contexts of one container — insert, update, link and unlink, ordered inserts and
// moves, delete, save, rollback, reset, refresh, undo and redo, merges, batch requests,
// reopening — and after every step the store and each context are checked against invariants
// and against a plain reference of what each context changed. A failure prints its seed and a
// shrunk list of steps that reproduces it.
//
// `LOGBOOK_MODEL_CHECK_SEEDS=N` runs N seeds (a few hundred by default);
// `LOGBOOK_MODEL_CHECK_SEED=S` runs one seed and prints its steps (with `…_SEEDS`, the first seed);
// `LOGBOOK_MODEL_CHECK_STEPS=K` sets the steps per seed; `LOGBOOK_MODEL_CHECK_PROGRESS=1` prints each
// seed as it starts (on standard error).

/// The model the checker drives: folders holding an ordered list of items (to-one `folder` on
/// the item), items tagged with tags (many-to-many), tags with a unique code.
package enum CheckedModel {
    package static func make() throws -> ManagedObjectModel {
        var tag = EntityDescription("Tag") {
            AttributeDescription("code", .string)
            RelationshipDescription("items", to: "Item", inverse: "tags", toMany: true, deleteRule: .nullify)
        }
        tag.uniquenessConstraints = [["code"]]
        return try ManagedObjectModel {
            EntityDescription("Folder") {
                AttributeDescription("name", .string)
                RelationshipDescription(
                    "items", to: "Item", inverse: "folder", toMany: true, ordered: true, deleteRule: .nullify)
                RelationshipDescription("owned", to: "Item", inverse: "owner", toMany: true, deleteRule: .nullify)
            }
            EntityDescription("Item") {
                AttributeDescription("name", .string)
                AttributeDescription("done", .bool, default: false)
                RelationshipDescription("folder", to: "Folder", inverse: "items", deleteRule: .nullify)
                RelationshipDescription("owner", to: "Folder", inverse: "owned", deleteRule: .nullify)
                RelationshipDescription("tags", to: "Tag", inverse: "items", toMany: true, deleteRule: .nullify)
            }
            tag
        }
    }

    /// The attributes the reference tracks, by entity.
    package static let attributes = ["Folder": ["name"], "Item": ["name", "done"], "Tag": ["code"]]
}

/// One step of a run. Objects are named by the order of their creation (`#n`); contexts by
/// their number in the run.
package enum CheckStep: CustomStringConvertible, Sendable {
    case insert(context: Int, entity: String, value: String)
    case setName(context: Int, object: Int, value: String)
    case setDone(context: Int, object: Int, value: Bool)
    case setFolder(context: Int, item: Int, folder: Int?)
    case setOwner(context: Int, item: Int, folder: Int?)
    case tag(context: Int, item: Int, tag: Int, add: Bool)
    case insertInFolder(context: Int, folder: Int, item: Int, position: Int)
    case moveInFolder(context: Int, folder: Int, from: Int, to: Int)
    case delete(context: Int, object: Int)
    case save(context: Int)
    case rollback(context: Int)
    case reset(context: Int)
    case refresh(context: Int, object: Int, merge: Bool)
    case undo(context: Int)
    case redo(context: Int)
    case mergePending(context: Int)
    case batchUpdate(context: Int, name: String, done: Bool)
    case batchDelete(context: Int, name: String)
    case pinGeneration(context: Int)
    case asynchronousFetch(context: Int)
    case reopen

    /// The objects the step names (by their number in the run).
    package var objects: [Int] {
        switch self {
        case .setName(_, let o, _), .setDone(_, let o, _), .delete(_, let o), .refresh(_, let o, _): [o]
        case .setFolder(_, let i, let f), .setOwner(_, let i, let f): [i] + (f.map { [$0] } ?? [])
        case .tag(_, let i, let t, _): [i, t]
        case .insertInFolder(_, let f, let i, _): [f, i]
        case .moveInFolder(_, let f, _, _): [f]
        default: []
        }
    }

    package var description: String {
        switch self {
        case .insert(let c, let e, let v): "C\(c): insert \(e) \"\(v)\""
        case .setName(let c, let o, let v): "C\(c): #\(o).name = \"\(v)\""
        case .setDone(let c, let o, let v): "C\(c): #\(o).done = \(v)"
        case .setFolder(let c, let i, let f): "C\(c): #\(i).folder = \(f.map { "#\($0)" } ?? "nil")"
        case .setOwner(let c, let i, let f): "C\(c): #\(i).owner = \(f.map { "#\($0)" } ?? "nil")"
        case .tag(let c, let i, let t, let add): "C\(c): #\(i).tags \(add ? "add" : "remove") #\(t)"
        case .insertInFolder(let c, let f, let i, let p): "C\(c): #\(f).items insert #\(i) at \(p)"
        case .moveInFolder(let c, let f, let a, let b): "C\(c): #\(f).items move \(a) → \(b)"
        case .delete(let c, let o): "C\(c): delete #\(o)"
        case .save(let c): "C\(c): save"
        case .rollback(let c): "C\(c): rollback"
        case .reset(let c): "C\(c): reset"
        case .refresh(let c, let o, let m): "C\(c): refresh #\(o) mergeChanges: \(m)"
        case .undo(let c): "C\(c): undo"
        case .redo(let c): "C\(c): redo"
        case .mergePending(let c): "C\(c): merge the saves it has not merged"
        case .batchUpdate(let c, let n, let d): "C\(c): batch update Item name == \"\(n)\" set done = \(d)"
        case .batchDelete(let c, let n): "C\(c): batch delete Item name == \"\(n)\""
        case .pinGeneration(let c): "C\(c): pin the current query generation"
        case .asynchronousFetch(let c): "C\(c): asynchronous fetch of every Item"
        case .reopen: "reopen the container"
        }
    }
}

/// How a run's contexts are set up: each context's kind, merge policy, automatic merging and
/// undo, drawn from the seed.
package struct CheckedContextSpec: CustomStringConvertible, Sendable {
    package enum Kind: Sendable {
        case confined, privateQueue
        case child(of: Int)
    }
    package var kind: Kind
    package var policy: MergePolicy
    package var automaticMerging: Bool
    package var undo: Bool
    /// The container the context belongs to: 0, or 1 for a root context that stands for
    /// another process (its container opens an engine store of its own on the same directory
    /// and hears of the other container's saves only when merged by hand, as a process merges
    /// another's with `mergeChanges`).
    package var process = 0

    package var description: String {
        let k: String
        switch kind {
        case .confined: k = "confined"
        case .privateQueue: k = "private queue"
        case .child(let p): k = "child of C\(p)"
        }
        return "\(k), \(policy)\(automaticMerging ? ", merging automatically" : "")\(undo ? ", with undo" : "")"
            + (process > 0 ? ", in another process" : "")
    }

    package var parent: Int? {
        if case .child(let p) = kind { return p }
        return nil
    }
}

/// A failed invariant, with what was found.
package struct CheckFailure: Error, CustomStringConvertible {
    package var description: String
    package init(_ description: String) { self.description = description }
}

/// Draws a run from a seed: its contexts and its steps.
struct CheckedRunGenerator {
    var random: SeededGenerator
    /// The entity of each object the steps so far create.
    var entities: [String] = []

    init(seed: UInt64) { random = SeededGenerator(seed: seed) }

    static let names = ["a", "b", "c"]
    static let codes = ["x", "y", "z"]

    /// Four contexts: a confined one, two on private queues, a child of the first of those,
    /// and a child of that child (two levels deep); a random merge policy each, automatic
    /// merging on or off, undo on or off.
    mutating func contexts() -> [CheckedContextSpec] {
        let policies: [MergePolicy] = [
            .error, .error, .mergeByPropertyObjectTrump, .mergeByPropertyStoreTrump, .overwrite, .rollback
        ]
        func spec(_ kind: CheckedContextSpec.Kind) -> CheckedContextSpec {
            CheckedContextSpec(
                kind: kind, policy: policies.randomElement(using: &random)!,
                automaticMerging: Bool.random(using: &random), undo: Bool.random(using: &random))
        }
        return [spec(.confined), spec(.privateQueue), spec(.privateQueue), spec(.child(of: 1)), spec(.child(of: 3))]
    }

    mutating func pick(_ entity: String) -> Int? {
        let candidates = entities.indices.filter { entities[$0] == entity }
        return candidates.randomElement(using: &random)
    }

    mutating func anyObject() -> Int? { entities.indices.randomElement(using: &random) }

    /// The next step, over `contexts` contexts.
    mutating func step(contexts: Int) -> CheckStep {
        let c = Int.random(in: 0..<contexts, using: &random)
        let roll = Int.random(in: 0..<100, using: &random)
        let name = Self.names.randomElement(using: &random)!
        switch roll {
        case 0..<14:
            let entity = ["Item", "Item", "Folder", "Tag"].randomElement(using: &random)!
            entities.append(entity)
            return .insert(
                context: c, entity: entity, value: entity == "Tag" ? Self.codes.randomElement(using: &random)! : name)
        case 14..<26:
            if let o = pick(Bool.random(using: &random) ? "Item" : "Folder") {
                return .setName(context: c, object: o, value: name)
            }
        case 26..<34:
            if let o = pick("Item") { return .setDone(context: c, object: o, value: Bool.random(using: &random)) }
        case 34..<38:
            if let o = pick("Item") {
                return .setFolder(
                    context: c, item: o, folder: Int.random(in: 0..<4, using: &random) == 0 ? nil : pick("Folder"))
            }
        case 38..<42:
            if let o = pick("Item") {
                return .setOwner(
                    context: c, item: o, folder: Int.random(in: 0..<4, using: &random) == 0 ? nil : pick("Folder"))
            }
        case 42..<48:
            if let o = pick("Item"), let t = pick("Tag") {
                return .tag(context: c, item: o, tag: t, add: Int.random(in: 0..<3, using: &random) > 0)
            }
        case 48..<54:
            if let f = pick("Folder"), let o = pick("Item") {
                return .insertInFolder(context: c, folder: f, item: o, position: Int.random(in: 0..<4, using: &random))
            }
        case 54..<58:
            if let f = pick("Folder") {
                return .moveInFolder(
                    context: c, folder: f, from: Int.random(in: 0..<4, using: &random),
                    to: Int.random(in: 0..<4, using: &random))
            }
        case 58..<63:
            if let o = anyObject() { return .delete(context: c, object: o) }
        case 63..<78:
            return .save(context: c)
        case 78..<80:
            return .rollback(context: c)
        case 80:
            return .reset(context: c)
        case 81..<85:
            if let o = anyObject() { return .refresh(context: c, object: o, merge: Bool.random(using: &random)) }
        case 85..<89:
            return .undo(context: c)
        case 89..<91:
            return .redo(context: c)
        case 91..<96:
            return .mergePending(context: c)
        case 96..<98:
            return .batchUpdate(context: c, name: name, done: Bool.random(using: &random))
        case 98:
            return Int.random(in: 0..<3, using: &random) == 0
                ? .batchDelete(context: c, name: name)
                : (Bool.random(using: &random) ? .pinGeneration(context: c) : .asynchronousFetch(context: c))
        default:
            return .reopen
        }
        return .save(context: c)
    }
}

/// Runs the checker: seeds, steps, and the shrinking of a failure.
package enum ContextModelChecker {
    /// Runs `steps` on contexts made as `specs`; the failure and the index of its step, if any.
    package static func run(
        _ specs: [CheckedContextSpec], _ steps: [CheckStep], encryptionKey: EncryptionKey? = nil
    ) -> (failure: String, at: Int, log: [String])? {
        let run: ContextModelRun
        do { run = try ContextModelRun(specs: specs, encryptionKey: encryptionKey) } catch {
            return ("the run could not start: \(error)", -1, [])
        }
        let trace = ProcessInfo.processInfo.environment["LOGBOOK_MODEL_CHECK_TRACE"] != nil
        for (n, step) in steps.enumerated() {
            do {
                try run.run(step)
                if trace { run.trace() }
                try run.checkInvariants()
            } catch {
                return ("\(error)", n, run.log)
            }
        }
        return nil
    }

    /// The seed's contexts and steps.
    /// The key of a seed's run: every fourth seed runs on an encrypted store.
    package static func encryptionKey(seed: UInt64) -> EncryptionKey? {
        seed % 4 == 3 ? ContextModelRun.checkKey : nil
    }

    /// With `processes`, the second private-queue context (C2) stands for another process: a
    /// container of its own on the same store, merging the others' saves by hand only.
    package static func draw(seed: UInt64, steps count: Int, processes: Bool = false) -> (
        [CheckedContextSpec], [CheckStep]
    ) {
        var generator = CheckedRunGenerator(seed: seed)
        var specs = generator.contexts()
        if processes {
            specs[2].process = 1
            specs[2].automaticMerging = false
        }
        return (specs, (0..<count).map { _ in generator.step(contexts: specs.count) })
    }

    /// Removes steps while the run still fails (delta debugging: halves, then quarters, … then
    /// single steps). Steps name objects by creation order, so a removed insert renames the
    /// objects after it: what is kept still fails, which is all a shrunk list promises.
    package static func shrink(
        _ specs: [CheckedContextSpec], _ failing: [CheckStep], encryptionKey: EncryptionKey? = nil
    ) -> [CheckStep] {
        var steps = failing
        var chunk = max(1, steps.count / 2)
        while chunk >= 1 {
            var start = 0
            var removedAny = false
            while start < steps.count {
                var candidate = steps
                candidate.removeSubrange(start..<min(start + chunk, steps.count))
                if let found = run(specs, candidate, encryptionKey: encryptionKey) {
                    steps = Array(candidate.prefix(found.at + 1))
                    removedAny = true
                } else {
                    start += chunk
                }
            }
            if !removedAny { chunk /= 2 }
        }
        return steps
    }

    /// A report of a failing seed: its contexts and its shrunk steps.
    package static func report(
        seed: UInt64, specs: [CheckedContextSpec], steps: [CheckStep], encryptionKey: EncryptionKey? = nil
    ) -> String {
        let outcome = run(specs, steps, encryptionKey: encryptionKey)
        var lines = [
            "seed \(seed) fails: \(outcome?.failure ?? "(passes when shrunk)")",
            encryptionKey == nil ? "contexts:" : "contexts (on an encrypted store):"
        ]
        for (i, s) in specs.enumerated() { lines.append("  C\(i): \(s)") }
        lines.append("steps (\(steps.count)):")
        for (n, line) in (outcome?.log ?? steps.map(\.description)).enumerated() { lines.append("  \(n + 1). \(line)") }
        return lines.joined(separator: "\n")
    }
}
