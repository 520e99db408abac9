// As `import CoreData` does, `import LogbookGraph` makes Foundation's types (`Date`, `UUID`,
// `URL`, `#Predicate`, `SortDescriptor`) visible to the files that use it.
@_exported import Foundation

// The keys of encrypted stores (`ContainerOptions.encryptionKey`, SwiftData's
// `ModelConfiguration.encryptionKey`), without importing the engine.
@_exported import struct LogbookEngine.EncryptionKey
@_exported import protocol LogbookEngine.EncryptionKeyProvider
@_exported import struct LogbookEngine.KeyClosure
