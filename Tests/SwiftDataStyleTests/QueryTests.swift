import Foundation
import Logbook
import Testing

@Suite struct QueryTests {
    @MainActor @Test func aQueryFollowsSavesAndMergesAndTellsItsObservers() async throws {
        let container = try ModelContainer(
            for: Book.self, configurations: ModelConfiguration(isStoredInMemoryOnly: true))
        let main = container.mainContext
        main.autosaveEnabled = false
        main.insert(Book(isbn: "1", title: "B", pages: 100))
        main.insert(Book(isbn: "2", title: "A", pages: 500))
        try main.save()

        let query = try ModelQuery(
            FetchDescriptor<Book>(predicate: #Predicate { $0.pages >= 100 }, sortBy: [SortDescriptor(\.title)]),
            in: main)
        #expect(query.results.map(\.title) == ["A", "B"])

        let observed = Locked(false)
        withObservationTracking {
            _ = query.results
        } onChange: {
            observed.set(true)
        }
        var updates = query.updates().makeAsyncIterator()

        // A save of this context.
        main.insert(Book(isbn: "3", title: "C", pages: 300))
        try main.save()
        #expect(observed.get())
        #expect(query.results.map(\.title) == ["A", "B", "C"])
        let first = await updates.next()
        #expect(first?.inserted.count == 1)

        // Another context's save, merged into the main context.
        let importer = Importer(modelContainer: container)
        _ = try await importer.importBooks(count: 2, authorName: "Z")
        for _ in 0..<300 where query.results.count < 5 { try await Task.sleep(for: .milliseconds(10)) }
        #expect(query.results.map(\.title) == ["A", "B", "C", "Z 0", "Z 1"])
        let second = await updates.next()
        #expect(second?.inserted.count == 2)

        // A change that makes an object leave the result.
        let b = try #require(query.results.first { $0.title == "B" })
        b.pages = 10
        try main.save()
        #expect(query.results.map(\.title) == ["A", "C", "Z 0", "Z 1"])
    }

    @MainActor @Test func aQueryCanBeSectioned() throws {
        let container = try ModelContainer(
            for: Book.self, configurations: ModelConfiguration(isStoredInMemoryOnly: true))
        let context = container.mainContext
        for (i, pages) in [100, 100, 200, 300, 300, 300].enumerated() {
            context.insert(Book(isbn: "\(i)", title: "T\(i)", pages: pages))
        }
        try context.save()
        let query = try ModelQuery(
            FetchDescriptor<Book>(sortBy: [SortDescriptor(\.pages), SortDescriptor(\.title)]), sectionedBy: \.pages,
            in: context)
        #expect(query.sections.map(\.name) == ["100", "200", "300"])
        #expect(query.sections.map(\.models.count) == [2, 1, 3])
    }

    @Test func aBackgroundFetchReportsProgressAndCanBeCancelled() async throws {
        let container = try ModelContainer(
            for: Book.self, configurations: ModelConfiguration(isStoredInMemoryOnly: true))
        let context = ModelContext(container)
        for i in 0..<20_000 { context.insert(Book(isbn: "\(i)", title: "T\(i)", pages: i % 1000)) }
        try context.save()

        let descriptor = FetchDescriptor<Book>(
            predicate: #Predicate { $0.title.contains("9") }, sortBy: [SortDescriptor(\.isbn)])
        let fetch = try container.startFetch(descriptor)
        let steps = Task { () -> [ModelFetchProgress] in
            var seen: [ModelFetchProgress] = []
            for await p in fetch.progress { seen.append(p) }
            return seen
        }
        let ids = try await fetch.identifiers
        #expect(ids.count == (0..<20_000).filter { "T\($0)".contains("9") }.count)
        #expect(try ids == context.fetchIdentifiers(descriptor))
        let seen = await steps.value
        #expect(seen.last?.isFinished == true)
        #expect(seen.last?.completedUnitCount ?? 0 > 0)

        // Cancelling the waiting task cancels the fetch.
        let cancelled = Task { try await container.fetchIdentifiers(descriptor) }
        cancelled.cancel()
        do {
            _ = try await cancelled.value
            // It may have finished before the cancellation reached it; then it has every match.
        } catch {
            #expect(error is CancellationError)
        }
    }
}
