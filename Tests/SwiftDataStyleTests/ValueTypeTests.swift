import Foundation
import Logbook
import Testing

/// Integer widths other than Int's, a transformer given by its type, and Codable values whose
/// type moved: as apps write them.
@Model final class Sensor {
    var name: String
    var level: UInt64 = 0
    var channel: UInt8 = 0
    var offset: Int8 = 0
    var port: UInt16 = 0
    var samples: UInt32 = 0
    var uptime: UInt = 0
    init(name: String) { self.name = name }
}

struct Colour: Equatable {
    var red, green, blue, alpha: UInt8
}

final class ColourTransformer: ValueTransformer {
    override class func transformedValueClass() -> AnyClass { NSData.self }
    override class func allowsReverseTransformation() -> Bool { true }
    override func transformedValue(_ value: Any?) -> Any? {
        guard let c = value as? Colour else { return nil }
        return Data([c.red, c.green, c.blue, c.alpha])
    }
    override func reverseTransformedValue(_ value: Any?) -> Any? {
        guard let d = value as? Data, d.count == 4 else { return nil }
        return Colour(red: d[0], green: d[1], blue: d[2], alpha: d[3])
    }
}

@Model final class Paint {
    var name: String
    @Attribute(.transformable(by: ColourTransformer.self)) var color: Colour
    init(name: String, color: Colour) {
        self.name = name
        self.color = color
    }
}

enum PlacesV1 {
    struct Address: Codable, Equatable {
        var city: String
    }
    @Model final class Place {
        var name: String
        var address: Address
        init(name: String, address: Address) {
            self.name = name
            self.address = address
        }
    }
}

enum PlacesV2 {
    // The same value, declared elsewhere (as when it moves into a versioned schema or module).
    struct Address: Codable, Equatable {
        var city: String
    }
    @Model final class Place {
        var name: String
        var address: Address
        init(name: String, address: Address) {
            self.name = name
            self.address = address
        }
    }
}

@Suite struct ValueTypeTests {
    @Test func everyIntegerWidthIsStoredAsANumberThatSortsAndFilters() throws {
        try withStoreURL { url in
            do {
                let container = try ModelContainer(for: Sensor.self, configurations: ModelConfiguration(url: url))
                let model = container.persistentContainer.model
                let types = Dictionary(
                    uniqueKeysWithValues: try #require(model[entity: "Sensor"]).attributes.map { ($0.name, $0.type) })
                #expect(types["level"] == .int64)
                #expect(types["channel"] == .int16)
                #expect(types["offset"] == .int16)
                #expect(types["port"] == .int32)
                #expect(types["samples"] == .int64)
                #expect(types["uptime"] == .int64)
                let context = ModelContext(container)
                for (n, level) in [UInt64(10), 9, 100, UInt64(Int64.max)].enumerated() {
                    let s = Sensor(name: "s\(n)")
                    s.level = level
                    s.channel = UInt8(250 + n)
                    s.offset = Int8(-100 - n)
                    s.port = UInt16(65_530 + n)
                    s.samples = UInt32.max - UInt32(n)
                    s.uptime = UInt(n) * 1_000_000_007
                    context.insert(s)
                }
                try context.save()
                try container.persistentContainer.close()
            }
            let container = try ModelContainer(for: Sensor.self, configurations: ModelConfiguration(url: url))
            let context = ModelContext(container)
            let sorted = try context.fetch(FetchDescriptor<Sensor>(sortBy: [SortDescriptor(\.level)]))
            #expect(sorted.map(\.level) == [9, 10, 100, UInt64(Int64.max)])
            #expect(sorted.map(\.name) == ["s1", "s0", "s2", "s3"])
            let s3 = try #require(sorted.last)
            #expect(s3.channel == 253 && s3.offset == -103 && s3.port == 65_533 && s3.samples == UInt32.max - 3)
            #expect(s3.uptime == 3_000_000_021)
            let high = try context.fetch(
                FetchDescriptor<Sensor>(predicate: #Predicate { $0.level > 9 && $0.channel >= 251 }))
            #expect(Set(high.map(\.name)) == ["s2", "s3"])
            // A value no stored integer holds is refused, never wrapped.
            let over = Sensor(name: "over")
            over.level = UInt64(Int64.max) + 1
            context.insert(over)
            #expect(throws: LogbookError.self) { try context.save() }
            context.rollback()
            try container.persistentContainer.close()
        }
    }

    @Test func aTransformerGivenByItsTypeStoresTheValue() throws {
        try withStoreURL { url in
            let teal = Colour(red: 0, green: 128, blue: 128, alpha: 255)
            do {
                let container = try ModelContainer(for: Paint.self, configurations: ModelConfiguration(url: url))
                let context = ModelContext(container)
                context.insert(Paint(name: "teal", color: teal))
                try context.save()
                try container.persistentContainer.close()
            }
            let container = try ModelContainer(for: Paint.self, configurations: ModelConfiguration(url: url))
            let swatches = try ModelContext(container).fetch(FetchDescriptor<Paint>())
            #expect(swatches.map(\.color) == [teal])
            // Registered under the type's name, as a Core Data model's valueTransformerName.
            #expect(ValueTransformer.valueTransformerNames().contains(NSValueTransformerName("ColourTransformer")))
            try container.persistentContainer.close()
        }
    }

    @Test func aCodableValueWhoseTypeMovedStillOpens() throws {
        try withStoreURL { url in
            do {
                let container = try ModelContainer(
                    for: PlacesV1.Place.self, configurations: ModelConfiguration(url: url))
                let context = ModelContext(container)
                context.insert(PlacesV1.Place(name: "home", address: .init(city: "Lyon")))
                try context.save()
                try container.persistentContainer.close()
            }
            let container = try ModelContainer(for: PlacesV2.Place.self, configurations: ModelConfiguration(url: url))
            let places = try ModelContext(container).fetch(FetchDescriptor<PlacesV2.Place>())
            #expect(places.map(\.address) == [PlacesV2.Address(city: "Lyon")])
            try container.persistentContainer.close()
        }
    }
}
