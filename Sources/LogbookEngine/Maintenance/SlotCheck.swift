import Dispatch
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

extension Checkpoint {
    /// Gives the primary index as of a version (the first argument) from the journal, replayed
    /// from its first segment, for a checkpoint whose whole leaves failed their checksums.
    typealias PrimaryFallback = @Sendable (UInt64) throws(EngineError) -> RadixMap<UInt64>

    /// The whole leaves of a checkpoint in the order its slot frames hold them: per keyspace,
    /// the leaves' numbers and how many keys each holds, as the stream names them. Filled by
    /// the open's decoder a keyspace at a time (the arrays it builds anyway, moved), then only
    /// read: by `SlotCheck` when it writes damaged leaves again from the journal.
    final class LeafLog: @unchecked Sendable {
        // Written by one thread while the stream is decoded; read after `SlotCheck.leave`
        // has published it under that check's lock.
        var keyspaces: [(keyspace: UInt16, numbers: [UInt64], counts: [UInt8])] = []
    }

    /// The checksums of a checkpoint file's slot frames, the whole leaves of the primary
    /// index (most of the file's bytes), computed on another thread.
    ///
    /// Read alone (`finish(path:)`), the caller takes the frames that thread has not begun
    /// (so that a busy global queue never keeps it waiting), waits for the rest, and gets an
    /// error for a damaged frame. An open that has the journal to fall back on does not wait:
    /// it leaves the check to finish (`leave(_:to:)`) and returns. Then no leaf's bytes are
    /// read before its frame is found sound: a reader of a leaf (`FileImage.awaitSlots(_:)`)
    /// checks that frame itself if no thread has begun it, or waits for the thread that has.
    /// Once every frame is found sound, a flag lets every read through. A damaged frame is
    /// mended before any reader of its leaves goes on, and before the first commit,
    /// checkpoint or compaction (`check()`, which waits for every frame): its leaves are
    /// written again, in the process's private copy of the mapping, with what the journal
    /// gives when replayed up to the checkpoint's version. When the journal cannot give it,
    /// or gives other keys than the stream names, those leaves are zeroed (nothing unproven is
    /// ever read) and `check()` throws that error from then on (commits and compactions fail,
    /// and so do a snapshot's throwing reads: `failure`).
    ///
    /// Thread safety: each frame's state and the counters are atomic; the outcome and what
    /// mending needs are under `state`'s lock, which every mending holds while it writes the
    /// damaged frames' leaves (which no reader has read), and which the image's `deinit`
    /// takes (`release()`) before the mapping goes.
    final class SlotCheck: Sendable {
        /// What the other thread holds: the frames' places and states, not the image, which
        /// goes with its last leaf whenever that thread runs. A frame's bytes are read only by
        /// the thread that claimed it, and `release()` waits for those before the image goes.
        private final class Work: @unchecked Sendable {
            // `raw` is read only for a claimed frame, while the image is alive (`stop()`
            // waits for claimed frames); the states and counters are atomic.
            let raw: UnsafeRawBufferPointer
            let positions: [Int]
            let salt: UInt32
            /// Per frame: 0 not begun, 1 being checked, 2 sound, 3 damaged, 4 never to be
            /// checked (the image is going).
            let states: UnsafeMutablePointer<Atomic<UInt8>>
            /// Where `run()` looks next, how many frames are settled (2, 3 or 4), and the
            /// last damaged one's position.
            let next = Atomic<Int>(0)
            let settled = Atomic<Int>(0)
            let bad = Atomic<Int>(-1)

            /// Reads a slot frame's payload into the image (`FileImage.slotFrameReader()`).
            let fill: @Sendable (Int) -> Bool

            init(raw: UnsafeRawBufferPointer, positions: [Int], salt: UInt32, fill: @escaping @Sendable (Int) -> Bool) {
                self.raw = raw
                self.fill = fill
                self.positions = positions
                self.salt = salt
                states = .allocate(capacity: max(1, positions.count))
                for k in positions.indices { (states + k).initialize(to: Atomic<UInt8>(0)) }
            }

            deinit {
                states.deinitialize(count: positions.count)
                states.deallocate()
            }

            /// Checks frame `k` if no thread has begun it; true if this thread did.
            private func claimAndCheck(_ k: Int) -> Bool {
                guard states[k].compareExchange(expected: 0, desired: 1, ordering: .acquiring).exchanged else {
                    return false
                }
                // The frame's bytes are read from the file now (an I/O error: damaged).
                let sound = fill(positions[k]) && Frame.verify(raw, at: positions[k], salt: salt)
                if !sound { bad.store(positions[k], ordering: .relaxed) }
                states[k].store(sound ? 2 : 3, ordering: .releasing)
                settled.wrappingAdd(1, ordering: .releasing)
                return true
            }

            /// Frame `k`'s state once known: 2 sound, 3 damaged (4 if the image is going).
            func ensure(_ k: Int) -> UInt8 {
                while true {
                    let state = states[k].load(ordering: .acquiring)
                    if state >= 2 { return state }
                    // Not begun: check it here. Begun: 256 KiB at most, tens of microseconds.
                    if state == 0 && claimAndCheck(k) { continue }
                    if state == 1 { sched_yield() }
                }
            }

            /// Checks every frame no thread has begun, in order.
            func run() {
                while true {
                    let k = next.wrappingAdd(1, ordering: .relaxed).oldValue
                    guard k < positions.count else { return }
                    _ = claimAndCheck(k)
                }
            }

            /// Waits until every frame is settled (after `run()`: each is claimed by then).
            func waitForAll() {
                while settled.load(ordering: .acquiring) < positions.count { sched_yield() }
            }

            /// Lets no thread begin another frame, and waits for those begun.
            func stop() {
                _ = next.wrappingAdd(positions.count, ordering: .relaxed)
                for k in positions.indices
                where states[k].compareExchange(expected: 0, desired: 4, ordering: .relaxed).exchanged {
                    settled.wrappingAdd(1, ordering: .releasing)
                }
                waitForAll()
            }
        }

        /// What a settled check found.
        enum Outcome: Sendable {
            case sound
            /// A frame was damaged (why); the leaves were written again from the journal.
            case mended(String)
            /// A frame was damaged, and the journal could not mend it: the leaves are zeroed.
            case failed(EngineError)
        }

        /// What mending needs, given by `leave(_:to:)`.
        struct Mending: Sendable {
            var leaves: LeafLog
            var version: UInt64
            var fallback: PrimaryFallback
            var path: String
            /// Told what was found (`StoreOptions.log`).
            var log: (@Sendable (String) -> Void)?
        }

        private let work: Work
        /// Where each frame's leaves start in the image (ascending) and how many it holds.
        private let frames: [(start: Int, count: Int)]
        /// The image's bytes, written only while mending, under `state`'s lock.
        private let bytes: UncheckedSendable<UnsafeMutableRawBufferPointer>
        /// Set once the outcome is known (or the image is gone), and when that outcome is a
        /// failure: read without the lock.
        private let settled = Atomic<Bool>(false)
        private let failed = Atomic<Bool>(false)
        private let state = Locked<(outcome: Outcome?, mending: Mending?, released: Bool)>((nil, nil, false))

        /// With `now`, another thread begins the check at once (a read that waits for it);
        /// else when `leave(_:to:)` is called (an open that does not: it would share the
        /// cores with the open, and its page faults the process's page tables).
        init(_ image: FileImage, _ layout: Layout, now: Bool) {
            bytes = UncheckedSendable(image.bytes)
            work = Work(
                raw: image.raw, positions: layout.slotFramePositions, salt: layout.salt,
                fill: image.slotFrameReader())
            frames = layout.slotFrames
            if now { begin() }
        }

        private func begin() {
            guard !work.positions.isEmpty else { return }
            // Holds the check, not the image: `release()` stops it before the image goes.
            DispatchQueue.global().async { [self] in
                work.run()
                work.waitForAll()
                settleIfSound()
            }
        }

        /// Checks the frames left (on this thread), waits for the others, and throws for a
        /// damaged one. For a checkpoint read without the journal: the caller holds the image.
        func finish(path: String) throws {
            work.run()
            work.waitForAll()
            let at = work.bad.load(ordering: .relaxed)
            guard at < 0 else { throw EngineError.corruption("checkpoint frame is damaged", path: path, offset: at) }
        }

        /// Leaves the check to finish after the open, on another thread from now: `image`'s
        /// whole leaves wait for it.
        func leave(_ image: FileImage, to mending: Mending) {
            state.withLock { $0.mending = mending }
            image.slotCheck = self
            begin()
        }

        /// Returns once the leaf whose slots lie at `offset` in the image may be read: its
        /// frame found sound, or mended.
        @inline(__always)
        func awaitLeaf(at offset: Int) {
            if !settled.load(ordering: .acquiring) { awaitFrame(containing: offset) }
        }

        private func awaitFrame(containing offset: Int) {
            // The first frame whose leaves end after `offset`.
            var (low, high) = (0, frames.count)
            while low < high {
                let mid = (low + high) / 2
                if frames[mid].start + frames[mid].count * JournalFormat.wholeLeafSize <= offset {
                    low = mid + 1
                } else {
                    high = mid
                }
            }
            precondition(low < frames.count && frames[low].start <= offset, "a leaf outside the slot frames")
            if work.ensure(low) != 2 { settle() }
        }

        /// Returns once every frame is checked, and mended if it must be.
        @inline(__always)
        func awaitSettled() {
            if !settled.load(ordering: .acquiring) { settle() }
        }

        /// When every frame was found sound (by the thread `begin()` started): done, with no
        /// reader made to wait.
        private func settleIfSound() {
            guard work.bad.load(ordering: .relaxed) < 0 else { return }
            state.withLock { s in
                guard s.outcome == nil, !s.released else { return }
                s.outcome = .sound
                s.mending = nil
                settled.store(true, ordering: .releasing)
            }
        }

        private func settle() {
            state.withLock { s in
                guard s.outcome == nil, !s.released else { return }
                work.run()
                work.waitForAll()
                let at = work.bad.load(ordering: .relaxed)
                if at < 0 {
                    s.outcome = .sound
                } else if let mending = s.mending {
                    let outcome = mend(mending, damagedAt: at)
                    switch outcome {
                    case .mended(let why): mending.log?("logbook: \(mending.path): \(why)")
                    case .failed(let error): mending.log?("logbook: \(error)")
                    case .sound: break
                    }
                    s.outcome = outcome
                } else {
                    s.outcome = .failed(EngineError.corruption("checkpoint frame is damaged", path: "", offset: at))
                }
                // The journal's segments, which the fallback holds, are let go.
                s.mending = nil
                if case .failed = s.outcome { failed.store(true, ordering: .releasing) }
                settled.store(true, ordering: .releasing)
            }
        }

        /// Writes the damaged frames' leaves again from the journal (zeroes them if it cannot).
        private func mend(_ m: Mending, damagedAt offset: Int) -> Outcome {
            let damaged = (0..<work.positions.count).filter { work.states[$0].load(ordering: .acquiring) == 3 }
            let what =
                damaged.count == 1
                ? "the checkpoint's slot frame at offset \(offset) is damaged"
                : "\(damaged.count) of the checkpoint's slot frames are damaged (one at offset \(offset))"
            let primary: RadixMap<UInt64>
            do { primary = try m.fallback(m.version) } catch {
                zeroLeaves(m, in: damaged)
                return .failed(
                    EngineError.corruption(
                        "\(what), and the journal does not give the primary index either: \(error.message)",
                        path: m.path, offset: offset))
            }
            guard rewriteLeaves(m, in: damaged, from: primary) else {
                zeroLeaves(m, in: damaged)
                return .failed(
                    EngineError.corruption(
                        "\(what), and the journal up to version \(m.version) holds other keys than the checkpoint "
                            + "names", path: m.path, offset: offset))
            }
            return .mended("\(what); its leaves were written again from the journal")
        }

        /// Each whole leaf of the frames `damaged` (indexes into `frames`): its keyspace, number, key count (as the
        /// stream names them) and slots.
        private func forEachLeaf(
            _ m: Mending, in damaged: [Int], _ body: (UInt16, UInt64, Int, UnsafeMutablePointer<UInt64>) -> Void
        ) {
            let wanted = Set(damaged)
            var frame = 0
            var inFrame = 0
            for space in m.leaves.keyspaces {
                for (number, count) in zip(space.numbers, space.counts) {
                    while frame < frames.count && inFrame == frames[frame].count {
                        frame += 1
                        inFrame = 0
                    }
                    guard frame < frames.count else { return }
                    if wanted.contains(frame) {
                        let at = frames[frame].start + inFrame * JournalFormat.wholeLeafSize
                        let slots = (bytes.value.baseAddress! + at).bindMemory(
                            to: UInt64.self, capacity: RadixMap<UInt64>.fanout)
                        body(space.keyspace, number, Int(count), slots)
                    }
                    inFrame += 1
                }
            }
        }

        /// True when every leaf took as many keys from `primary` as the stream named.
        private func rewriteLeaves(_ m: Mending, in damaged: [Int], from primary: RadixMap<UInt64>) -> Bool {
            var matches = true
            forEachLeaf(m, in: damaged) { keyspace, number, occupied, slots in
                let from = primary.leafSlots(for: EngineKey(keyspace: keyspace, id: number << 6).rawValue)
                var present = 0
                for i in 0..<RadixMap<UInt64>.fanout {
                    let value = from?[i] ?? 0
                    slots[i] = value
                    if value != 0 { present += 1 }
                }
                if present != occupied { matches = false }
            }
            return matches
        }

        private func zeroLeaves(_ m: Mending, in damaged: [Int]) {
            forEachLeaf(m, in: damaged) { _, _, _, slots in slots.update(repeating: 0, count: RadixMap<UInt64>.fanout) }
        }

        /// Waits for the check; throws when a damaged frame could not be mended.
        func check() throws(EngineError) {
            awaitSettled()
            if let failure { throw failure }
        }

        /// The error of a settled check that could not mend a frame; nil otherwise (also
        /// while the check runs: nothing has read a whole leaf yet).
        var failure: EngineError? {
            guard failed.load(ordering: .acquiring) else { return nil }
            return state.withLock { s in
                if case .failed(let error) = s.outcome { error } else { nil }
            }
        }

        /// Waits for the check; what it found wrong, if anything.
        func problem() -> String? {
            awaitSettled()
            return state.withLock { s in
                switch s.outcome {
                case .mended(let why): why
                case .failed(let error): "\(error)"
                case .sound, nil: nil
                }
            }
        }

        /// The image is going: no frame is checked or mended after this returns.
        func release() {
            state.withLock { s in
                s.released = true
                s.mending = nil
                work.stop()
            }
            settled.store(true, ordering: .releasing)
        }
    }
}
