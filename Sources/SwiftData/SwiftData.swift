// `import SwiftData` on Linux: SwiftData's API, as Logbook offers it, under SwiftData's module
// name, so that an app's data code compiles with no change at all — module-qualified names
// (`SwiftData.Schema`) included. Like Apple's `import SwiftData`, it makes Foundation's types
// (`Date`, `UUID`, `#Predicate`) and Observation visible. On Apple platforms the name is
// Apple's framework's; this module exists only in packages built on Linux.
@_exported import Foundation
@_exported import Logbook
@_exported import Observation
