import SwiftSyntax
import SwiftSyntaxMacros

/// `@ModelActor`: gives an actor a model context of its own, on an executor of its own, as
/// SwiftData's macro does. The actor gains `modelExecutor`, `modelContainer` and
/// `init(modelContainer:)`, and conforms to `ModelActor` (whose `modelContext` and
/// `unownedExecutor` come from the executor).
public struct ModelActorMacro: MemberMacro, ExtensionMacro {
    public static func expansion(
        of node: AttributeSyntax, providingMembersOf declaration: some DeclGroupSyntax,
        conformingTo protocols: [TypeSyntax], in context: some MacroExpansionContext
    ) throws -> [DeclSyntax] {
        guard declaration.is(ActorDeclSyntax.self) else {
            context.diagnose(
                .init(node: Syntax(node), message: ModelDiagnostic("@ModelActor applies to actors only")))
            return []
        }
        let access =
            declaration.modifiers.contains { $0.name.tokenKind == .keyword(.public) } ? "public " : ""
        return [
            "\(raw: access)nonisolated let modelExecutor: any Logbook.ModelExecutor",
            "\(raw: access)nonisolated let modelContainer: Logbook.ModelContainer",
            """
            \(raw: access)init(modelContainer: Logbook.ModelContainer) {
                let modelContext = Logbook.ModelContext(modelContainer)
                self.modelExecutor = Logbook.DefaultSerialModelExecutor(modelContext: modelContext)
                self.modelContainer = modelContainer
            }
            """
        ]
    }

    public static func expansion(
        of node: AttributeSyntax, attachedTo declaration: some DeclGroupSyntax,
        providingExtensionsOf type: some TypeSyntaxProtocol, conformingTo protocols: [TypeSyntax],
        in context: some MacroExpansionContext
    ) throws -> [ExtensionDeclSyntax] {
        guard declaration.is(ActorDeclSyntax.self), !protocols.isEmpty else { return [] }
        let decl: DeclSyntax = "extension \(type.trimmed): Logbook.ModelActor {}"
        return [decl.cast(ExtensionDeclSyntax.self)]
    }
}
