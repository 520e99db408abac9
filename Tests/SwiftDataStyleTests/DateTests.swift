// Dates as a SwiftData app keeps them: saved through `ModelContainer`, read back after the app
// opens the store again, found by an equality predicate. Only the import differs.
import Foundation
import Logbook
import Testing

@Model final class Appointment {
    var title: String
    var startDate: Date
    var endDate: Date?

    init(title: String, startDate: Date, endDate: Date? = nil) {
        self.title = title
        self.startDate = startDate
        self.endDate = endDate
    }
}

@Suite struct DateTests {
    /// 2,000 dates of these years with every bit of their intervals random, and the extremes.
    static func dates() -> [Date] {
        var random = SystemRandomNumberGenerator()
        var out: [Date] = [
            Date(timeIntervalSinceReferenceDate: 818022387.7552129), .distantPast, .distantFuture,
            Date(timeIntervalSinceReferenceDate: -0.0), Date(timeIntervalSinceReferenceDate: .leastNonzeroMagnitude),
            Date(timeIntervalSince1970: 0)
        ]
        while out.count < 2_000 {
            let d = Double.random(in: 700_000_000..<900_000_000, using: &random)
            out.append(Date(timeIntervalSinceReferenceDate: Double(bitPattern: d.bitPattern ^ (random.next() & 0xFFF))))
        }
        return out
    }

    @Test func datesComeBackBitForBitAfterTheStoreIsOpenedAgain() throws {
        let dates = Self.dates()
        try withStoreURL { url in
            do {
                let container = try ModelContainer(for: Appointment.self, configurations: ModelConfiguration(url: url))
                let context = ModelContext(container)
                for (i, d) in dates.enumerated() {
                    context.insert(Appointment(title: "\(i)", startDate: d, endDate: d.addingTimeInterval(3600)))
                }
                try context.save()
            }
            let container = try ModelContainer(for: Appointment.self, configurations: ModelConfiguration(url: url))
            let context = ModelContext(container)
            let appointments = try context.fetch(FetchDescriptor<Appointment>())
            let byTitle = Dictionary(uniqueKeysWithValues: appointments.map { ($0.title, $0) })
            var differ = 0
            for (i, d) in dates.enumerated() {
                let a = byTitle["\(i)"]!
                if a.startDate.timeIntervalSinceReferenceDate.bitPattern != d.timeIntervalSinceReferenceDate.bitPattern
                    || a.endDate != d.addingTimeInterval(3600)
                {
                    differ += 1
                }
            }
            #expect(differ == 0, "\(differ) of \(dates.count) dates differ")
            for d in dates.prefix(21) {
                let found = try context.fetch(FetchDescriptor<Appointment>(predicate: #Predicate { $0.startDate == d }))
                #expect(found.count == 1, "startDate == \(d.timeIntervalSinceReferenceDate)")
            }
            let sorted = try context.fetch(FetchDescriptor<Appointment>(sortBy: [SortDescriptor(\.startDate)]))
            #expect(sorted.map(\.startDate) == dates.sorted())
        }
    }
}
