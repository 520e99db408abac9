// As `import SwiftData` and `import CoreData` do, `import Logbook` makes Foundation's types
// (`Date`, `UUID`, `URL`, `#Predicate`, `SortDescriptor`) visible to the files that use it.
@_exported import Foundation
