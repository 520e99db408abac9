// A property with observers, as apps write them: persisted, and its observers run on each set.
// Only the import differs.
import Foundation
import Logbook
import Testing

@Model final class Checklist {
    var title = "" {
        didSet { renamed += 1 }
    }
    var renamed = 0
    var progress = 0.0 {
        willSet { previousProgress = progress }
        didSet(old) {
            if progress > 1 { progress = 1 }
            changes.append("\(old) → \(progress)")
        }
    }
    var previousProgress = 0.0
    var changes: [String] = []

    init(title: String) { self.title = title }
}

@Suite struct ObserverTests {
    @Test func propertiesWithObserversArePersistedAndTheirObserversRun() throws {
        #expect(Checklist.schemaMetadata.map(\.name).contains("title"))
        #expect(Checklist.schemaMetadata.map(\.name).contains("progress"))
        try withStoreURL { url in
            do {
                let container = try ModelContainer(for: Checklist.self, configurations: ModelConfiguration(url: url))
                let context = ModelContext(container)
                let list = Checklist(title: "Packing")
                context.insert(list)
                let renamedBefore = list.renamed
                list.title = "Packing for Lisbon"
                #expect(list.renamed == renamedBefore + 1)
                list.progress = 0.5
                list.progress = 1.5  // didSet clamps it, setting it again
                #expect(list.progress == 1)
                #expect(list.previousProgress == 0.5)
                // The clamp inside didSet stores without running the observers again (Swift's rule).
                #expect(list.changes.suffix(2) == ["0.0 → 0.5", "0.5 → 1.0"])
                try context.save()
            }
            let container = try ModelContainer(for: Checklist.self, configurations: ModelConfiguration(url: url))
            let list = try #require(try ModelContext(container).fetch(FetchDescriptor<Checklist>()).first)
            #expect(list.title == "Packing for Lisbon")
            #expect(list.progress == 1)
            #expect(list.previousProgress == 0.5)
        }
    }
}
