import SwiftSyntax
import SwiftSyntaxMacros

/// `@Attribute`, `@Relationship` and `@Transient`: they add nothing where they stand. `@Model`
/// reads them (their arguments become the property's schema metadata), and `@Transient` keeps
/// a property out of the store.
public struct MarkerMacro: PeerMacro {
    public static func expansion(
        of node: AttributeSyntax, providingPeersOf declaration: some DeclSyntaxProtocol,
        in context: some MacroExpansionContext
    ) throws -> [DeclSyntax] {
        []
    }
}

/// `#Unique<T>([\.a, \.b], …)` and `#Index<T>([\.a], …)`: the compiler checks their key paths
/// against `T`; `@Model` reads them from the class body into the entity's constraints and
/// indexes. They declare nothing themselves.
public struct ConstraintMacro: DeclarationMacro {
    public static func expansion(
        of node: some FreestandingMacroExpansionSyntax, in context: some MacroExpansionContext
    ) throws -> [DeclSyntax] {
        []
    }
}
