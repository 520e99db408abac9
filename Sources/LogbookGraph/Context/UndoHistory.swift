/// Undo and redo of a context's unsaved changes.
///
/// Each change made outside an explicit group (a `setValue`, an insert, a delete with all
/// its rule-driven effects, a relationship change) is one undo step; `beginUndoGrouping()` and
/// `endUndoGrouping()` make several changes one step. Saving or rolling back clears the history.
///
/// ```swift
/// context.undoHistory = UndoHistory()
/// try person.setValue("Tony", forKey: "firstName")
/// context.undo()                       // firstName is back to what it was
/// context.redo()
/// ```
public final class UndoHistory {
    struct ObjectState {
        let object: ManagedObject
        let slots: [FieldValue]
        let committed: [FieldValue]?
        let flags: ManagedObject.Flags
        /// The object did not exist before this step (undo makes it invalid again).
        let wasNew: Bool
        /// Its values when the step closed: the properties the step changed are those that
        /// differ from `slots`, and only those are undone (a merge after the step may have
        /// changed others, which undo leaves as they are).
        var after: [FieldValue]? = nil
    }

    struct ContextState {
        var inserted: InsertedObjects
        var updated: [UInt64: ManagedObject]
        var deleted: [UInt64: ManagedObject]
        var setAdds: [UInt64: PendingMembers]
        var setRemoves: [UInt64: Set<UInt64>]
        var orderOverrides: [UInt64: [UInt64]]
    }

    struct Step {
        var context: ContextState
        var objects: [ObjectIdentifier: ObjectState] = [:]
    }

    var undoStack: [Step] = []
    var redoStack: [Step] = []
    /// The steps that can be undone and redone (what tests check).
    package var undoCount: Int { undoStack.count }
    package var redoCount: Int { redoStack.count }
    var open: Step?
    var explicitDepth = 0
    /// How many steps are kept (0: no limit).
    public var levelsOfUndo = 0

    /// An empty history with no limit.
    public init() {}

    /// Whether there is a step to undo.
    public var canUndo: Bool { !undoStack.isEmpty }
    /// Whether there is an undone step to redo.
    public var canRedo: Bool { !redoStack.isEmpty }

    /// Starts a group: every change until the matching `endUndoGrouping()` is one undo step.
    public func beginUndoGrouping() { explicitDepth += 1 }

    /// Ends the group `beginUndoGrouping()` started; the outermost end closes the step.
    public func endUndoGrouping() {
        guard explicitDepth > 0 else { return }
        explicitDepth -= 1
        if explicitDepth == 0 { close() }
    }

    func close() {
        guard var step = open else { return }
        open = nil
        guard !step.objects.isEmpty else { return }
        for (id, state) in step.objects { step.objects[id]!.after = state.object.slots }
        undoStack.append(step)
        if levelsOfUndo > 0 && undoStack.count > levelsOfUndo { undoStack.removeFirst() }
        redoStack.removeAll()
    }

    func removeAll() {
        undoStack.removeAll()
        redoStack.removeAll()
        open = nil
    }
}
