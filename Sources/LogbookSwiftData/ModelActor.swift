import Dispatch
import Foundation
import LogbookEngine
import LogbookGraph

/// What runs a model actor's jobs and holds its context (SwiftData's `ModelExecutor`).
public protocol ModelExecutor: AnyObject, Sendable {
    /// The context of the actor, used only on the actor.
    var modelContext: ModelContext { get }
}

/// A model executor that is a serial executor (SwiftData's `SerialModelExecutor`).
public protocol SerialModelExecutor: ModelExecutor, SerialExecutor {}

/// The executor `@ModelActor` gives an actor: the actor's jobs run on the serial queue of
/// its context, where the context also takes in other contexts' saves, so the actor's code and
/// those merges never overlap.
public final class DefaultSerialModelExecutor: SerialModelExecutor, @unchecked Sendable {
    // @unchecked Sendable: `context` is touched only by jobs of the actor, which this executor
    // runs one at a time on `queue`.
    private let context: ModelContext
    private let queue: DispatchQueue

    /// An executor for `modelContext` (made for the actor, not used before).
    public init(modelContext: ModelContext) {
        context = modelContext
        queue = modelContext.adoptPrivateQueue()
    }

    public var modelContext: ModelContext { context }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = asUnownedSerialExecutor()
        queue.async { job.runSynchronously(on: executor) }
    }

    public func asUnownedSerialExecutor() -> UnownedSerialExecutor { UnownedSerialExecutor(ordinary: self) }

    public func checkIsolated() {
        dispatchPrecondition(condition: .onQueue(queue))
    }
}

/// An actor with a model context of its own (SwiftData's `ModelActor`); declare it with
/// `@ModelActor`.
public protocol ModelActor: Actor {
    /// The container of the actor's context.
    nonisolated var modelContainer: ModelContainer { get }
    /// The executor that runs the actor and holds its context.
    nonisolated var modelExecutor: any ModelExecutor { get }
}

extension ModelActor {
    /// The actor's jobs run on its model executor.
    public nonisolated var unownedExecutor: UnownedSerialExecutor {
        (modelExecutor as! any SerialExecutor).asUnownedSerialExecutor()
    }

    /// The actor's context.
    public var modelContext: ModelContext { modelExecutor.modelContext }

    /// The actor's object with the identifier (`ModelContext.model(for:)`), typed; nil when
    /// it is not a `T`.
    public subscript<T: PersistentModel>(id: PersistentIdentifier, as type: T.Type) -> T? {
        modelContext.model(for: id) as? T
    }
}
