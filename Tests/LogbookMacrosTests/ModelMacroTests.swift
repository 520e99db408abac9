import Foundation
import SwiftDiagnostics
import SwiftParser
import SwiftSyntax
import SwiftSyntaxMacroExpansion
import SwiftSyntaxMacros
import Testing

@testable import LogbookMacros

/// Expands `@Model` on the first class of `source`: its members, the attribute it puts on each
/// member, and its diagnostics.
func expandModel(_ source: String) throws -> (members: [String], attributes: [String: String], diagnostics: [String]) {
    let file = Parser.parse(source: source)
    let classDecl = try #require(file.statements.compactMap { $0.item.as(ClassDeclSyntax.self) }.first)
    let node = try #require(classDecl.attributes.compactMap { $0.as(AttributeSyntax.self) }.first)
    let context = BasicMacroExpansionContext()
    let members = try ModelMacro.expansion(
        of: node, providingMembersOf: classDecl, conformingTo: [], in: context)
    var attributes: [String: String] = [:]
    for member in classDecl.memberBlock.members {
        guard let variable = member.decl.as(VariableDeclSyntax.self),
            let name = variable.bindings.first?.pattern.trimmedDescription
        else { continue }
        let added = try ModelMacro.expansion(
            of: node, attachedTo: classDecl, providingAttributesFor: variable, in: context)
        attributes[name] = added.map(\.trimmedDescription).joined(separator: " ")
    }
    return (members.map(\.trimmedDescription), attributes, context.diagnostics.map(\.message))
}

@Suite struct ModelMacroTests {
    @Test func aStoredLetIsAnErrorThatSaysWhatToDo() throws {
        let expanded = try expandModel(
            """
            @Model final class Note {
                let id: UUID
                static let shared = 1
                @Transient let cache = 0
                let computed: Int { 1 }
                var text: String
                init(text: String) { self.id = UUID(); self.text = text }
            }
            """)
        #expect(expanded.diagnostics.count == 1)
        #expect(expanded.diagnostics.first?.contains("'id' is a 'let'") == true)
        #expect(expanded.diagnostics.first?.contains("'var'") == true)
        #expect(expanded.attributes["text"] == "@Logbook._PersistedProperty")
        #expect(expanded.attributes["id"] == "")
    }

    @Test func aFinalClassListsItsPropertiesUnderItsOwnKeyPaths() throws {
        let expanded = try expandModel(
            """
            @Model final class Book {
                var title: String
                @Attribute(.unique) var isbn: String
                init(title: String, isbn: String) { self.title = title; self.isbn = isbn }
            }
            """)
        #expect(expanded.diagnostics.isEmpty)
        let metadata = try #require(expanded.members.first { $0.contains("var schemaMetadata") })
        #expect(metadata.hasPrefix("static var schemaMetadata"))
        #expect(metadata.contains(#"keyPath: \Book.title"#))
        #expect(metadata.contains(#"keyPath: \Book.isbn, metadata: Logbook.Schema.Attribute(.unique)"#))
    }

    @Test func aBaseClassListsItsPropertiesForSubclassesToo() throws {
        let expanded = try expandModel(
            """
            @Model class Trip: Identifiable {
                var name: String
                init(name: String) { self.name = name }
            }
            """)
        #expect(expanded.members.contains { $0.hasPrefix("class var schemaMetadata") })
        let list = try #require(expanded.members.first { $0.contains("_$persistedMetadata<S: Trip>") })
        #expect(list.contains(#"keyPath: \S.name"#))
        #expect(expanded.members.contains { $0.contains("private var _$backingData") })
        #expect(expanded.attributes["name"] == "@Logbook._PersistedProperty")
    }

    @Test func aSubclassInheritsTheBackingDataAndAddsItsProperties() throws {
        let expanded = try expandModel(
            """
            @Model class BusinessTrip: Trip {
                var perDiem: Double = 0
                init(name: String, perDiem: Double) {
                    self.perDiem = perDiem
                    super.init(name: name)
                }
            }
            """)
        #expect(expanded.diagnostics.isEmpty)
        #expect(!expanded.members.contains { $0.contains("_$backingData:") })
        #expect(!expanded.members.contains { $0.contains("ObservationRegistrar()") })
        #expect(expanded.members.contains { $0.hasPrefix("override class var schemaMetadata") })
        let list = try #require(expanded.members.first { $0.contains("_$persistedMetadata<S: BusinessTrip>") })
        #expect(list.contains("Trip._$persistedMetadata(S.self) + ["))
        #expect(list.contains(#"keyPath: \S.perDiem, defaultValue: 0"#))
        let initializer = try #require(expanded.members.first { $0.contains("init(backingData:") })
        #expect(initializer.contains("super.init(backingData: backingData)"))
        #expect(expanded.members.contains { $0.contains("default: super._$notifyMutation(forKey: key)") })
        #expect(expanded.attributes["perDiem"] == "@Logbook._PersistedProperty(subclass: true)")
    }

    @Test func onlyClassesCanBeModels() throws {
        let file = Parser.parse(source: "@Model struct Point { var x: Int }")
        let decl = try #require(file.statements.first?.item.as(StructDeclSyntax.self))
        let node = try #require(decl.attributes.first?.as(AttributeSyntax.self))
        let context = BasicMacroExpansionContext()
        let members = try ModelMacro.expansion(of: node, providingMembersOf: decl, conformingTo: [], in: context)
        #expect(members.isEmpty)
        #expect(context.diagnostics.map(\.message) == ["@Model applies to classes only"])
    }
}

@Suite struct ModelMacroObserverTests {
    /// The accessors `@_PersistedProperty` gives a property declared with `declaration`.
    func accessors(_ declaration: String, subclass: Bool = false) throws -> (String, [String]) {
        let file = Parser.parse(source: declaration)
        let variable = try #require(file.statements.first?.item.as(VariableDeclSyntax.self))
        let node: AttributeSyntax = subclass ? "@_PersistedProperty(subclass: true)" : "@_PersistedProperty"
        let context = BasicMacroExpansionContext()
        let accessors = try PersistedPropertyMacro.expansion(of: node, providingAccessorsOf: variable, in: context)
        return (accessors.map(\.description).joined(separator: "\n"), context.diagnostics.map(\.message))
    }

    @Test func aPropertyWithObserversIsPersistedAndItsSetterRunsThem() throws {
        let expanded = try expandModel(
            """
            @Model final class Draft {
                var edits = 0
                var title = "" {
                    willSet { log.append(newValue) }
                    didSet(previous) { edits += 1 }
                }
                var computed: Int { edits * 2 }
                init(title: String) { self.title = title }
            }
            """)
        #expect(expanded.diagnostics.isEmpty)
        #expect(expanded.attributes["title"] == "@Logbook._PersistedProperty")
        #expect(expanded.attributes["computed"] == "")
        #expect(expanded.members.contains { $0.contains("name: \"title\"") })
        for subclass in [false, true] {
            let (text, diagnostics) = try accessors(
                "var title = \"\" {\n willSet { log.append(newValue) }\n didSet(previous) { edits += 1 }\n}",
                subclass: subclass)
            #expect(diagnostics.isEmpty)
            // The old value is read before the store, willSet runs before it and didSet after.
            let old = try #require(text.range(of: "let _$oldValue = self.title"))
            let willSet = try #require(text.range(of: "let newValue = newValue"))
            let store = try #require(text.range(of: "setValue(forKey: \"title\", to: newValue"))
            let didSet = try #require(text.range(of: "let previous = _$oldValue"))
            #expect(old.lowerBound < willSet.lowerBound && willSet.lowerBound < store.lowerBound)
            #expect(store.lowerBound < didSet.lowerBound && text.contains("edits += 1"))
        }
    }

    @Test func aReturnInWillSetIsAnError() throws {
        let (_, diagnostics) = try accessors("var title = \"\" {\n willSet { if newValue.isEmpty { return } }\n}")
        #expect(diagnostics.count == 1 && diagnostics[0].contains("'return' in the willSet"))
    }

    @Test func propertiesTheMacroCannotPersistAreErrorsNotOmissions() throws {
        let expanded = try expandModel(
            """
            @Model final class Point {
                var x = 0.0, y = 0.0
                #if os(Linux)
                var note = "linux"
                @Transient var cache = 0
                func helper() {}
                var computed: Int { 1 }
                #endif
                static var shared = 1, other = 2
                @Transient var a = 0, b = 0
                init() {}
            }
            """)
        #expect(expanded.diagnostics.count == 2, "\(expanded.diagnostics)")
        #expect(expanded.diagnostics.contains { $0.contains("'x', 'y'") && $0.contains("its own 'var'") })
        #expect(expanded.diagnostics.contains { $0.contains("'note'") && $0.contains("'#if'") })
    }
}
