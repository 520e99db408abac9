import LogbookEngine

/// Faults of one batch of a batched fetch (or of a to-many relationship's members, a few hundred
/// at a time): touching one loads them all, from the snapshot they were made at. Members are unretained; a fault that goes away clears its own place (it knows
/// it), so releasing a million faults costs a million constant-time steps.
final class FaultBatch {
    let snapshot: Snapshot
    private var members: [Unmanaged<ManagedObject>?] = []

    init(snapshot: Snapshot) { self.snapshot = snapshot }

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
