import Dispatch
import Foundation
import LogbookEngine
import LogbookGraph
import LogbookTestSupport

/// One run of the context checker: a container, its contexts, and the reference — per
/// context, the attribute values it changed and has not saved, rolled back or refreshed away —
/// that every successful save is checked against.
package final class ContextModelRun {
    /// An attribute of an object (by creation order).
    struct Key: Hashable, Comparable {
        var object: Int
        var attribute: String
        static func < (a: Key, b: Key) -> Bool { (a.object, a.attribute) < (b.object, b.attribute) }
    }

    /// The store's directory when the run made it (removed with the run).
    let temporary: TemporaryStore?
    /// The store's path.
    let path: String
    let model: ManagedObjectModel
    /// The store's key, when the run is on an encrypted store.
    let encryptionKey: EncryptionKey?
    let specs: [CheckedContextSpec]
    package var container: PersistentContainer
    /// The container of the contexts that stand for another process (`CheckedContextSpec.process`),
    /// with an engine store of its own.
    var otherProcess: PersistentContainer?
    var contexts: [ManagedObjectContext] = []
    /// Every object made, in order: its ID and entity.
    package var objects: [(id: ObjectID, entity: String)] = []
    /// Objects never saved when the container was reopened: their keys may be handed out
    /// again, so they are no longer looked up.
    var gone = Set<Int>()
    /// Per context: what it changed (attribute values, as text) and has not saved.
    var dirty: [[Key: String]]
    /// Per context: each changed property's value before the context first changed it.
    var base: [[Key: String]]
    /// Per context: the reference's undo and redo steps (its `dirty` before each step).
    var undoStack: [[[Key: String]]]
    var redoStack: [[[Key: String]]]
    /// Per context: whether its undo history no longer matches the reference's (after a
    /// refresh that dropped changes, or a child's save into it): undo is not tried then.
    var undoUnknown: [Bool]
    /// Per context: the saves of other contexts it has not merged (contexts that do not merge
    /// automatically).
    var unmerged: [[ContextChanges]]
    /// The objects the save of a root context changed in this step (by root), as its
    /// `didSave` named them: a save of nothing posts none.
    var savedThisStep: [Int: Set<ObjectID>] = [:]
    /// The objects whose stored values changed in this step (a save, a batch request) or that
    /// a merge by hand took: only these reload in the contexts that merge (Logbook refreshes
    /// the objects a change names, not every object a context changed).
    var touchedThisStep: Set<ObjectID> = []
    var observations: [ContextObservation] = []
    /// The options of the run's container: encrypted with `key` when there is one.
    package static func options(_ key: EncryptionKey?, ownStore: Bool = false) -> ContainerOptions {
        var options = ContainerOptions()
        options.encryptionKey = key
        options.opensItsOwnStore = ownStore
        return options
    }

    /// The key of the runs on encrypted stores (the checker runs every fourth seed on one).
    package static let checkKey = try! EncryptionKey(bytes: (0..<32).map { UInt8($0 * 5 + 3) })

    /// What each step did, for the report.
    package var log: [String] = []

    /// A run over a new store: in a temporary directory, or at `path` (the crash mode's child
    /// process, whose store outlives it).
    package init(specs: [CheckedContextSpec], path: String? = nil, encryptionKey: EncryptionKey? = nil) throws {
        self.specs = specs
        self.encryptionKey = encryptionKey
        model = try CheckedModel.make()
        temporary = path == nil ? TemporaryStore() : nil
        self.path = path ?? temporary!.path
        try FileManager.default.createDirectory(
            atPath: (self.path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        container = try PersistentContainer(
            name: "Check", model: model, directory: self.path, options: Self.options(encryptionKey))
        if specs.contains(where: { $0.process > 0 }) {
            otherProcess = try PersistentContainer(
                name: "Check", model: model, directory: self.path, options: Self.options(encryptionKey, ownStore: true))
        }
        dirty = Array(repeating: [:], count: specs.count)
        base = Array(repeating: [:], count: specs.count)
        undoStack = Array(repeating: [], count: specs.count)
        redoStack = Array(repeating: [], count: specs.count)
        undoUnknown = Array(repeating: false, count: specs.count)
        unmerged = Array(repeating: [], count: specs.count)
        makeContexts()
    }

    deinit {
        for o in observations { o.cancel() }
    }

    func makeContexts() {
        for o in observations { o.cancel() }
        observations = []
        contexts = []
        for (i, spec) in specs.enumerated() {
            let c: ManagedObjectContext
            switch spec.kind {
            case .confined: c = (spec.process > 0 ? otherProcess! : container).newContext(concurrencyType: .confinement)
            case .privateQueue:
                c = (spec.process > 0 ? otherProcess! : container).newContext(concurrencyType: .privateQueue)
            case .child(let p): c = contexts[p].newChildContext(concurrencyType: .privateQueue)
            }
            c.name = "C\(i)"
            c.mergePolicy = spec.policy
            c.automaticallyMergesChangesFromOtherContexts = spec.automaticMerging
            if spec.undo { c.undoHistory = UndoHistory() }
            contexts.append(c)
            // The saves of a root context, for the contexts that merge by hand.
            if spec.parent == nil {
                observations.append(
                    c.observeEvents { [unowned self] event in
                        if case .didSave(let changes) = event {
                            self.savedThisStep[i, default: []].formUnion(changes.updated.union(changes.inserted))
                            self.touchedThisStep.formUnion(changes.updated.union(changes.inserted))
                            self.deliver(changes, from: i)
                        }
                    })
            }
        }
    }

    /// Hands a save of context `source` to the contexts that do not merge it automatically.
    func deliver(_ changes: ContextChanges, from source: Int) {
        for (i, spec) in specs.enumerated() where i != source {
            if spec.process != specs[source].process {
                // Another process's save reaches a context only when it merges it by hand.
                unmerged[i].append(changes)
            } else if case .confined = spec.kind {
                unmerged[i].append(changes)
            } else if !spec.automaticMerging {
                unmerged[i].append(changes)
            }
        }
    }

    /// Runs `body` on context `i`'s queue.
    func on<T>(_ i: Int, _ body: (ManagedObjectContext) throws -> T) rethrows -> T {
        let c = contexts[i]
        return try c.performAndWait { try body(c) }
    }

    /// Waits until every context's queue has run what it was given (the merges of a save).
    func drain() {
        for c in contexts where c.concurrencyType != .confinement { c.performAndWait {} }
    }

    /// Object `n` in context `i`, when the context can see it and it is not deleted there.
    func object(_ n: Int, in c: ManagedObjectContext) -> ManagedObject? {
        guard n < objects.count, !gone.contains(n), let o = try? c.existingObject(with: objects[n].id), !o.isDeleted
        else { return nil }
        return o
    }

    // MARK: Steps

    /// Runs one step; returns a failure when an invariant does not hold after it.
    package func run(_ step: CheckStep) throws {
        log.append(step.description)
        savedThisStep = [:]
        touchedThisStep = []
        switch step {
        case .reopen:
            try reopen()
        case .save(let i):
            try save(i)
        case .rollback(let i):
            on(i) { $0.rollback() }
            forgetChanges(of: i)
        case .reset(let i):
            on(i) { $0.reset() }
            forgetChanges(of: i)
        case .undo(let i):
            guard specs[i].undo, !undoUnknown[i], let before = undoStack[i].popLast() else { return }
            on(i) { $0.undo() }
            redoStack[i].append(dirty[i])
            dirty[i] = before
        case .redo(let i):
            guard specs[i].undo, !undoUnknown[i], let after = redoStack[i].popLast() else { return }
            on(i) { $0.redo() }
            undoStack[i].append(dirty[i])
            dirty[i] = after
        case .mergePending(let i):
            let pending = unmerged[i]
            unmerged[i] = []
            on(i) { c in for changes in pending { c.mergeChanges(changes) } }
            for changes in pending { touchedThisStep.formUnion(changes.updated.union(changes.inserted)) }
            if specs[i].parent != nil {
                // A child reloads the saves' objects from its parent as the parent holds them
                // now (unsaved changes included), as Core Data's child refreshes from its parent;
                // its children that merge automatically do the same from it.
                let ids = pending.reduce(into: Set<ObjectID>()) { $0.formUnion($1.updated.union($1.inserted)) }
                let numbers = Set(objects.indices.filter { ids.contains(objects[$0].id) })
                drain()
                var merging = [i]
                while let c = merging.popLast() {
                    absorbParentView(into: c, only: numbers)
                    merging += specs.indices.filter { specs[$0].parent == c && specs[$0].automaticMerging }
                }
            }
        case .refresh(let i, let n, let merge):
            on(i) { c in if let o = object(n, in: c) { c.refresh(o, mergeChanges: merge) } }
            if !merge {
                // The object is read again: its changes and the values they were made on go
                // (checker seed 3005010: a base kept here made a later change look like none).
                dirty[i] = dirty[i].filter { $0.key.object != n }
                base[i] = base[i].filter { $0.key.object != n }
                undoUnknown[i] = true
            } else {
                // Merged: a change that now equals what the context reads beneath it (its
                // parent's value, or the store's) is no change any more (Core Data compares
                // with the refreshed snapshot).
                let beneath: [String: String]
                if let parent = specs[i].parent {
                    beneath = on(parent) { c in
                        var values: [String: String] = [:]
                        if let o = object(n, in: c), n < objects.count {
                            for a in CheckedModel.attributes[objects[n].entity]! {
                                values[a] = (try? o.value(forKey: a)).flatMap { $0.map { "\($0)" } } ?? "nil"
                            }
                        }
                        return values
                    }
                } else {
                    beneath = try storeValues()[n] ?? [:]
                }
                for (key, value) in dirty[i] where key.object == n && beneath[key.attribute] == value {
                    dirty[i][key] = nil
                    base[i][key] = nil
                    undoUnknown[i] = true
                }
            }
        case .batchUpdate(let i, let name, let done):
            try batchUpdate(i, name: name, done: done)
        case .batchDelete(let i, let name):
            try batchDelete(i, name: name)
        case .pinGeneration(let i):
            // A child cannot be pinned (it reads its parent's generation): an error, as documented.
            on(i) { c in _ = try? c.setQueryGeneration(.current) }
        case .asynchronousFetch(let i):
            try asynchronousFetch(i)
        default:
            try change(step)
        }
        drain()
        try absorbMerges()
    }

    /// A context that has merged every save loses the changes the store now holds too: a
    /// change the other save also made is no change any more (Core Data compares with the
    /// merged snapshot), and a later save of other values is not this context's to undo.
    func absorbMerges() throws {
        var store: [Int: [String: String]]?
        // The contexts that merged in this step: roots, then the children that merge
        // automatically from a parent that did (indices put parents before children).
        var merged = Set<Int>()
        // A save to the store by another root context, a batch request or a merge by hand:
        // only then does a parent pass merged values on to its children.
        let last = log.last ?? ""
        // (A save of nothing changes nothing, and no one hears of it.) A merge by hand changes
        // the store for no one: only the context that merged, and its children, take values
        // (checker seed 929954: the reference had a child of another root rebase on its
        // parent's unsaved value).
        let storeChanged =
            !touchedThisStep.isEmpty
            && specs.indices.contains { x in
                specs[x].parent == nil && (last.hasPrefix("C\(x): save") || last.hasPrefix("C\(x): batch"))
            }
        let touched = Set(objects.indices.filter { touchedThisStep.contains(objects[$0].id) })
        let mergedByHandRoot = specs.indices.first { x in specs[x].parent == nil && last.hasPrefix("C\(x): merge") }
        func root(of i: Int) -> Int {
            var r = i
            while let p = specs[r].parent { r = p }
            return r
        }
        // A root's own save reaches its children that merge automatically whether or not the
        // root merges other saves: they reload the objects it saved from it (checker seeds
        // 868579, 960999, 985187), and pass them on to theirs.
        var passing: [Int: Set<Int>] = [:]
        for (root, ids) in savedThisStep {
            passing[root] = Set(objects.indices.filter { ids.contains(objects[$0].id) })
        }
        for i in specs.indices {
            if let parent = specs[i].parent, specs[i].automaticMerging, let numbers = passing[parent] {
                passing[i] = numbers
                if !merged.contains(parent) {
                    absorbParentView(into: i, only: numbers)
                    continue
                }
            }
            if let parent = specs[i].parent {
                guard storeChanged || root(of: i) == mergedByHandRoot, merged.contains(parent),
                    specs[i].automaticMerging
                else { continue }
                merged.insert(i)
                guard !dirty[i].isEmpty else { continue }
                // A change now equal to the parent's value is no change; the others are
                // compared with that value from now on (the objects the change names).
                let keys = dirty[i].keys.filter { touched.contains($0.object) }
                let beneath: [Key: String] = on(parent) { c -> [Key: String] in
                    var values: [Key: String] = [:]
                    for key in keys {
                        guard let o = object(key.object, in: c) else { continue }
                        let v: Any? = (try? o.value(forKey: key.attribute)) ?? nil
                        values[key] = v.map { "\($0)" } ?? "nil"
                    }
                    return values
                }
                rebase(i, on: beneath.filter { !Self.changedAbove($0.key, from: parent, dirty: dirty, specs: specs) })
                continue
            }
            // A context pinned to a query generation merges too (the merge moves it to the
            // latest generation, as in Core Data): only saves it has not merged keep it out —
            // but for another process's: a context that merges automatically still merges the
            // saves of its own process, which reload the objects they name (from the store as
            // it is, the other process's commits included: checker seed 25809, two processes).
            let changer = specs.indices.first { x in
                specs[x].parent == nil && (last.hasPrefix("C\(x): save") || last.hasPrefix("C\(x): batch"))
            }
            let onlyTouched = !unmerged[i].isEmpty
            if onlyTouched {
                guard case .privateQueue = specs[i].kind, specs[i].automaticMerging, storeChanged,
                    let changer, changer != i, specs[changer].process == specs[i].process
                else { continue }
            }
            // A batch request merges its results into the context that ran it.
            let ranABatch = log.last?.hasPrefix("C\(i): batch") == true
            let mergedByHand = log.last?.hasPrefix("C\(i): merge") == true
            if case .confined = specs[i].kind, !mergedByHand, !ranABatch { continue }
            if case .privateQueue = specs[i].kind, !specs[i].automaticMerging, !mergedByHand, !ranABatch {
                continue
            }
            merged.insert(i)
            guard !dirty[i].isEmpty else { continue }
            if store == nil { store = try storeValues() }
            absorb(store!, into: i, only: onlyTouched ? touched : nil)
        }
    }

    /// Child `i` reloaded the objects `only` from its parent: each change of them now equal to
    /// the parent's value is no change, and the others are compared with that value.
    func absorbParentView(into i: Int, only: Set<Int>) {
        guard let parent = specs[i].parent else { return }
        let keys = dirty[i].keys.filter { only.contains($0.object) }
        guard !keys.isEmpty else { return }
        let loaded: Set<Int> = on(i) { c in
            Set(keys.map(\.object).filter { n in c.registeredObjects.contains { $0.objectID == objects[n].id } })
        }
        let beneath: [Key: String] = on(parent) { c -> [Key: String] in
            var values: [Key: String] = [:]
            for key in keys where loaded.contains(key.object) {
                guard let o = object(key.object, in: c) else { continue }
                let v: Any? = (try? o.value(forKey: key.attribute)) ?? nil
                values[key] = v.map { "\($0)" } ?? "nil"
            }
            return values
        }
        // A change that an ancestor's own unsaved value happens to equal stays a change
        // (Logbook pins it: checker seed 663777); one the stored value equals is settled
        // (checker seed 7044693: the reference dropped a child's change at a merge by hand that
        // Logbook kept, and then took the child's later save into its parent for none).
        rebase(
            i,
            on: beneath.filter { key, value in
                !(dirty[i][key] == value && Self.changedAbove(key, from: parent, dirty: dirty, specs: specs))
            })
    }

    /// Child `i` reloaded `values` from its parent: a change now equal to the parent's value
    /// is no change, the others are compared with it from then on, and undo's outcome is no
    /// longer the reference's to predict.
    func rebase(_ i: Int, on values: [Key: String]) {
        for (key, value) in values {
            if dirty[i][key] == value {
                dirty[i][key] = nil
                base[i][key] = nil
            } else {
                base[i][key] = value
            }
            undoUnknown[i] = true
        }
    }

    /// Context `i` merged the store's `values` (of the objects `only`, or all): a change now
    /// equal to the stored value is no change, and the others are compared with that value from
    /// then on (what undo gives back no longer matches the reference's steps: seed 86275).
    func absorb(_ values: [Int: [String: String]], into i: Int, only: Set<Int>? = nil) {
        for (key, value) in dirty[i] where only?.contains(key.object) ?? true {
            guard let stored = values[key.object]?[key.attribute] else { continue }
            if stored == value {
                dirty[i][key] = nil
                base[i][key] = nil
                undoUnknown[i] = true
            } else if base[i][key] != stored {
                base[i][key] = stored
                undoUnknown[i] = true
            }
        }
    }

    /// Whether a context above `parent` (or `parent` itself) has its own unsaved change of
    /// `key`: a merge does not pass the store's value of it on to the children.
    static func changedAbove(_ key: Key, from parent: Int, dirty: [[Key: String]], specs: [CheckedContextSpec]) -> Bool
    {
        var p: Int? = parent
        while let c = p {
            if dirty[c][key] != nil { return true }
            p = specs[c].parent
        }
        return false
    }

    /// A change to objects in one context: one undo step there.
    func change(_ step: CheckStep) throws {
        let i: Int
        switch step {
        case .insert(let c, _, _), .setName(let c, _, _), .setDone(let c, _, _), .setFolder(let c, _, _),
            .setOwner(let c, _, _),
            .tag(let c, _, _, _), .insertInFolder(let c, _, _, _), .moveInFolder(let c, _, _, _), .delete(let c, _):
            i = c
        default: return
        }
        let before = dirty[i]
        let (undoBefore, redoBefore) = on(i) { c in
            (c.undoHistory?.undoCount ?? 0, c.undoHistory?.redoCount ?? 0)
        }
        do {
            try on(i) { c in
                c.undoHistory?.beginUndoGrouping()
                defer { c.undoHistory?.endUndoGrouping() }
                try apply(step, in: c, context: i)
            }
        } catch let error as LogbookError where error.code == .objectNotFound {
            // A fault of an object another save deleted, in a context that has not merged that
            // save yet, cannot be fired (Core Data raises "could not fulfill a fault"): the
            // change fails as a whole, and the invariants after the step check it left nothing.
            // The same for an object its parent (or grandparent) deleted since this context
            // read it (a fault of it cannot be fired from the parent either).
            let stored = try storeValues()
            func goneAbove(_ n: Int) -> Bool {
                var p = specs[i].parent
                while let parent = p {
                    if on(parent, { object(n, in: $0) }) == nil { return true }
                    p = specs[parent].parent
                }
                return false
            }
            guard step.objects.contains(where: { stored[$0] == nil || goneAbove($0) }) else { throw error }
        }
        let (undoAfter, redoAfter) = on(i) { c in
            (c.undoHistory?.undoCount ?? 0, c.undoHistory?.redoCount ?? 0)
        }
        if specs[i].undo {
            if undoAfter == undoBefore + 1 || (undoAfter == undoBefore && undoAfter > 0 && redoAfter < redoBefore) {
                undoStack[i].append(before)
            }
            if redoAfter == 0 { redoStack[i] = [] }
        }
    }

    /// The change itself (on the context's queue); skipped when its objects are not there.
    func apply(_ step: CheckStep, in c: ManagedObjectContext, context i: Int) throws {
        switch step {
        case .insert(_, let entity, let value):
            let o = try c.insertNewObject(forEntityName: entity)
            let key = entity == "Tag" ? "code" : "name"
            try o.setValue(value, forKey: key)
            objects.append((o.objectID, entity))
            let n = objects.count - 1
            dirty[i][Key(object: n, attribute: key)] = value
            if entity == "Item" { dirty[i][Key(object: n, attribute: "done")] = "false" }
        case .setName(_, let n, let value):
            guard let o = object(n, in: c), objects[n].entity != "Tag" else { return }
            // Setting the value a property holds changes nothing (Core Data's `changedValues`).
            let current = try o.value(forKey: "name") as? String
            try o.setValue(value, forKey: "name")
            record(value, for: Key(object: n, attribute: "name"), was: current ?? "nil", in: i)
        case .setDone(_, let n, let value):
            guard let o = object(n, in: c), objects[n].entity == "Item" else { return }
            let current = try o.value(forKey: "done") as? Bool
            try o.setValue(value, forKey: "done")
            record("\(value)", for: Key(object: n, attribute: "done"), was: current.map { "\($0)" } ?? "nil", in: i)
        case .setFolder(_, let n, let f):
            guard let item = object(n, in: c), objects[n].entity == "Item" else { return }
            if let f {
                guard let folder = object(f, in: c), objects[f].entity == "Folder" else { return }
                try item.setValue(folder, forKey: "folder")
            } else {
                try item.setValue(nil, forKey: "folder")
            }
        case .setOwner(_, let n, let f):
            guard let item = object(n, in: c), objects[n].entity == "Item" else { return }
            if let f {
                guard let folder = object(f, in: c), objects[f].entity == "Folder" else { return }
                try item.setValue(folder, forKey: "owner")
            } else {
                try item.setValue(nil, forKey: "owner")
            }
        case .tag(_, let n, let t, let add):
            guard let item = object(n, in: c), objects[n].entity == "Item", let tag = object(t, in: c),
                objects[t].entity == "Tag"
            else { return }
            if add { try item.add(tag, toRelationship: "tags") } else { try item.remove(tag, fromRelationship: "tags") }
        case .insertInFolder(_, let f, let n, let position):
            guard let folder = object(f, in: c), objects[f].entity == "Folder", let item = object(n, in: c),
                objects[n].entity == "Item"
            else { return }
            let members = try folder.orderedObjects(forKey: "items")
            if members.contains(where: { $0 === item }) { return }
            try folder.insert(item, at: min(position, members.count), inRelationship: "items")
        case .moveInFolder(_, let f, let from, let to):
            guard let folder = object(f, in: c), objects[f].entity == "Folder" else { return }
            let count = try folder.orderedObjects(forKey: "items").count
            guard count > 1 else { return }
            try folder.moveObject(at: from % count, to: to % count, inRelationship: "items")
        case .delete(_, let n):
            guard let o = object(n, in: c) else { return }
            c.delete(o)
        default:
            break
        }
    }

    /// Records a value set: a change, unless it gives the property back the value it had before
    /// this context first changed it (a net change of nothing, which a save does not write).
    func record(_ value: String, for key: Key, was current: String, in i: Int) {
        if dirty[i][key] == nil, base[i][key] == nil { base[i][key] = current }
        if value == base[i][key] && dirty[i][key] != nil || (dirty[i][key] == nil && value == current) {
            // No change: nothing to compare with later either (a base kept here went stale
            // when the context read the object again: checker seed 80285).
            dirty[i][key] = nil
            base[i][key] = nil
        } else {
            dirty[i][key] = value
        }
    }

    /// Forgets the reference's changes of context `i` (a rollback, a reset, a save).
    func forgetChanges(of i: Int) {
        dirty[i] = [:]
        base[i] = [:]
        undoStack[i] = []
        redoStack[i] = []
        undoUnknown[i] = false
    }

    func reopen() throws {
        drain()
        let stored = try storeValues()
        for n in objects.indices where stored[n] == nil { gone.insert(n) }
        for o in observations { o.cancel() }
        observations = []
        contexts = []
        try container.close()
        try otherProcess?.close()
        container = try PersistentContainer(
            name: "Check", model: model, directory: path, options: Self.options(encryptionKey))
        if otherProcess != nil {
            otherProcess = try PersistentContainer(
                name: "Check", model: model, directory: path, options: Self.options(encryptionKey, ownStore: true))
        }
        for i in specs.indices {
            forgetChanges(of: i)
            unmerged[i] = []
        }
        makeContexts()
    }

    // MARK: Saves and batch requests

    /// A save. A root context's save must leave every attribute it did not change as the
    /// store held it, and (under the policies that keep local changes) every one it changed
    /// as it set it; a conflict is an error only under `.error` (and a uniqueness conflict
    /// within the store too); a child's save moves its changes into its parent.
    func save(_ i: Int) throws {
        let before = try storeValues()
        let changed = dirty[i]
        // For a child: what its parent holds before the push, for the parent's reference.
        var parentHeld: [Key: String] = [:]
        if let parent = specs[i].parent {
            on(parent) { c in
                for key in changed.keys where dirty[parent][key] == nil && base[parent][key] == nil {
                    if let o = object(key.object, in: c), let v = try? o.value(forKey: key.attribute) {
                        parentHeld[key] = "\(v)"
                    }
                }
            }
        }
        let outcome: Result<Void, any Error> = on(i) { c in Result { try c.save() } }
        drain()
        switch outcome {
        case .failure(let error):
            guard let e = error as? LogbookError else { throw CheckFailure("save failed with \(error)") }
            switch e.code {
            case .mergeConflict where specs[i].policy == .error, .constraintConflict where specs[i].policy == .error:
                log[log.count - 1] += " → \(e.code)"
                return
            default:
                throw CheckFailure("C\(i)'s save failed: \(e)")
            }
        case .success:
            break
        }
        if let parent = specs[i].parent {
            for (key, value) in parentHeld where base[parent][key] == nil { base[parent][key] = value }
            // A value the parent held before it changed it is no change of the parent's any more,
            // and then nothing to compare with later either: a base kept without a change went
            // stale when the parent merged another save (checker seed 21008902: the parent held
            // "c" when a child pushed "c"; it merged another save's "b", the child changed that
            // "b" to "c" and pushed it, and the reference, comparing with the stale "c", took the
            // parent's save of "c" for a lost update).
            for (key, value) in changed {
                if base[parent][key] == value {
                    dirty[parent][key] = nil
                    base[parent][key] = nil
                } else {
                    dirty[parent][key] = value
                }
            }
            undoUnknown[parent] = true
            forgetChanges(of: i)
            return
        }
        let after = try storeValues()
        let policy = specs[i].policy
        for (n, values) in after {
            for (attribute, value) in values {
                let key = Key(object: n, attribute: attribute)
                if let mine = changed[key] {
                    if [.error, .mergeByPropertyObjectTrump, .overwrite].contains(policy), value != mine {
                        throw CheckFailure(
                            "after C\(i)'s save #\(n).\(attribute) is \"\(value)\", not the \"\(mine)\" it set")
                    }
                } else if let old = before[n]?[attribute], old != value,
                    [.error, .mergeByPropertyObjectTrump, .mergeByPropertyStoreTrump, .rollback].contains(policy)
                {
                    throw CheckFailure(
                        "C\(i)'s save changed #\(n).\(attribute) from \"\(old)\" to \"\(value)\", which it did not change (a lost update)"
                    )
                }
            }
        }
        forgetChanges(of: i)
    }

    func batchUpdate(_ i: Int, name: String, done: Bool) throws {
        guard specs[i].parent == nil else { return }
        var request = BatchUpdateRequest(entityName: "Item")
        request.predicate = try FetchPredicate(format: "name == %@", name)
        request.propertiesToUpdate = ["done": done]
        request.resultType = .objectIDs
        let result = try on(i) { c in try c.execute(request) }
        touchedThisStep.formUnion(result.objectIDs)
        deliver(ContextChanges(updated: Set(result.objectIDs)), from: i)
        // The context that ran it merges its results: the objects it updated read the store
        // (every attribute), whatever other saves the context has not merged.
        let touched = Set(result.objectIDs)
        let numbers = Set(objects.indices.filter { touched.contains(objects[$0].id) })
        guard !numbers.isEmpty else { return }
        if !dirty[i].isEmpty { absorb(try storeValues(), into: i, only: numbers) }
        // Its children that merge automatically reload those objects from it (and theirs from
        // them), whatever other saves the context has not merged (checker seed 2056641: the
        // reference kept a child's change the batch had made no change, and then took the
        // child's later change back to the old value for none).
        drain()
        var merging = specs.indices.filter { specs[$0].parent == i && specs[$0].automaticMerging }
        while let c = merging.popLast() {
            absorbParentView(into: c, only: numbers)
            merging += specs.indices.filter { specs[$0].parent == c && specs[$0].automaticMerging }
        }
    }

    /// An asynchronous fetch of every item on a context with a queue: it completes, without an
    /// error, none of its objects unusable, and (on a context without unsaved changes) with as
    /// many objects as a fetch on the same context then finds.
    func asynchronousFetch(_ i: Int) throws {
        guard contexts[i].concurrencyType != .confinement else { return }
        let request = FetchRequest<ManagedObject>(entityName: "Item")
        let done = DispatchSemaphore(value: 0)
        let outcome = Locked<(count: Int, unusable: Int, error: String?)?>(nil)
        _ = try on(i) { c in
            try c.execute(
                AsynchronousFetchRequest(fetchRequest: request) { result in
                    let objects = result.finalResult ?? []
                    outcome.withLock {
                        $0 = (
                            objects.count, objects.filter { $0.managedObjectContext == nil }.count,
                            result.error.map { "\($0)" }
                        )
                    }
                    done.signal()
                })
        }
        guard done.wait(timeout: .now() + 30) == .success else {
            throw CheckFailure("C\(i)'s asynchronous fetch did not complete")
        }
        guard let found = outcome.withLock({ $0 }) else { return }
        if let error = found.error { throw CheckFailure("C\(i)'s asynchronous fetch failed: \(error)") }
        if found.unusable > 0 {
            throw CheckFailure("C\(i)'s asynchronous fetch handed out \(found.unusable) unusable objects")
        }
        // With unsaved changes the two may differ by design (a changed object another save
        // deleted is matched in memory by a fetch, not found by the asynchronous fetch's scan).
        let (expected, changed) = try on(i) { c in (try c.count(for: request), c.hasChanges) }
        if !changed && found.count != expected {
            throw CheckFailure("C\(i)'s asynchronous fetch found \(found.count) items, a fetch then \(expected)")
        }
    }

    func batchDelete(_ i: Int, name: String) throws {
        guard specs[i].parent == nil else { return }
        let request = BatchDeleteRequest(entityName: "Item", predicate: try FetchPredicate(format: "name == %@", name))
        let result = try on(i) { c in try c.execute(request) }
        deliver(ContextChanges(deleted: Set(result.objectIDs)), from: i)
    }

    /// With `LOGBOOK_MODEL_CHECK_TRACE` set: after each step, what each context reads of every
    /// object's attributes and the reference's changes and their bases, on standard error.
    func trace() {
        var lines = ["after \(log.last ?? "")"]
        for i in specs.indices {
            let values: [String] = on(i) { c in
                objects.indices.compactMap { n -> String? in
                    guard let o = object(n, in: c) else { return nil }
                    let attributes = CheckedModel.attributes[objects[n].entity]!.map { a in
                        "\(a)=\((try? o.value(forKey: a)).flatMap { $0.map { "\($0)" } } ?? "nil")"
                    }
                    return "#\(n)(\(attributes.joined(separator: ",")))"
                }
            }
            let changes = dirty[i].map {
                "#\($0.key.object).\($0.key.attribute)=\($0.value) base \(base[i][$0.key] ?? "-")"
            }
            lines.append("  C\(i): \(values.joined(separator: " ")) | changes: \(changes.joined(separator: ", "))")
        }
        FileHandle.standardError.write(Data((lines.joined(separator: "\n") + "\n").utf8))
    }

    // MARK: Invariants

    /// The attribute values the store holds, by object (objects not in the store are absent).
    func storeValues() throws -> [Int: [String: String]] {
        let c = container.newContext(concurrencyType: .confinement)
        var result: [Int: [String: String]] = [:]
        for (n, (id, entity)) in objects.enumerated() where !gone.contains(n) {
            guard let o = try? c.existingObject(with: id) else { continue }
            var values: [String: String] = [:]
            for a in CheckedModel.attributes[entity]! {
                values[a] = try o.value(forKey: a).map { "\($0)" } ?? "nil"
            }
            result[n] = values
        }
        return result
    }

    /// The invariants of the store (read by a new context) and of every context: inverses agree,
    /// no reference leads to a missing object, ordered relationships are permutations of their
    /// members, tag codes are unique in the store.
    package func checkInvariants() throws {
        let fresh = container.newContext(concurrencyType: .confinement)
        try checkGraph(in: fresh, name: "the store", loadedOnly: false)
        var codes: [String: Int] = [:]
        for (n, (id, entity)) in objects.enumerated() where entity == "Tag" && !gone.contains(n) {
            guard let o = try? fresh.existingObject(with: id), let code = try o.value(forKey: "code") as? String else {
                continue
            }
            if let other = codes.updateValue(n, forKey: code) {
                throw CheckFailure("the store holds two tags coded \"\(code)\": #\(other) and #\(n)")
            }
        }
        // A context that has not merged every save may hold objects read at different
        // versions, which need not agree (as in Core Data): checked once it has merged them.
        // A child context is a view of its parent as it was when the child read each object
        // (a parent's later changes do not reach it, as in Core Data): its saves are checked in
        // the parent and the store.
        for (i, c) in contexts.enumerated() where specs[i].parent == nil && upToDate(i) {
            try c.performAndWait { try checkGraph(in: c, name: "C\(i)", loadedOnly: true) }
        }
    }

    /// Whether context `i` and its ancestors have merged every save of the other contexts (and
    /// none reads a pinned query generation).
    func upToDate(_ i: Int) -> Bool {
        var next: Int? = i
        while let c = next {
            if !unmerged[c].isEmpty { return false }
            if on(c, { $0.queryGenerationToken != nil }) { return false }
            next = specs[c].parent
        }
        return true
    }

    /// The relationship invariants as `c` sees its objects (those it has loaded, for a context).
    func checkGraph(in c: ManagedObjectContext, name: String, loadedOnly: Bool) throws {
        // In a context, only what it holds (the check must not load objects into it).
        let held = loadedOnly ? Dictionary(c.registeredObjects.map { ($0.objectID, $0) }) { a, _ in a } : [:]
        for (n, (id, entity)) in objects.enumerated() where !gone.contains(n) {
            let found = loadedOnly ? held[id] : try? c.existingObject(with: id)
            guard let o = found, !o.isDeleted, !o.isFault || !loadedOnly else { continue }
            do {
                switch entity {
                case "Folder":
                    let ordered = try o.orderedObjects(forKey: "items")
                    let members = try o.objects(forKey: "items")
                    if ordered.count != members.count || Set(ordered.map(ObjectIdentifier.init)).count != ordered.count
                        || !ordered.allSatisfy({ members.contains($0) })
                    {
                        throw CheckFailure(
                            "\(name): #\(n).items reads \(ordered.count) in order but holds \(members.count) (not a permutation)"
                        )
                    }
                    for m in members where !m.isDeleted && !(loadedOnly && m.isFault) {
                        let back = try m.value(forKey: "folder") as? ManagedObject
                        if back !== o {
                            throw CheckFailure(
                                "\(name): #\(n).items holds \(label(m)), whose folder is \(back.map(label) ?? "nil")")
                        }
                    }
                    for m in try o.objects(forKey: "owned") where !m.isDeleted && !(loadedOnly && m.isFault) {
                        let back = try m.value(forKey: "owner") as? ManagedObject
                        if back !== o {
                            throw CheckFailure(
                                "\(name): #\(n).owned holds \(label(m)), whose owner is \(back.map(label) ?? "nil")")
                        }
                    }
                case "Item":
                    if let f = try o.value(forKey: "folder") as? ManagedObject, !f.isDeleted,
                        !(loadedOnly && f.isFault)
                    {
                        let members = try f.objects(forKey: "items")
                        if !members.contains(o) {
                            throw CheckFailure("\(name): #\(n).folder is \(label(f)), whose items do not hold it")
                        }
                    }
                    if let f = try o.value(forKey: "owner") as? ManagedObject, !f.isDeleted,
                        !(loadedOnly && f.isFault), !(try f.objects(forKey: "owned")).contains(o)
                    {
                        throw CheckFailure("\(name): #\(n).owner is \(label(f)), whose owned objects do not hold it")
                    }
                    for t in try o.objects(forKey: "tags") where !t.isDeleted && !(loadedOnly && t.isFault) {
                        if !(try t.objects(forKey: "items")).contains(o) {
                            throw CheckFailure("\(name): #\(n).tags holds \(label(t)), whose items do not hold it")
                        }
                    }
                default:
                    for item in try o.objects(forKey: "items") where !item.isDeleted && !(loadedOnly && item.isFault) {
                        if !(try item.objects(forKey: "tags")).contains(o) {
                            throw CheckFailure("\(name): #\(n).items holds \(label(item)), whose tags do not hold it")
                        }
                    }
                }
            } catch let e as LogbookError {
                throw CheckFailure("\(name): reading #\(n) (\(entity)) fails: \(e)")
            }
        }
    }

    /// `#n` for an object the run made.
    func label(_ o: ManagedObject) -> String {
        objects.firstIndex { $0.id == o.objectID }.map { "#\($0)" } ?? "\(o.objectID)"
    }

    // MARK: The store, as text

    /// Everything the store holds, as sorted lines of text (objects by their ID: attributes,
    /// to-one targets, to-many members, ordered members in order), read by a new context.
    package func dump() throws -> [String] { try Self.dump(container) }

    /// `dump()` of any container of the checker's model (the crash mode reads the store a
    /// killed run left).
    package static func dump(_ container: PersistentContainer) throws -> [String] {
        try dump(container.newContext(concurrencyType: .confinement))
    }

    /// What context `c` reads of every object (on its queue).
    package static func dump(_ c: ManagedObjectContext) throws -> [String] {
        var lines: [String] = []
        func id(_ o: ManagedObject?) -> String { o.map { "\($0.objectID)" } ?? "nil" }
        for entity in ["Folder", "Item", "Tag"] {
            for o in try c.fetch(FetchRequest<ManagedObject>(entityName: entity)) {
                var line = id(o)
                for a in CheckedModel.attributes[entity]! {
                    line += " \(a)=\(try o.value(forKey: a).map { "\($0)" } ?? "nil")"
                }
                switch entity {
                case "Folder":
                    line += " items=\(try o.orderedObjects(forKey: "items").map(id))"
                    line += " owned=\(try o.objects(forKey: "owned").map(id).sorted())"
                case "Item":
                    line += " folder=\(id(try o.value(forKey: "folder") as? ManagedObject))"
                    line += " owner=\(id(try o.value(forKey: "owner") as? ManagedObject))"
                    line += " tags=\(try o.objects(forKey: "tags").map(id).sorted())"
                default:
                    line += " items=\(try o.objects(forKey: "items").map(id).sorted())"
                }
                lines.append(line)
            }
        }
        return lines.sorted()
    }

    /// The invariants of a store of the checker's model read by a new context: inverses agree,
    /// no reference leads to a missing object, ordered relationships are permutations of their
    /// members, tag codes are unique.
    package static func checkStore(_ container: PersistentContainer) throws {
        let c = container.newContext(concurrencyType: .confinement)
        var codes = Set<String>()
        for tag in try c.fetch(FetchRequest<ManagedObject>(entityName: "Tag")) {
            guard let code = try tag.value(forKey: "code") as? String else { continue }
            if !codes.insert(code).inserted { throw CheckFailure("two tags have the code \(code)") }
        }
        for folder in try c.fetch(FetchRequest<ManagedObject>(entityName: "Folder")) {
            let ordered = try folder.orderedObjects(forKey: "items")
            if Set(ordered.map(\.objectID)).count != ordered.count {
                throw CheckFailure("\(folder.objectID).items holds a member twice")
            }
            for item in ordered where (try item.value(forKey: "folder") as? ManagedObject)?.objectID != folder.objectID
            {
                throw CheckFailure("\(folder.objectID).items holds \(item.objectID), whose folder is not it")
            }
            for item in try folder.objects(forKey: "owned")
            where (try item.value(forKey: "owner") as? ManagedObject)?.objectID != folder.objectID {
                throw CheckFailure("\(folder.objectID).owned holds \(item.objectID), whose owner is not it")
            }
        }
        for item in try c.fetch(FetchRequest<ManagedObject>(entityName: "Item")) {
            if let folder = try item.value(forKey: "folder") as? ManagedObject,
                !(try folder.orderedObjects(forKey: "items").contains { $0.objectID == item.objectID })
            {
                throw CheckFailure("\(item.objectID).folder is \(folder.objectID), whose items do not hold it")
            }
            if let owner = try item.value(forKey: "owner") as? ManagedObject,
                !(try owner.objects(forKey: "owned").contains { $0.objectID == item.objectID })
            {
                throw CheckFailure("\(item.objectID).owner is \(owner.objectID), whose owned do not hold it")
            }
            for tag in try item.objects(forKey: "tags")
            where !(try tag.objects(forKey: "items").contains { $0.objectID == item.objectID }) {
                throw CheckFailure("\(item.objectID).tags holds \(tag.objectID), whose items do not hold it")
            }
        }
    }
}
