import SwiftCompilerPlugin
import SwiftSyntaxMacros

/// The compiler plug-in that expands Logbook's SwiftData-style macros.
@main
struct LogbookMacrosPlugin: CompilerPlugin {
    let providingMacros: [any Macro.Type] = [
        ModelMacro.self,
        PersistedPropertyMacro.self,
        MarkerMacro.self,
        ConstraintMacro.self,
        ModelActorMacro.self
    ]
}
