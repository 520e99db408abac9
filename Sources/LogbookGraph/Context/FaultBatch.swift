import LogbookEngine

/// Faults of one batch of a batched fetch (or of a to-many relationship's members, a few hundred
/// at a time): touching one loads them all, from the snapshot they were made at, so that one
/// fetch reads one state of the store. The batch gives its snapshot up when its context moves
/// to a newer state (it saves, merges, resets or refreshes all objects: `advancePinnedSnapshot`);
/// its faults then load the context's current state, and faults kept unfired pin no old
/// journal segment past that. Members are unretained; a fault that goes away clears its own
/// place (it knows it), so releasing a million faults costs a million constant-time steps.
final class FaultBatch {
    /// The state the faults load from; nil once the context moved on.
    var snapshot: Snapshot?
    private var members: [Unmanaged<ManagedObject>?] = []

    init(snapshot: Snapshot) { self.snapshot = snapshot }

    /// A weak reference, for the context's list of batches that hold a snapshot.
    struct Weak {
        weak var batch: FaultBatch?
    }

    /// How many faults joined the batch.
    var count: Int { members.count }

    func append(_ o: ManagedObject) {
        o.batch = self
        o.batchSlot = Int32(members.count)
        members.append(.passUnretained(o))
    }

    /// `o` leaves the batch (it deinits, or no longer loads from the batch's snapshot).
    func forget(_ o: ManagedObject) {
        let i = Int(o.batchSlot)
        if i >= 0 && i < members.count && members[i]?.toOpaque() == Unmanaged.passUnretained(o).toOpaque() {
            members[i] = nil
        }
        o.batchSlot = -1
    }

    /// The members still alive; the batch is spent.
    func take() -> [ManagedObject] {
        let all = members.compactMap { $0?.takeUnretainedValue() }
        members = []
        for o in all { o.batchSlot = -1 }
        return all
    }
}
