// As `import CoreData` does, `import LogbookGraph` makes Foundation's types (`Date`, `UUID`,
// `URL`, `#Predicate`, `SortDescriptor`) visible to the files that use it.
@_exported import Foundation
