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
        if let block = binding.accessorBlock {
            // Observers (`willSet`, `didSet`) keep the property stored: it is persisted, and
            // they run around each set. A getter makes it computed.
            guard case .accessors(let accessors) = block.accessors,
                accessors.allSatisfy({
                    $0.accessorSpecifier.tokenKind == .keyword(.willSet)
                        || $0.accessorSpecifier.tokenKind == .keyword(.didSet)
                })
            else { return false }
        }
        return true
    }

    /// Whether the class is a subclass of another `@Model` class: one of its initializers calls
    /// `super.init` (a root model class has no superclass to call; a subclass must, since its
    /// superclass has no initializer without arguments). Syntax cannot tell a superclass from a
    /// protocol in the inheritance list; this can.
    static func isSubclass(_ declaration: ClassDeclSyntax) -> Bool {
        guard declaration.inheritanceClause?.inheritedTypes.first != nil else { return false }
        for member in declaration.memberBlock.members {
            guard let initializer = member.decl.as(InitializerDeclSyntax.self), let body = initializer.body else {
                continue
            }
            if body.tokens(viewMode: .sourceAccurate).contains(where: { $0.tokenKind == .keyword(.super) }) {
                return true
            }
        }
        return false
    }

    /// Stored `let` properties without `@Transient`: SwiftData cannot persist them (a macro
    /// cannot give a `let` accessors), and a silent omission would lose data.
    static func storedConstants(of declaration: some DeclGroupSyntax) -> [VariableDeclSyntax] {
        declaration.memberBlock.members.compactMap { member in
            guard let variable = member.decl.as(VariableDeclSyntax.self),
                variable.bindingSpecifier.tokenKind == .keyword(.let),
                !variable.modifiers.contains(where: {
                    $0.name.tokenKind == .keyword(.static) || $0.name.tokenKind == .keyword(.class)
                }),
                attribute(named: "Transient", in: variable) == nil,
                variable.bindings.allSatisfy({ $0.accessorBlock == nil })
            else { return nil }
            return variable
        }
    }

    /// Stored properties `@Model` cannot persist and must not drop silently: several in one
    /// declaration (`var x = 0.0, y = 0.0`: an accessor macro applies to one binding), and
    /// stored properties inside `#if` (the macro cannot tell which clause is compiled). Each is
    /// a compile error that says what to write instead.
    static func unpersistable(of declaration: some DeclGroupSyntax) -> [(Syntax, String)] {
        /// A stored, non-static `var` without `@Transient` (observers allowed).
        func isStoredVariable(_ variable: VariableDeclSyntax) -> Bool {
            guard variable.bindingSpecifier.tokenKind == .keyword(.var),
                attribute(named: "Transient", in: variable) == nil,
                !variable.modifiers.contains(where: {
                    [.keyword(.static), .keyword(.class), .keyword(.lazy)].contains($0.name.tokenKind)
                })
            else { return false }
            return variable.bindings.allSatisfy { binding in
                guard let block = binding.accessorBlock else { return true }
                guard case .accessors(let accessors) = block.accessors else { return false }
                return accessors.allSatisfy {
                    [.keyword(.willSet), .keyword(.didSet)].contains($0.accessorSpecifier.tokenKind)
                }
            }
        }
        var found: [(Syntax, String)] = []
        func visit(_ members: MemberBlockItemListSyntax, inIf: Bool) {
            for member in members {
                if let conditional = member.decl.as(IfConfigDeclSyntax.self) {
                    for clause in conditional.clauses {
                        if case .decls(let nested) = clause.elements { visit(nested, inIf: true) }
                    }
                    continue
                }
                guard let variable = member.decl.as(VariableDeclSyntax.self), isStoredVariable(variable) else {
                    continue
                }
                let names = variable.bindings.map { $0.pattern.trimmedDescription }.joined(separator: "', '")
                if inIf {
                    found.append(
                        (
                            Syntax(variable),
                            "@Model cannot persist '\(names)', a stored property inside '#if' (the macro cannot tell which clause is compiled): declare it outside the '#if', or mark it @Transient to keep it out of the store"
                        ))
                } else if variable.bindings.count > 1 {
                    found.append(
                        (
                            Syntax(variable),
                            "@Model persists one property per declaration: declare '\(names)' each with its own 'var'"
                        ))
                }
            }
        }
        visit(declaration.memberBlock.members, inIf: false)
        return found
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
        for constant in storedConstants(of: declaration) {
            let name = constant.bindings.first?.pattern.trimmedDescription ?? "the property"
            context.diagnose(
                Diagnostic(
                    node: Syntax(constant.bindingSpecifier),
                    message: ModelDiagnostic(
                        "@Model persists stored properties declared with 'var'; '\(name)' is a 'let' and would not be stored (declare it with 'var', or mark it @Transient to keep it out of the store)"
                    )))
        }
        for (node, message) in unpersistable(of: declaration) {
            context.diagnose(Diagnostic(node: node, message: ModelDiagnostic(message)))
        }
        let typeName = classDecl.name.trimmedDescription
        let access =
            classDecl.modifiers.contains {
                $0.name.tokenKind == .keyword(.public) || $0.name.tokenKind == .keyword(.open)
            } ? "public " : ""
        let isFinal = classDecl.modifiers.contains { $0.name.tokenKind == .keyword(.final) }
        let subclass = isSubclass(classDecl)
        let superclass = classDecl.inheritanceClause?.inheritedTypes.first?.type.trimmedDescription ?? ""
        let properties = persistedProperties(of: declaration)
        // Key paths are rooted at `S`, a generic subclass, so that subclasses list the inherited
        // properties under their own key paths (`\BusinessTrip.name` for `Trip.name`); a final
        // class, which has no subclasses, names itself.
        let root = isFinal && !subclass ? typeName : "S"
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
            return "Logbook.ModelPropertyMetadata(name: \"\(p.name)\", keyPath: \\\(root).\(p.name)\(extra))"
        }
        let notifications = properties.map {
            "case \"\($0.name)\": _$observationRegistrar.withMutation(of: self, keyPath: \\.\($0.name)) {}"
        }.joined(separator: "\n")
        let unique = literal(constraints(named: "Unique", in: declaration))
        let indexes = literal(constraints(named: "Index", in: declaration))
        let list = "[\(metadata.joined(separator: ",\n"))]"
        let shape = MemberShape(
            access: access, typeName: typeName, superclass: superclass, list: list, unique: unique, indexes: indexes,
            notifications: notifications, properties: properties)
        return subclass ? subclassMembers(shape) : rootMembers(shape, isFinal: isFinal)
    }
    /// What the members of a `@Model` class are made of.
    struct MemberShape {
        let access: String
        let typeName: String
        let superclass: String
        /// The persisted properties' metadata, as an array literal.
        let list: String
        let unique: String
        let indexes: String
        /// The cases of `_$notifyMutation(forKey:)`.
        let notifications: String
        let properties: [PersistedProperty]
    }

    /// The members of a `@Model` subclass of another: the backing data, the registrar and the
    /// protocol's members are inherited; it adds its properties to the superclass's list.
    static func subclassMembers(_ shape: MemberShape) -> [DeclSyntax] {
        let (access, typeName, superclass, list) = (shape.access, shape.typeName, shape.superclass, shape.list)
        let (unique, indexes, notifications) = (shape.unique, shape.indexes, shape.notifications)
        var members: [DeclSyntax] = []
        let storage = shape.properties.map { "self._\($0.name) = Logbook._ModelInitialValue()" }.joined(separator: "\n")
        members += [
            """
            \(raw: access)override class var schemaMetadata: [Logbook.ModelPropertyMetadata] {
                _$persistedMetadata(\(raw: typeName).self)
            }
            """,
            """
            \(raw: access)static func _$persistedMetadata<S: \(raw: typeName)>(_: S.Type) -> [Logbook.ModelPropertyMetadata] {
                \(raw: superclass)._$persistedMetadata(S.self) + \(raw: list)
            }
            """,
            """
            \(raw: access)override class var schemaConstraints: Logbook.ModelConstraints {
                Logbook.ModelConstraints(unique: \(raw: unique), indexes: \(raw: indexes))
            }
            """,
            """
            \(raw: access)required init(backingData: Logbook.ModelBackingData) {
                \(raw: storage)
                super.init(backingData: backingData)
            }
            """,
            """
            \(raw: access)override nonisolated func _$notifyMutation(forKey key: String) {
                switch key {
                \(raw: notifications)
                default: super._$notifyMutation(forKey: key)
                }
            }
            """
        ]
        return members
    }

    /// The members of a `@Model` class at the root of its hierarchy: the backing data, the
    /// schema's metadata and constraints, the initializer from backing data, the registrar.
    static func rootMembers(_ shape: MemberShape, isFinal: Bool) -> [DeclSyntax] {
        let (access, typeName, list) = (shape.access, shape.typeName, shape.list)
        let (unique, indexes, notifications) = (shape.unique, shape.indexes, shape.notifications)
        var members: [DeclSyntax] = []
        let storage = shape.properties.map { "self._\($0.name) = Logbook._ModelNoStorage()" }.joined(separator: "\n")
        let typeMember = isFinal ? "static" : "class"
        members += [
            "@Logbook.Transient private var _$backingData: Logbook.ModelBackingData = Logbook.ModelBackingData()",
            """
            \(raw: access)var persistentBackingData: Logbook.ModelBackingData {
                get { _$backingData }
                set { _$backingData = newValue }
            }
            """
        ]
        if isFinal {
            members.append(
                """
                \(raw: access)static var schemaMetadata: [Logbook.ModelPropertyMetadata] {
                    \(raw: list)
                }
                """)
        } else {
            members += [
                """
                \(raw: access)class var schemaMetadata: [Logbook.ModelPropertyMetadata] {
                    _$persistedMetadata(\(raw: typeName).self)
                }
                """,
                """
                \(raw: access)static func _$persistedMetadata<S: \(raw: typeName)>(_: S.Type) -> [Logbook.ModelPropertyMetadata] {
                    \(raw: list)
                }
                """
            ]
        }
        members += [
            """
            \(raw: access)\(raw: typeMember) var schemaConstraints: Logbook.ModelConstraints {
                Logbook.ModelConstraints(unique: \(raw: unique), indexes: \(raw: indexes))
            }
            """,
            """
            \(raw: access)required init(backingData: Logbook.ModelBackingData) {
                \(raw: storage)
                self._$backingData = backingData
            }
            """,
            // Not private: the accessors of subclasses use it.
            "@Logbook.Transient \(raw: access)let _$observationRegistrar = Observation.ObservationRegistrar()",
            """
            \(raw: access)nonisolated func _$notifyMutation(forKey key: String) {
                switch key {
                \(raw: notifications)
                default: break
                }
            }
            """
        ]
        return members
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
        if let classDecl = declaration.as(ClassDeclSyntax.self), isSubclass(classDecl) {
            return ["@Logbook._PersistedProperty(subclass: true)"]
        }
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

    /// Whether `@_PersistedProperty(subclass: true)` marks a property of a subclass.
    static func inSubclass(_ node: AttributeSyntax) -> Bool {
        node.arguments?.trimmedDescription.contains("true") ?? false
    }

    /// The property's `willSet` and `didSet`, as statements the generated setter runs around
    /// the store, each in a `do` block that names its parameter (`newValue`, `oldValue` or the
    /// name written). A `return` in a `willSet` would end the setter before the store: it is a
    /// compile error (`diagnose`).
    static func observers(
        of declaration: some DeclSyntaxProtocol, key: String, backingData: String,
        diagnose: (Syntax, String) -> Void
    ) -> (before: String, after: String) {
        guard let variable = declaration.as(VariableDeclSyntax.self),
            case .accessors(let accessors)? = variable.bindings.first?.accessorBlock?.accessors
        else { return ("", "") }
        var before = ""
        var after = ""
        for accessor in accessors {
            let body = accessor.body?.statements.trimmedDescription ?? ""
            let parameter = accessor.parameters?.name.trimmedDescription
            switch accessor.accessorSpecifier.tokenKind {
            case .keyword(.willSet):
                if accessor.body?.tokens(viewMode: .sourceAccurate).contains(where: {
                    $0.tokenKind == .keyword(.return)
                })
                    == true
                {
                    diagnose(
                        Syntax(accessor),
                        "'return' in the willSet of a persisted property is not supported (the value would not be stored)"
                    )
                }
                before = "do {\nlet \(parameter ?? "newValue") = newValue\n\(body)\n}\n"
            case .keyword(.didSet):
                after = "do {\nlet \(parameter ?? "oldValue") = _$oldValue\n\(body)\n}\n"
            default:
                continue
            }
        }
        guard !before.isEmpty || !after.isEmpty else { return ("", "") }
        // Inside its own observers, a set of the property only stores (Swift's rule).
        let name = variable.bindings.first!.pattern.trimmedDescription
        before =
            "let _$observers = \(backingData)._$beginObservers(forKey: \"\(key)\")\n"
            + "defer { if _$observers { \(backingData)._$endObservers(forKey: \"\(key)\") } }\n"
            + (after.isEmpty ? "" : "let _$oldValue = self.\(name)\n")
            + (before.isEmpty ? "" : "if _$observers {\n" + before + "}\n")
        after = after.isEmpty ? "" : "if _$observers {\n" + after + "}\n"
        return (before, after)
    }

    public static func expansion(
        of node: AttributeSyntax, providingAccessorsOf declaration: some DeclSyntaxProtocol,
        in context: some MacroExpansionContext
    ) throws -> [AccessorDeclSyntax] {
        guard let name = name(of: declaration) else { return [] }
        let key = name.filter { $0 != "`" }
        func diagnose(_ node: Syntax, _ message: String) {
            context.diagnose(Diagnostic(node: node, message: ModelDiagnostic(message)))
        }
        if inSubclass(node) {
            let (before, after) = observers(
                of: declaration, key: key, backingData: "persistentBackingData", diagnose: diagnose)
            // A subclass's initializer sets its own properties before `super.init`, when the
            // backing data (the superclass's) is not there yet: the initial value waits in the
            // peer until the object is inserted.
            return [
                """
                @storageRestrictions(initializes: _\(raw: key))
                init(initialValue) {
                    _\(raw: key) = Logbook._ModelInitialValue(initialValue)
                }
                """,
                """
                get {
                    _$observationRegistrar.access(self, keyPath: \\.\(raw: name))
                    return persistentBackingData.getValue(forKey: "\(raw: key)", initialValue: _\(raw: key))
                }
                """,
                """
                set {
                    \(raw: before)_$observationRegistrar.withMutation(of: self, keyPath: \\.\(raw: name)) {
                        persistentBackingData.setValue(forKey: "\(raw: key)", to: newValue, owner: self)
                    }
                    \(raw: after)
                }
                """
            ]
        }
        let (before, after) = observers(
            of: declaration, key: key, backingData: "_$backingData", diagnose: diagnose)
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
                \(raw: before)_$observationRegistrar.withMutation(of: self, keyPath: \\.\(raw: name)) {
                    _$backingData.setValue(forKey: "\(raw: key)", to: newValue, owner: self)
                }
                \(raw: after)
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
        if inSubclass(node) { return ["@Logbook.Transient private var _\(raw: key): Logbook._ModelInitialValue"] }
        return ["@Logbook.Transient private var _\(raw: key): Logbook._ModelNoStorage"]
    }
}

struct ModelDiagnostic: DiagnosticMessage {
    let message: String
    var diagnosticID: MessageID { MessageID(domain: "Logbook", id: message) }
    var severity: DiagnosticSeverity { .error }
    init(_ message: String) { self.message = message }
}
