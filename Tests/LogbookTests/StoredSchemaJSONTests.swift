import Foundation
import Testing

@testable import LogbookGraph

/// The recorded schema is read without `JSONDecoder` when it is what `encoded()` writes
/// (`StoredSchema.init(json:)`), and must read exactly what `JSONDecoder` reads.
@Suite struct StoredSchemaJSONTests {
    func decodedByFoundation(_ bytes: [UInt8]) throws -> StoredSchema {
        try JSONDecoder().decode(StoredSchema.self, from: Data(bytes))
    }

    @Test func everySchemaThatTheTestsModelsRecordReadsBackAsFoundationReadsIt() throws {
        let models = [
            try documentModel(), try todoModel(), try ConstraintTests.model(), try InheritanceTests.model(),
            try IndexPlanTests.model(), try ModelFeaturesTests.model()
        ]
        var optionalsSeen: Set<String> = []
        for model in models {
            let first = StoredSchema.make(for: model, previous: nil)
            let bytes = first.encoded()
            let fast = try #require(StoredSchema(json: bytes), "\(String(decoding: bytes, as: UTF8.self))")
            #expect(fast == first)
            #expect(fast == (try decodedByFoundation(bytes)))
            #expect(try StoredSchema.decode(bytes) == first)
            for e in first.entities {
                if e.constraints != nil { optionalsSeen.insert("constraints") }
                if e.compoundIndexes != nil { optionalsSeen.insert("compoundIndexes") }
                if e.parent != nil { optionalsSeen.insert("parent") }
                if e.abstract != nil { optionalsSeen.insert("abstract") }
                for a in e.attributes where a.transformer != nil { optionalsSeen.insert("transformer") }
                for r in e.relationships {
                    if r.setKeyspace != nil { optionalsSeen.insert("setKeyspace") }
                    if r.orderKeyspace != nil { optionalsSeen.insert("orderKeyspace") }
                    if r.polymorphic != nil { optionalsSeen.insert("polymorphic") }
                    if r.index != nil { optionalsSeen.insert("relationship index") }
                }
            }
        }
        // The models cover the optional fields the reader must take.
        #expect(
            optionalsSeen.isSuperset(of: [
                "constraints", "compoundIndexes", "parent", "abstract", "setKeyspace", "orderKeyspace",
                "relationship index"
            ]), "\(optionalsSeen)")
    }

    @Test func whitespaceEscapesNullsUnknownKeysAndAnyKeyOrderReadAsFoundationReadsThem() throws {
        let json = """
            { "nextIndex" : 7, "unknown": {"a": [1, -2, true, null, "x"]},
              "entities": [ {
                "relationships": [],
                "name": "Caf\\u00e9 \\"\\/\\\\\\n\\ud83d\\ude00 ✓",
                "keyspace": 3, "parent": null,
                "attributes": [ { "type": "string", "name": "t\\tab", "optional": false, "index": null },
                                { "name": "n", "type": "integer64", "optional": true, "index": 4294967295 } ]
              } ],
              "storeUUID": "E621E1F8-C36C-495A-93FC-0C247A3E6E5F", "nextKeyspace": 65535, "format": 1 }
            """
        let bytes = Array(json.utf8)
        let fast = try #require(StoredSchema(json: bytes))
        #expect(fast == (try decodedByFoundation(bytes)))
        #expect(fast.entities[0].name == "Café \"/\\\n😀 ✓")
        #expect(fast.entities[0].attributes[1].index == UInt32.max)
    }

    @Test func whatTheReaderDoesNotTakeGoesToFoundation() throws {
        let valid = StoredSchema.make(for: try todoModel(), previous: nil)
        let text = String(decoding: valid.encoded(), as: UTF8.self)
        // A number with a fraction, out of range, a wrong kind, trailing bytes, a lone surrogate.
        for bad in [
            text.replacingOccurrences(of: "\"nextIndex\":", with: "\"nextIndex\":1.0,\"x\":"),
            text.replacingOccurrences(of: "\"nextKeyspace\":", with: "\"nextKeyspace\":70000,\"x\":"),
            text.replacingOccurrences(
                of: "\"format\":\(StoredSchema.currentFormat)", with: "\"format\":\"\(StoredSchema.currentFormat)\""),
            text + "]", "{\"storeUUID\":\"\\ud800\"}", "", "{", "[]"
        ] {
            #expect(StoredSchema(json: Array(bad.utf8)) == nil, "\(bad)")
        }
        // `decode` then answers what Foundation answers: a value, or the schema error.
        let fraction = text.replacingOccurrences(of: "\"nextIndex\":", with: "\"nextIndex\":1.0,\"x\":")
        #expect(throws: LogbookError.self) { try StoredSchema.decode(Array("{".utf8)) }
        #expect((try? StoredSchema.decode(Array(fraction.utf8))) == (try? decodedByFoundation(Array(fraction.utf8))))
    }
}
