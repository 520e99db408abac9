import LogbookTestSupport
import Testing

@testable import LogbookEngine

#if canImport(Glibc)
    import Glibc
#endif

/// Every I/O step of commits, rollovers, checkpoints and compactions, failed or cut by a
/// power loss: every commit that returned success survives, and nothing else is visible.
@Suite struct FaultInjectionTests {
    static let directory = "/store"

    func options() -> StoreOptions {
        var o = quietOptions(.full)
        o.segmentSize = 2048
        o.allowsTinySegments = true
        return o
    }

    /// The workload: commits (some rolling segments over), a checkpoint, updates and deletes,
    /// a compaction, more commits, a checkpoint. Returns the model of what acknowledged commits
    /// wrote, and stops at the first error.
    func workload(_ fs: FaultFileSystem) -> (model: [UInt64: String], sets: [UInt64], error: (any Error)?) {
        var model: [UInt64: String] = [:]
        var members: [UInt64] = []
        do {
            let store = try Store.open(at: Self.directory, options: options(), fileSystem: fs)
            func commit(_ i: Int, _ body: (inout Transaction, inout [UInt64: String]) -> Void) throws {
                var t = Transaction()
                var next = model
                body(&t, &next)
                t.addMembers([UInt64(i)], toSet: key(2, 1))
                try store.commit(t)
                model = next
                members.append(UInt64(i))
            }
            for i in 0..<12 {
                try commit(i) { t, m in
                    for j in 0..<8 {
                        let k = UInt64(i * 8 + j)
                        t.put(
                            key(1, k), value: bytes("v\(k) " + String(repeating: "p", count: 40)),
                            indexKeys: [IndexKey(index: 1, orderedUInt64: k % 5)])
                        m[k] = "v\(k) " + String(repeating: "p", count: 40)
                    }
                }
            }
            try store.checkpoint()
            for i in 12..<18 {
                try commit(i) { t, m in
                    for k in UInt64(0)..<20 where k % 3 == UInt64(i % 3) {
                        t.put(key(1, k), value: bytes("u\(i)-\(k)"))
                        m[k] = "u\(i)-\(k)"
                    }
                    t.delete(key(1, UInt64(40 + i)))
                    m[UInt64(40 + i)] = nil
                }
            }
            try store.compact()
            for i in 18..<22 {
                try commit(i) { t, m in
                    t.put(key(1, UInt64(1000 + i)), value: bytes("late \(i)"))
                    m[UInt64(1000 + i)] = "late \(i)"
                }
            }
            try store.checkpoint()
            try store.close()
            return (model, members, nil)
        } catch {
            return (model, members, error)
        }
    }

    func verify(_ fs: FaultFileSystem, model: [UInt64: String], members: [UInt64], step: Int) throws {
        let store = try Store.open(at: Self.directory, options: options(), fileSystem: fs)
        let s = store.snapshot()
        let found = try contents(s)
        #expect(found == model, "after a fault at step \(step): \(fs.stepNames.last ?? "")")
        #expect(s.members(ofSet: key(2, 1)) == members, "sets after a fault at step \(step)")
        // Indexes agree with the values.
        #expect(
            try s.indexCount(index: 1) == model.keys.filter { $0 < 96 && model[$0]!.hasPrefix("v") }.count,
            "index after a fault at step \(step)")
        // And the store takes writes again.
        var t = Transaction()
        t.put(key(3, 1), value: bytes("after recovery"))
        try store.commit(t)
        try store.close()
    }

    @Test func powerLossAtEveryIOStepKeepsExactlyTheAcknowledgedCommits() throws {
        let clean = FaultFileSystem()
        let full = workload(clean)
        #expect(full.error == nil)
        let steps = clean.steps
        #expect(steps > 100, "the workload has \(steps) I/O steps")
        for step in 1...steps {
            let fs = FaultFileSystem()
            fs.inject(.crash, atStep: step)
            let result = workload(fs)
            // A fault in best-effort clean-up (removing a replaced file) is not reported; then
            // the model is the whole workload's.
            if result.error == nil { #expect(result.model == full.model) }
            fs.powerLoss()
            try verify(fs, model: result.model, members: result.sets, step: step)
        }
    }

    @Test func aFailedWriteOrSyncIsStickyAndLosesNothingCommitted() throws {
        let clean = FaultFileSystem()
        _ = workload(clean)
        let steps = clean.steps
        for step in stride(from: 1, through: steps, by: 3) {
            let fs = FaultFileSystem()
            fs.inject(.error(step % 2 == 0 ? ENOSPC : EIO), atStep: step)
            var model: [UInt64: String] = [:]
            do {
                let store = try Store.open(at: Self.directory, options: options(), fileSystem: fs)
                // Once the store refuses writes (`.failed`), it refuses every later one; a
                // failure that changed nothing (a rollover that could not start its segment)
                // leaves commits going on.
                var refused = false
                for i in 0..<40 {
                    var t = Transaction()
                    t.put(key(1, UInt64(i)), value: bytes("value \(i) " + String(repeating: "z", count: 60)))
                    do {
                        try store.commit(t)
                        #expect(!refused, "a commit succeeded after the store refused writes (fault at step \(step))")
                        model[UInt64(i)] = "value \(i) " + String(repeating: "z", count: 60)
                    } catch let error as EngineError {
                        if refused {
                            #expect(error.code == .failed, "later writes are refused: \(error)")
                        } else {
                            #expect([.io, .diskFull, .failed].contains(error.code), "\(error)")
                        }
                        if error.code == .failed { refused = true }
                    }
                    if i == 20 {
                        // A checkpoint that fails before its manifest is written leaves the
                        // journal sound: commits go on. One that fails later makes the store refuse.
                        do { try store.checkpoint() } catch {}
                    }
                }
                // Reads still work from what was published.
                let s = store.snapshot()
                for (k, v) in model { #expect(string(try s.value(forKey: key(1, k))) == v) }
            } catch {
                // The fault hit the open itself: nothing was committed.
                #expect(model.isEmpty)
            }
            fs.clearFaults()
            fs.powerLoss()
            let reopened = try Store.open(at: Self.directory, options: options(), fileSystem: fs)
            #expect(try contents(reopened.snapshot()) == model, "fault at step \(step)")
        }
    }
}
