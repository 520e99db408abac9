import Foundation
import Logbook
import LogbookTestSupport
import Testing

/// The model the crash helper's `notes` mode writes from another process.
@Model final class Note {
    var title: String
    init(title: String) { self.title = title }
}

/// SwiftData's pattern of several `ModelContainer`s on one store URL — a container per feature
/// in one process, an app and its extension or tool in two — each inserting and reading.
@Suite struct ProcessesTests {
    @Test func containersInThisProcessAndInOthersShareOneStore() async throws {
        let store = TemporaryStore()
        try FileManager.default.createDirectory(atPath: store.directory, withIntermediateDirectories: true)
        let url = URL(fileURLWithPath: store.path)
        let first = try ModelContainer(for: Note.self, configurations: ModelConfiguration(url: url))
        let second = try ModelContainer(for: Note.self, configurations: ModelConfiguration(url: url))
        // The first container hears of the other processes' saves (remote changes are on by
        // default for a SwiftData container).
        let heard = Locked(false)
        let remote = first.persistentContainer.observeRemoteChanges { _ in heard.set(true) }
        defer { remote.cancel() }

        var others: [Process] = []
        for p in 0..<2 {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: crashHelperPath)
            process.arguments = ["notes", store.path, "p\(p)", "40"]
            process.standardOutput = Pipe()
            process.standardError = Pipe()
            try process.run()
            others.append(process)
        }
        let a = ModelContext(first)
        let b = ModelContext(second)
        for i in 0..<40 {
            a.insert(Note(title: "a-\(i)"))
            b.insert(Note(title: "b-\(i)"))
            if i % 5 == 4 {
                try a.save()
                try b.save()
            }
        }
        for process in others {
            process.waitUntilExit()
            let complaint = String(
                decoding: (process.standardError as! Pipe).fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            #expect(process.terminationStatus == 0, "the other process: \(complaint)")
        }
        let expected = Set(["a", "b", "p0", "p1"].flatMap { p in (0..<40).map { "\(p)-\($0)" } })
        for container in [first, second] {
            let notes = try ModelContext(container).fetch(FetchDescriptor<Note>())
            #expect(Set(notes.map(\.title)) == expected)
            #expect(notes.count == 160)
            #expect(Set(notes.map(\.persistentModelID)).count == 160)
        }
        for _ in 0..<300 where !heard.get() { try await Task.sleep(for: .milliseconds(10)) }
        #expect(heard.get(), "the other processes' saves were heard as remote changes")
    }
}
