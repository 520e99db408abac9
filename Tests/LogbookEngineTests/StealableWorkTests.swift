import Dispatch
import Foundation
import Testing

@testable import LogbookEngine

/// `StealableWork`: the taker gets the work's value whoever ran it, and the work's inputs are
/// let go once it has run, even while its block still waits on a busy global queue.
@Suite struct StealableWorkTests {
    final class Input: Sendable {}

    @Test func theTakerRunsWorkThatNoWorkerBegan() throws {
        // The global queue's threads are kept busy, so the work's own block waits behind them
        // and the taker runs the work itself.
        let spin = DispatchGroup()
        let until = ContinuousClock.now + .milliseconds(150)
        for _ in 0..<(2 * ProcessInfo.processInfo.activeProcessorCount) {
            DispatchQueue.global().async(group: spin) { while ContinuousClock.now < until {} }
        }
        weak var weakInput: Input?
        var work: StealableWork<Int>?
        do {
            let input = Input()
            weakInput = input
            work = StealableWork { withExtendedLifetime(input) { 42 } }
        }
        #expect(try work!.result() == 42)
        // The block still queued holds the work object, not what the work captured.
        #expect(weakInput == nil)
        spin.wait()
        work = nil
    }

    @Test func errorsReachTheTaker() {
        struct Failed: Error {}
        let work = StealableWork<Int> { throw Failed() }
        #expect(throws: Failed.self) { try work.result() }
    }

    @Test func aWorkerThatBeganIsWaitedFor() throws {
        let started = DispatchSemaphore(value: 0)
        let work = StealableWork<Int> {
            started.signal()
            Thread.sleep(forTimeInterval: 0.05)
            return 7
        }
        started.wait()
        #expect(try work.result() == 7)
    }
}
