// `import Logbook`: everything — the object graph with Core Data's API (`LogbookGraph`), the
// SwiftData layer with its macros (`LogbookSwiftData`) — and, as `import SwiftData` and
// `import CoreData` do, Foundation's types (`Date`, `UUID`, `URL`, `#Predicate`).
//
// An app (or tool) that uses only the Core Data–style API can depend on the `LogbookGraph`
// product instead: it builds without swift-syntax, which the macros need.
@_exported import Foundation
@_exported import LogbookGraph
@_exported import LogbookSwiftData
