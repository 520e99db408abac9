extension ManagedObjectContext {
    var contextState: UndoHistory.ContextState {
        .init(
            inserted: inserted, updated: updated, deleted: deleted, setAdds: setAdds, setRemoves: setRemoves,
            orderOverrides: orderOverrides)
    }

    /// Runs a change as one undo step (unless inside a larger step).
    ///
    /// Inlined, so that a context without an undo history runs `body` where it is written: a
    /// closure passed to a call retained the context around it, and every retain of a context
    /// takes the runtime's slow path (contexts are referenced weakly elsewhere).
    @inline(__always)
    func undoable<T>(_ body: () throws -> T) throws -> T {
        guard let history = undoHistory else { return try body() }
        return try recordingUndo(history, body)
    }

    /// `undoable` with an undo history: the step opened and closed around `body`.
    private func recordingUndo<T>(_ history: UndoHistory, _ body: () throws -> T) throws -> T {
        if history.open == nil { history.open = UndoHistory.Step(context: contextState) }
        groupDepth += 1
        defer {
            groupDepth -= 1
            if groupDepth == 0 && history.explicitDepth == 0 { history.close() }
        }
        return try body()
    }

    /// Records an object's state before its first change in the open undo step.
    func willChange(_ object: ManagedObject) {
        guard let history = undoHistory, history.open != nil else { return }
        let id = ObjectIdentifier(object)
        guard history.open!.objects[id] == nil else { return }
        let isNew = !object.flags.contains(.registered) && !object.flags.contains(.inserted)
        history.open!.objects[id] = .init(
            object: object, slots: object.slots, committed: object.committed,
            flags: object.flags, wasNew: isNew)
    }

    private func restore(_ step: UndoHistory.Step) -> UndoHistory.Step {
        // Last (deferred first): the set changes restored are net changes again, against what
        // the context reads now (checker seed 766067).
        defer { dropNoOpSetChanges() }
        var inverse = UndoHistory.Step(context: contextState)
        // Objects another save deleted since (merged here): undo does not bring them back,
        // nor their changes (a later save would have written them again: checker seed 64331).
        var gone: [UInt64: ManagedObject] = [:]
        for o in step.context.updated.values where Self.isGoneFromStore(o) { gone[o.engineKey] = o }
        for o in step.context.deleted.values where Self.isGoneFromStore(o) { gone[o.engineKey] = o }
        for s in step.objects.values where Self.isGoneFromStore(s.object) { gone[s.object.engineKey] = s.object }
        defer {
            for o in gone.values { forgetDeletedInStore(o) }
            if !gone.isEmpty { unlinkPending(toDeleted: Set(gone.keys)) }
        }
        // Objects whose to-one values went back property by property: their inverse sets are
        // put in step with them once the context's changes are restored (a merge since may
        // have brought the same link from the store: checker seeds 38536, 64553).
        var relinked: [(ManagedObject, candidates: [FieldValue])] = []
        // And objects that, property by property, now differ from the values they were merged
        // with are changes to save, whatever the restored context state says.
        var stillChanged: [ManagedObject] = []
        defer {
            for o in stillChanged where !o.flags.contains(.invalid) && !o.flags.contains(.inserted) {
                if let committed = o.committed, committed != o.slots {
                    o.flags.insert(.updated)
                    updated[o.engineKey] = o
                }
            }
            for (o, candidates) in relinked { relinkToOneInverses(o, candidates) }
            // The set changes come back as they were before the step, which drops what a merge
            // since made of them: an object whose pending to-one value won over a merged one
            // left the merged destination's set then, and leaves it again here (checker seed
            // 82588).
            let relinkedObjects = Set(relinked.map { ObjectIdentifier($0.0) })
            for o in updated.values where !o.layout.toOne.isEmpty && !relinkedObjects.contains(ObjectIdentifier(o)) {
                if let committed = o.committed { relinkToOneInverses(o, committed) }
            }
        }
        for (id, s) in step.objects where gone[s.object.engineKey] !== s.object {
            inverse.objects[id] = .init(
                object: s.object, slots: s.object.slots, committed: s.object.committed,
                flags: s.object.flags, wasNew: false)
            if let after = s.after, !s.wasNew, after.count == s.slots.count, s.object.slots.count == s.slots.count {
                // Property by property: what the step changed goes back; values merged since
                // (from other saves) stay, and so does the snapshot they were merged with.
                var slots = s.object.slots
                let snapshot = s.object.committed.flatMap { $0.count == slots.count ? $0 : nil }
                for i in slots.indices where s.slots[i] != after[i] {
                    // A property the step changed first is unchanged again: it reads the
                    // snapshot as merged since (another save's value of it stays: checker seed
                    // 117300); one an earlier step changed goes back to that step's value.
                    let firstChange = s.committed.map { $0.count == slots.count && $0[i] == s.slots[i] } ?? true
                    slots[i] = firstChange ? (snapshot?[i] ?? s.slots[i]) : s.slots[i]
                }
                if !s.object.layout.toOne.isEmpty && slots != s.object.slots {
                    relinked.append((s.object, s.object.slots + after + (s.object.committed ?? [])))
                }
                if s.object.committed != nil { stillChanged.append(s.object) }
                s.object.slots = slots
                if s.committed == nil && s.object.committed == nil { s.object.committed = nil }
            } else {
                s.object.slots = s.slots
                s.object.committed = s.committed
            }
            s.object.flags = s.wasNew ? [.invalid] : s.flags
            if s.wasNew {
                unregister(s.object.engineKey)
            } else if s.object.flags.contains(.registered) {
                register(s.object)
            }
        }
        inserted = step.context.inserted
        updated = step.context.updated
        deleted = step.context.deleted
        setAdds = step.context.setAdds
        setRemoves = step.context.setRemoves
        orderOverrides = step.context.orderOverrides
        return inverse
    }

    /// Drops the pending set changes that change nothing against what the context reads
    /// beneath them: an addition of a member the set holds there, a removal of one it does not.
    /// Undo brings back the set changes as they were before a step; a merge since may have
    /// brought the same membership from the store (another save linked the same member), and a
    /// pending addition of it would then cancel a later removal instead of recording it
    /// (checker seed 766067: the folder kept the item its to-one had left).
    func dropNoOpSetChanges() {
        for (k, adds) in setAdds {
            let owners = possibleOwners(ofSet: k)
            if owners.contains(where: { registered($0)?.flags.contains(.inserted) ?? false }) { continue }
            var kept = adds
            for m in adds where baseHasMember(m, ofSet: k) { _ = kept.remove(m) }
            setAdds[k] = kept.isEmpty ? nil : kept
        }
        for (k, removes) in setRemoves {
            let kept = removes.filter { baseMayHaveMember($0, ofSet: k) }
            setRemoves[k] = kept.isEmpty ? nil : kept
        }
    }

    /// Makes the inverse sets of `o`'s to-one relationships agree with its values: it is a
    /// member of its destination's set and of no other set among `candidates` (the values it
    /// may have been linked to).
    func relinkToOneInverses(_ o: ManagedObject, _ candidates: [FieldValue]) {
        let layout = o.layout
        guard !o.flags.contains(.invalid) else { return }
        for (n, r) in layout.toOne.enumerated() {
            guard let inv = layout.relationshipInverse[r] else { continue }
            let declared = model.layouts[layout.relationshipDestination[r]]
            guard declared.entity.relationships[inv].isToMany else { continue }
            let slot = layout.attributeCount + n
            // A value equal to the snapshot is no change of this context's: the sets beneath
            // hold what other contexts made of it (checker seed 91246).
            guard let committed = o.committed, committed.count == o.slots.count, committed[slot] != o.slots[slot]
            else { continue }
            var others = Set<UInt64>()
            var i = slot
            while i < candidates.count {
                if case .object(let k) = candidates[i] { others.insert(k) }
                i += layout.slotCount
            }
            let target: UInt64? = if case .object(let k) = o.slots[slot] { k } else { nil }
            if let target { others.remove(target) }
            for other in others.sorted() {
                let destination = declared.inTree ? (self.layout(forKey: other) ?? declared) : declared
                let k = setKey(other, destination, inv)
                if viewHasMember(o.engineKey, ofSet: k) { removeMember(o.engineKey, fromSet: k) }
            }
            if let target {
                let destination = declared.inTree ? (self.layout(forKey: target) ?? declared) : declared
                let k = setKey(target, destination, inv)
                if !viewHasMember(o.engineKey, ofSet: k) { addMember(o.engineKey, toSet: k) }
            }
        }
    }

    /// Deleted by another save and merged here (`forgetDeletedInStore`), or by this context's
    /// saved deletion: either way, not in the store any more.
    static func isGoneFromStore(_ o: ManagedObject) -> Bool {
        o.flags.contains(.deleted) && o.flags.contains(.invalid)
    }

    /// Undoes the last undo step.
    public func undo() {
        guard let history = undoHistory else { return }
        history.close()
        guard let step = history.undoStack.popLast() else { return }
        var inverse = restore(step)
        // Objects created by the undone step come back as they were when redone.
        for (id, s) in step.objects where s.wasNew {
            let o = inverse.objects[id]!
            inverse.objects[id] = .init(
                object: o.object, slots: o.slots, committed: o.committed, flags: o.flags.union(.registered),
                wasNew: false)
        }
        history.redoStack.append(inverse)
    }

    /// Redoes the last undone step.
    public func redo() {
        guard let history = undoHistory, let step = history.redoStack.popLast() else { return }
        var inverse = restore(step)
        // What redo brought back can be undone again.
        for (id, s) in inverse.objects {
            let before = step.objects[id]
            if before?.flags.contains(.inserted) == true && !s.flags.contains(.inserted) && s.flags.contains(.invalid) {
                inverse.objects[id] = .init(
                    object: s.object, slots: s.slots, committed: s.committed, flags: s.flags, wasNew: true)
            }
        }
        history.undoStack.append(inverse)
    }
}
