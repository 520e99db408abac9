import Foundation
import LogbookEngine
import LogbookTestSupport
import Testing

@testable import LogbookGraph

/// A container on an encrypted store: its key from a provider, a second container sharing
/// the store only with the same key, and a change of key between two uses.
@Suite struct EncryptedContainerTests {
    func options(_ key: (any EncryptionKeyProvider)?) -> ContainerOptions {
        var options = ContainerOptions()
        options.encryptionKey = key
        return options
    }

    func open(_ store: TemporaryStore, _ key: (any EncryptionKeyProvider)?) throws -> PersistentContainer {
        try FileManager.default.createDirectory(atPath: store.directory, withIntermediateDirectories: true)
        return try PersistentContainer(
            name: "Test", model: documentModel(), directory: store.path, options: options(key))
    }

    func engineCode(_ error: any Error) -> EngineError.Code? {
        ((error as? LogbookError)?.underlying as? EngineError)?.code
    }

    @Test func aContainerWithAKeyWritesAnEncryptedStoreThatOpensOnlyWithIt() throws {
        let store = TemporaryStore()
        let key = EncryptionKey.random()
        let asked = Locked(0)
        let provider = KeyClosure {
            asked.withLock { $0 += 1 }
            return key
        }
        let container = try open(store, provider)
        #expect(asked.withLock { $0 } == 1)
        #expect(container.store.isEncrypted)
        let context = container.newContext(concurrencyType: .confinement)
        let m = try context.insert(Manager.self)
        m.firstName = "Grace"
        m.lastName = "Hopper"
        try context.save()

        // A second container in this process shares the store with the same key only.
        let second = try open(store, key)
        #expect(second.store === container.store)
        #expect { try open(store, nil) } throws: { engineCode($0) == .keyRequired }
        #expect { try open(store, EncryptionKey.random()) } throws: { engineCode($0) == .wrongKey }
        try second.close()
        try container.close()

        // No file holds the name in clear; another process's open needs the key as well.
        for name in listDirectory(store.path) {
            #expect(!Data(fileBytes(store.path + "/" + name)).contains(Data("Hopper".utf8)), "\(name)")
        }
        #expect { try open(store, nil) } throws: { engineCode($0) == .keyRequired }
        #expect { try open(store, EncryptionKey.random()) } throws: { engineCode($0) == .wrongKey }
        #expect { try ManagedObjectModel(recordedIn: store.path) } throws: { engineCode($0) == .keyRequired }
        #expect(
            try ManagedObjectModel(recordedIn: store.path, encryptionKey: key).entities.contains {
                $0.name == "Manager"
            })

        // A new key, then none: the data stays.
        let next = EncryptionKey.random()
        try PersistentContainer.changeEncryptionKey(ofStoreAt: store.path, from: key, to: next)
        #expect { try open(store, key) } throws: { engineCode($0) == .wrongKey }
        let reopened = try open(store, next)
        let reader = reopened.newContext(concurrencyType: .confinement)
        #expect(try reader.fetch(FetchRequest<Manager>()).map(\.lastName) == ["Hopper"])
        // Not while a container has the store open.
        #expect { try PersistentContainer.changeEncryptionKey(ofStoreAt: store.path, from: next, to: nil) } throws: {
            engineCode($0) == .locked
        }
        try reopened.close()
        try PersistentContainer.changeEncryptionKey(ofStoreAt: store.path, from: next, to: nil)
        let plain = try open(store, nil)
        #expect(!plain.store.isEncrypted)
        #expect(try plain.newContext(concurrencyType: .confinement).count(for: FetchRequest<Manager>()) == 1)
        try plain.close()
    }
}
