import Foundation
import LogbookGraph
import Testing

@testable import LogbookSync

/// The change body's own JSON reader: what BodyWriter writes, and what the server's `jsonb`
/// gives back (keys in another order, spaces), reads back value for value.
@Suite struct ChangeBodyTests {
    @Test func whatTheWriterWritesReadsBack() throws {
        var random = SyncRandomTests.Generator(state: 7)
        let alphabet: [Character] = [
            "a", "Z", "0", " ", "\"", "\\", "/", "\n", "\r", "\t", "\u{01}", "\u{1F}", "é", "€", "𝄞", "😀", "\u{7F}"
        ]
        for _ in 0..<300 {
            let name = String(
                (0..<Int.random(in: 0...12, using: &random)).map { _ in alphabet.randomElement(using: &random)! })
            let count = Int64.random(in: Int64.min...Int64.max, using: &random)
            let ratio = [
                Double.nan, .infinity, -.infinity, 0.1, -0, 1e300, 5e-324, Double.random(in: -1e9...1e9, using: &random)
            ]
            .randomElement(using: &random)!
            let when = Date(timeIntervalSinceReferenceDate: Double.random(in: -1e9...1e9, using: &random))
            let payload = Data(
                (0..<Int.random(in: 0...9, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) })
            let (id, folder, member) = (UUID(), UUID(), UUID())
            var writer = BodyWriter()
            writer.object(
                entity: "Item", id: id, op: "i",
                attributes: [
                    ("name", name), ("count", count), ("ratio", ratio), ("when", when), ("payload", payload),
                    ("note", nil), ("done", true)
                ],
                toOne: [("folder", folder), ("other", nil)])
            writer.members(entity: "Item", owner: id, relationship: "tags", added: [member], removed: [], order: nil)
            let body = try Body(json: writer.finished())
            let o = try #require(body.objects.first)
            #expect(o.entity == "Item" && o.id == id && o.op == "i")
            #expect(Body.value(o.attributes["name"]!, type: .string) as? String == name)
            #expect(Body.value(o.attributes["count"]!, type: .int64) as? Int64 == count)
            let r = try #require(Body.value(o.attributes["ratio"]!, type: .double) as? Double)
            #expect(r.bitPattern == ratio.bitPattern || (r.isNaN && ratio.isNaN) || (r == 0 && ratio == 0))
            let w = try #require(Body.value(o.attributes["when"]!, type: .date) as? Date)
            #expect(w.timeIntervalSinceReferenceDate.bitPattern == when.timeIntervalSinceReferenceDate.bitPattern)
            #expect(Body.value(o.attributes["payload"]!, type: .data) as? Data == payload)
            #expect(o.attributes["note"] == .null && Body.value(o.attributes["done"]!, type: .bool) as? Bool == true)
            #expect(o.toOne["folder"] == .some(folder) && o.toOne["other"] == .some(nil))
            #expect(body.members.first?.added == [member] && body.members.first?.order == nil)
        }
    }

    @Test func aUUIDIsWrittenAsFoundationWritesIt() {
        for _ in 0..<100 {
            let u = UUID()
            var text = ""
            BodyWriter.uuid(u, &text)
            #expect(text == "\"\(u.uuidString.lowercased())\"")
        }
    }

    /// The text `jsonb` gives back: keys sorted its way, a space after each colon and comma,
    /// escapes PostgreSQL writes (`\u0001`), and upper-case UUIDs.
    @Test func theServersFormReadsBack() throws {
        let text = """
            {"m": [{"e": "Folder", "id": "00000000-0000-0000-0000-0000000000AA", "add": [], "ord": ["00000000-0000-0000-0000-000000000001"], "rel": "items", "rem": []}], "o": [{"a": {"name": "a\\"b\\\\c\\nd\\u0001\\u00e9\\ud834\\udd1e", "count": -42, "ratio": 1.5e-7}, "e": "Item", "r": {"folder": null}, "id": "00000000-0000-0000-0000-000000000001", "op": "u"}]}
            """
        let body = try Body(json: text)
        let o = try #require(body.objects.first)
        #expect(Body.value(o.attributes["name"]!, type: .string) as? String == "a\"b\\c\nd\u{01}é𝄞")
        #expect(Body.value(o.attributes["count"]!, type: .int64) as? Int64 == -42)
        #expect(Body.value(o.attributes["ratio"]!, type: .double) as? Double == 1.5e-7)
        #expect(o.toOne["folder"] == .some(nil) && o.op == "u")
        #expect(body.members.first?.owner.uuidString == "00000000-0000-0000-0000-0000000000AA")
        #expect(body.members.first?.order?.count == 1 && body.members.first?.relationship == "items")
    }

    @Test(arguments: [
        "", "{", "{\"o\": [", "{\"o\": [{\"e\": \"Item\"}]}",
        "{\"o\": [{\"e\": \"I\", \"id\": \"zz\", \"op\": \"i\"}]}",
        "{\"o\": []} x", "[1]", "{\"o\": [{\"a\": {\"x\": [1]}}]}"
    ])
    func aMalformedBodyIsAClearError(_ text: String) {
        #expect(throws: SyncError.self) { try Body(json: text) }
    }
}
