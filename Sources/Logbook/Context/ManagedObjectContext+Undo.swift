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
        var inverse = UndoHistory.Step(context: contextState)
        for (id, s) in step.objects {
            inverse.objects[id] = .init(
                object: s.object, slots: s.object.slots, committed: s.object.committed,
                flags: s.object.flags, wasNew: false)
            if let after = s.after, !s.wasNew, after.count == s.slots.count, s.object.slots.count == s.slots.count {
                // Property by property: what the step changed goes back; values merged since
                // (from other saves) stay, and so does the snapshot they were merged with.
                var slots = s.object.slots
                for i in slots.indices where s.slots[i] != after[i] { slots[i] = s.slots[i] }
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
