import Foundation
import LogbookEngine
import LogbookTestSupport
import Testing

@testable import LogbookGraph

/// Records a controller's delegate calls as lines.
final class ChangeRecorder: FetchedResultsControllerDelegate, @unchecked Sendable {
    // Used on the controller's context queue only.
    var lines: [String] = []

    func controllerWillChangeContent(_ controller: AnyObject) { lines.append("will") }
    func controller(
        _ controller: AnyObject, didChangeSection name: String, atSectionIndex index: Int,
        for type: FetchedResultsChangeType
    ) {
        lines.append("section \(type) \(name) \(index)")
    }
    func controller(
        _ controller: AnyObject, didChange object: ManagedObject, at indexPath: FetchedIndexPath?,
        for type: FetchedResultsChangeType, newIndexPath: FetchedIndexPath?
    ) {
        let name = (try? object.value(forKey: "firstName")) as? String ?? "?"
        lines.append("\(type) \(name) \(indexPath.map(\.description) ?? "-") \(newIndexPath.map(\.description) ?? "-")")
    }
    func controllerDidChangeContent(_ controller: AnyObject) { lines.append("did") }
}

@Suite struct FetchedResultsControllerTests {
    /// S8: persons sorted by age and firstName, sections by age; object(at:), counts per section,
    /// and delegate callbacks for an insert from another screen (context), a deletion by the
    /// user, an update and a move.
    @Test func controllerFollowsTheContext() async throws {
        let store = TemporaryStore()
        let container = try makeContainer(store)
        let screen = container.newBackgroundContext()
        let recorder = ChangeRecorder()
        let box = UncheckedSendable((recorder, NSMutableArray()))
        let first: [String] = try await screen.perform {
            for (f, a) in [("Anthony", 51), ("Richard", 61), ("Zed", 51), ("Bob", 30)] {
                let p = try screen.insert(Person.self)
                p.firstName = f
                p.lastName = "L"
                p.age = Int32(a)
            }
            try screen.save()
            var request = FetchRequest<Person>()
            request.sortDescriptors = [FetchSortDescriptor(key: "age"), FetchSortDescriptor(key: "firstName")]
            let controller = FetchedResultsController(
                fetchRequest: request, managedObjectContext: screen, sectionNameKeyPath: "age")
            controller.delegate = box.value.0
            try controller.performFetch()
            box.value.1.add(controller)
            let sections = controller.sections!
            #expect(sections.map(\.name) == ["30", "51", "61"])
            #expect(sections.map(\.numberOfObjects) == [1, 2, 1])
            #expect(controller.object(at: FetchedIndexPath(item: 1, section: 1)).firstName == "Zed")
            let zed = controller.object(at: FetchedIndexPath(item: 1, section: 1))
            #expect(controller.indexPath(forObject: zed) == FetchedIndexPath(item: 1, section: 1))
            return controller.fetchedObjects!.map(\.firstName)
        }
        #expect(first == ["Bob", "Anthony", "Zed", "Richard"])

        // Another screen inserts a person and saves: the save merges into this context.
        let other = container.newBackgroundContext()
        try await other.perform {
            let p = try other.insert(Person.self)
            p.firstName = "Alice"
            p.lastName = "L"
            p.age = 51
            try other.save()
        }
        let afterInsert: [String] = try await screen.perform {
            defer { recorder.lines = [] }
            return recorder.lines
        }
        #expect(afterInsert == ["will", "insert Alice - [1, 0]", "did"])

        // The user deletes Bob (and a section goes), changes Richard's name, moves Zed to 61.
        let afterEdits: [String] = try await screen.perform {
            let controller = box.value.1[0] as! FetchedResultsController<Person>
            let bob = controller.object(at: FetchedIndexPath(item: 0, section: 0))
            screen.delete(bob)
            #expect(bob.isDeleted)
            screen.processPendingChanges()
            let deleted = recorder.lines
            recorder.lines = []
            let richard = controller.fetchedObjects!.first { $0.firstName == "Richard" }!
            richard.firstName = "Rick"
            let zed = controller.fetchedObjects!.first { $0.firstName == "Zed" }!
            zed.age = 61
            try screen.save()
            #expect(controller.sections!.map(\.name) == ["51", "61"])
            #expect(controller.sections!.map(\.numberOfObjects) == [2, 2])
            #expect(controller.fetchedObjects!.map(\.firstName) == ["Alice", "Anthony", "Rick", "Zed"])
            return deleted + ["--"] + recorder.lines
        }
        #expect(
            afterEdits == [
                "will", "section delete 30 0", "delete Bob [0, 0] -", "did", "--",
                "will", "update Rick [1, 0] [1, 0]", "move Zed [0, 2] [1, 1]", "did"
            ])
        try container.close()
    }
}

@Suite struct AsynchronousFetchTests {
    func populate(_ container: PersistentContainer, count: Int) throws {
        let context = container.newContext(concurrencyType: .confinement)
        let now = Date()
        for i in 1...count {
            let item = try context.insert(TodoItem.self)
            item.name = "Item \(i)"
            item.createdAt = now + Double(i) / 1000
            item.done = false
        }
        try context.save()
    }

    func run(
        _ context: ManagedObjectContext, _ fetch: FetchRequest<TodoItem>,
        during: (@Sendable (AsynchronousFetchResult<TodoItem>) -> Void)? = nil
    ) async throws -> (AsynchronousFetchResult<TodoItem>, [String]) {
        try await withCheckedThrowingContinuation { continuation in
            context.perform {
                do {
                    let running = try context.execute(
                        AsynchronousFetchRequest(fetchRequest: fetch) { result in
                            let names = result.finalResult.map { $0.prefix(3).map(\.name) } ?? []
                            continuation.resume(returning: (result, names))
                        })
                    during?(running)
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        }
    }

    /// S12: sorted by createdAt, in the background, a completion with the result; a plain
    /// context cannot.
    @Test func asynchronousFetchCompletesOnTheContextQueue() async throws {
        let store = TemporaryStore()
        let container = try makeContainer(store, model: todoModel())
        try populate(container, count: 3000)
        var fetch = FetchRequest<TodoItem>()
        fetch.sortDescriptors = [FetchSortDescriptor(key: "createdAt", ascending: false)]
        fetch.predicate = try FetchPredicate(format: "name ENDSWITH '7'")
        let context = container.newBackgroundContext()
        let (result, names) = try await run(context, fetch)
        #expect(result.error == nil)
        #expect(names == ["Item 2997", "Item 2987", "Item 2977"])
        #expect(result.progress.isFinished && result.progress.completedUnitCount == 3000)
        let plain = container.newContext(concurrencyType: .confinement)
        #expect(throws: LogbookError.self) {
            try plain.execute(AsynchronousFetchRequest(fetchRequest: fetch) { _ in })
        }
        do {
            try plain.execute(AsynchronousFetchRequest(fetchRequest: fetch) { _ in })
        } catch let e as LogbookError {
            #expect(e.code == .wrongConcurrencyType && e.message.contains("queue"))
        }
        try container.close()
    }

    /// S13: the count of records fetched so far is observable while it runs, and the fetch can
    /// be cancelled at any time.
    @Test func progressIsObservableAndTheFetchCanBeCancelled() async throws {
        let store = TemporaryStore()
        let container = try makeContainer(store, model: todoModel())
        try populate(container, count: 10_000)
        var fetch = FetchRequest<TodoItem>()
        fetch.sortDescriptors = [FetchSortDescriptor(key: "createdAt")]
        let context = container.newBackgroundContext()
        let seen = Locked<[Int64]>([])
        let (done, _) = try await run(context, fetch) { running in
            running.progress.observe { p in seen.withLock { $0.append(p.completedUnitCount) } }
        }
        let counts = seen.withLock { $0 }
        #expect(done.finalResult?.count == 10_000)
        #expect(counts.count >= 5 && counts == counts.sorted() && counts.last == 10_000, "\(counts)")
        // Cancelled as soon as the first batch is reported.
        let (cancelled, names) = try await run(context, fetch) { running in
            running.progress.observe { p in if p.completedUnitCount > 0 { p.cancel() } }
        }
        #expect(cancelled.finalResult == nil && names.isEmpty)
        #expect(cancelled.error?.code == .cancelled)
        #expect(cancelled.progress.isCancelled && cancelled.progress.completedUnitCount < 10_000)
        try container.close()
    }

    /// S14 and S15: 1,000,000 items saved at once; the asynchronous fetch over them leaves the
    /// context's queue free, and the user's changes made meanwhile are kept and show up.
    @Test func largeFetchStaysResponsiveAndKeepsChanges() async throws {
        let store = TemporaryStore()
        let container = try makeContainer(store, model: todoModel(), durability: .normal)
        let count = 1_000_000
        try populate(container, count: count)
        let context = container.newBackgroundContext()
        // The user holds some items and toggles them while the fetch runs.
        try await context.perform {
            var first = FetchRequest<TodoItem>()
            first.sortDescriptors = [FetchSortDescriptor(key: "createdAt")]
            first.fetchLimit = 10
            for item in try context.fetch(first) { item.done = true }
        }
        var fetch = FetchRequest<TodoItem>()
        fetch.sortDescriptors = [FetchSortDescriptor(key: "createdAt")]
        let waits = Locked<[Double]>([])
        let (result, names) = try await run(context, fetch) { running in
            // The queue stays free: blocks sent to it while the fetch runs start at once.
            Thread.detachNewThread {
                while !running.progress.isFinished {
                    let sent = Date()
                    context.performAndWait {}
                    waits.withLock { $0.append(Date().timeIntervalSince(sent)) }
                    Thread.sleep(forTimeInterval: 0.01)
                }
            }
        }
        #expect(result.finalResult?.count == count)
        #expect(names == ["Item 1", "Item 2", "Item 3"])
        let longest = waits.withLock { $0.max() ?? 0 }
        #expect(waits.withLock { $0.count } >= 3, "the fetch ran long enough to be probed")
        #expect(longest < 0.5, "the context's queue waited \(longest) s while the fetch ran")
        let (toggled, saved): (Int, Int) = try await context.perform {
            let items = result.finalResult!
            let toggled = items.prefix(10).filter(\.done).count
            // The changes are not lost: they save.
            try context.save()
            var done = FetchRequest<TodoItem>()
            done.predicate = try FetchPredicate(format: "done == YES")
            return (toggled, try context.count(for: done))
        }
        #expect(toggled == 10 && saved == 10)
        try container.close()
    }
}
