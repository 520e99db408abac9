import SwiftDiagnostics
import SwiftSyntax
import SwiftSyntaxMacros

/// `@Model`: makes a class a persistent model, as SwiftData's macro does.
///
/// Every stored `var` that is not `@Transient` becomes a persisted property: its storage moves
/// into the object's backing data (values of its own while the object is unattached, its
/// managed object once inserted into a context), and its reads and writes are observed. The
/// class gains `persistentBackingData`, `schemaMetadata` (one entry per persisted property,
/// with the arguments of its `@Attribute` or `@Relationship`), `schemaConstraints` (from
/// `#Unique` and `#Index` in its body), `init(backingData:)`, and conformance to
/// `PersistentModel` and `Observable`.
public struct ModelMacro {}

struct PersistedProperty {
    var name: String
    var attribute: AttributeSyntax?
    var relationship: AttributeSyntax?
    /// The property's initial value, as written.
    var initializer: ExprSyntax?
}

extension ModelMacro {
    static func attributeName(_ attribute: AttributeSyntax) -> String {
        let name = attribute.attributeName.trimmedDescription
        return name.split(separator: ".").last.map(String.init) ?? name
    }

    static func attribute(named name: String, in variable: VariableDeclSyntax) -> AttributeSyntax? {
        for element in variable.attributes {
            if case .attribute(let a) = element, attributeName(a) == name { return a }
        }
        return nil
    }

    /// Whether `@Model` persists this member: a stored, non-static `var` with one binding
    /// and a plain name, not `@Transient`, not lazy, without accessors of its own (observers
    /// `willSet`/`didSet` are not supported on persisted properties, as in SwiftData).
    static func isPersisted(_ variable: VariableDeclSyntax) -> Bool {
        guard variable.bindingSpecifier.tokenKind == .keyword(.var), variable.bindings.count == 1,
            let binding = variable.bindings.first,
            binding.pattern.is(IdentifierPatternSyntax.self)
        else { return false }
        for modifier in variable.modifiers {
            switch modifier.name.tokenKind {
            case .keyword(.static), .keyword(.class), .keyword(.lazy), .keyword(.override): return false
            default: continue
            }
        }
        if attribute(named: "Transient", in: variable) != nil { return false }
        if binding.accessorBlock != nil { return false }
        return true
    }

    static func persistedProperties(of declaration: some DeclGroupSyntax) -> [PersistedProperty] {
        declaration.memberBlock.members.compactMap { member in
            guard let variable = member.decl.as(VariableDeclSyntax.self), isPersisted(variable),
                let pattern = variable.bindings.first?.pattern.as(IdentifierPatternSyntax.self)
            else { return nil }
            return PersistedProperty(
                name: pattern.identifier.trimmedDescription.filter { $0 != "`" },
                attribute: attribute(named: "Attribute", in: variable),
                relationship: attribute(named: "Relationship", in: variable),
                initializer: variable.bindings.first?.initializer?.value)
        }
    }

    /// The property names of each `#Unique` or `#Index` in the class body.
    static func constraints(named macro: String, in declaration: some DeclGroupSyntax) -> [[String]] {
        var result: [[String]] = []
        for member in declaration.memberBlock.members {
            guard let expansion = member.decl.as(MacroExpansionDeclSyntax.self),
                expansion.macroName.trimmedDescription == macro
            else { continue }
            for argument in expansion.arguments {
                guard let array = argument.expression.as(ArrayExprSyntax.self) else { continue }
                let names = array.elements.compactMap { element -> String? in
                    guard let keyPath = element.expression.as(KeyPathExprSyntax.self),
                        let last = keyPath.components.last?.component.as(KeyPathPropertyComponentSyntax.self)
                    else { return nil }
                    return last.declName.baseName.trimmedDescription
                }
                if !names.isEmpty { result.append(names) }
            }
        }
        return result
    }

    static func literal(_ lists: [[String]]) -> String {
        "[" + lists.map { "[" + $0.map { "\"\($0)\"" }.joined(separator: ", ") + "]" }.joined(separator: ", ") + "]"
    }
}

extension ModelMacro: MemberMacro {
    public static func expansion(
        of node: AttributeSyntax, providingMembersOf declaration: some DeclGroupSyntax,
        conformingTo protocols: [TypeSyntax], in context: some MacroExpansionContext
    ) throws -> [DeclSyntax] {
        guard let classDecl = declaration.as(ClassDeclSyntax.self) else {
            context.diagnose(
                Diagnostic(node: Syntax(node), message: ModelDiagnostic("@Model applies to classes only")))
            return []
        }
        let typeName = classDecl.name.trimmedDescription
        let access =
            classDecl.modifiers.contains {
                $0.name.tokenKind == .keyword(.public) || $0.name.tokenKind == .keyword(.open)
            } ? "public " : ""
        let properties = persistedProperties(of: declaration)
        let metadata = properties.map { p -> String in
            var extra = ""
            // The initial value is the attribute's default (what a migration gives the objects
            // already stored); relationships have none.
            if let value = p.initializer, p.relationship == nil {
                extra += ", defaultValue: \(value.trimmedDescription)"
            }
            if let a = p.attribute {
                extra += ", metadata: Logbook.Schema.Attribute(\(a.arguments?.trimmedDescription ?? ""))"
            } else if let r = p.relationship {
                extra += ", metadata: Logbook.Schema.Relationship(\(r.arguments?.trimmedDescription ?? ""))"
            }
            return "Logbook.ModelPropertyMetadata(name: \"\(p.name)\", keyPath: \\\(typeName).\(p.name)\(extra))"
        }
        let notifications = properties.map {
            "case \"\($0.name)\": _$observationRegistrar.withMutation(of: self, keyPath: \\.\($0.name)) {}"
        }.joined(separator: "\n")
        let storage = properties.map { "self._\($0.name) = Logbook._ModelNoStorage()" }.joined(separator: "\n")
        let unique = literal(constraints(named: "Unique", in: declaration))
        let indexes = literal(constraints(named: "Index", in: declaration))
        return [
            "@Logbook.Transient private var _$backingData: Logbook.ModelBackingData = Logbook.ModelBackingData()",
            """
            \(raw: access)var persistentBackingData: Logbook.ModelBackingData {
                get { _$backingData }
                set { _$backingData = newValue }
            }
            """,
            """
            \(raw: access)static var schemaMetadata: [Logbook.ModelPropertyMetadata] {
                [\(raw: metadata.joined(separator: ",\n"))]
            }
            """,
            """
            \(raw: access)static var schemaConstraints: Logbook.ModelConstraints {
                Logbook.ModelConstraints(unique: \(raw: unique), indexes: \(raw: indexes))
            }
            """,
            """
            \(raw: access)required init(backingData: Logbook.ModelBackingData) {
                \(raw: storage)
                self._$backingData = backingData
            }
            """,
            "@Logbook.Transient private let _$observationRegistrar = Observation.ObservationRegistrar()",
            """
            \(raw: access)nonisolated func _$notifyMutation(forKey key: String) {
                switch key {
                \(raw: notifications)
                default: break
                }
            }
            """
        ]
    }
}

extension ModelMacro: MemberAttributeMacro {
    public static func expansion(
        of node: AttributeSyntax, attachedTo declaration: some DeclGroupSyntax,
        providingAttributesFor member: some DeclSyntaxProtocol, in context: some MacroExpansionContext
    ) throws -> [AttributeSyntax] {
        guard let variable = member.as(VariableDeclSyntax.self), isPersisted(variable),
            attribute(named: "_PersistedProperty", in: variable) == nil
        else { return [] }
        return ["@Logbook._PersistedProperty"]
    }
}

extension ModelMacro: ExtensionMacro {
    public static func expansion(
        of node: AttributeSyntax, attachedTo declaration: some DeclGroupSyntax,
        providingExtensionsOf type: some TypeSyntaxProtocol, conformingTo protocols: [TypeSyntax],
        in context: some MacroExpansionContext
    ) throws -> [ExtensionDeclSyntax] {
        guard declaration.is(ClassDeclSyntax.self) else { return [] }
        let names = protocols.map { $0.trimmedDescription.split(separator: ".").last.map(String.init) ?? "" }
        var conformances: [String] = []
        if names.contains("PersistentModel") { conformances.append("Logbook.PersistentModel") }
        if names.contains("Observable") { conformances.append("Observation.Observable") }
        guard !conformances.isEmpty else { return [] }
        let decl: DeclSyntax = "extension \(type.trimmed): \(raw: conformances.joined(separator: ", ")) {}"
        return [decl.cast(ExtensionDeclSyntax.self)]
    }
}

/// `@_PersistedProperty`, which `@Model` puts on each persisted property: its reads and
/// writes go to the backing data, observed, and a peer `_name` marks its initialization for
/// the compiler (so that an initializer must set every persisted property, as SwiftData's
/// must).
public struct PersistedPropertyMacro: AccessorMacro, PeerMacro {
    static func name(of declaration: some DeclSyntaxProtocol) -> String? {
        guard let variable = declaration.as(VariableDeclSyntax.self),
            let pattern = variable.bindings.first?.pattern.as(IdentifierPatternSyntax.self)
        else { return nil }
        return pattern.identifier.trimmedDescription
    }

    public static func expansion(
        of node: AttributeSyntax, providingAccessorsOf declaration: some DeclSyntaxProtocol,
        in context: some MacroExpansionContext
    ) throws -> [AccessorDeclSyntax] {
        guard let name = name(of: declaration) else { return [] }
        let key = name.filter { $0 != "`" }
        return [
            """
            @storageRestrictions(accesses: _$backingData, initializes: _\(raw: key))
            init(initialValue) {
                _$backingData.setValue(forKey: "\(raw: key)", to: initialValue)
                _\(raw: key) = Logbook._ModelNoStorage()
            }
            """,
            """
            get {
                _$observationRegistrar.access(self, keyPath: \\.\(raw: name))
                return _$backingData.getValue(forKey: "\(raw: key)")
            }
            """,
            """
            set {
                _$observationRegistrar.withMutation(of: self, keyPath: \\.\(raw: name)) {
                    _$backingData.setValue(forKey: "\(raw: key)", to: newValue)
                }
            }
            """
        ]
    }

    public static func expansion(
        of node: AttributeSyntax, providingPeersOf declaration: some DeclSyntaxProtocol,
        in context: some MacroExpansionContext
    ) throws -> [DeclSyntax] {
        guard let name = name(of: declaration) else { return [] }
        let key = name.filter { $0 != "`" }
        return ["@Logbook.Transient private var _\(raw: key): Logbook._ModelNoStorage"]
    }
}

struct ModelDiagnostic: DiagnosticMessage {
    let message: String
    var diagnosticID: MessageID { MessageID(domain: "Logbook", id: message) }
    var severity: DiagnosticSeverity { .error }
    init(_ message: String) { self.message = message }
}
