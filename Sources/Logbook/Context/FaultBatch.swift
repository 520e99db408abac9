import LogbookEngine

/// Faults of one batch of a batched fetch: touching one loads them all, from the snapshot of
/// the fetch. Members are unretained (a fault that goes away leaves the batch).
final class FaultBatch {
    let snapshot: Snapshot
    var members: [Unmanaged<ManagedObject>] = []

    init(snapshot: Snapshot) { self.snapshot = snapshot }

    func append(_ o: ManagedObject) { members.append(.passUnretained(o)) }

    func forget(_ o: ManagedObject) {
        members.removeAll { $0.toOpaque() == Unmanaged.passUnretained(o).toOpaque() }
    }

    /// The members still alive; the batch is spent.
    func take() -> [ManagedObject] {
        let all = members.map { $0.takeUnretainedValue() }
        members = []
        return all
    }
}
