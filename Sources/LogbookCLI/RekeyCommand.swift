import ArgumentParser
import Foundation
import LogbookEngine
import LogbookGraph

struct RekeyCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rekey",
        abstract: "Encrypt a store, change its key, or decrypt it.",
        discussion: """
            Every live record is written again with the new key and one atomic switch makes the
            new files the store's: a crash before it leaves the store with its old key. The store
            must not be open in another process. --key-file names the current key (none for a
            store that is not encrypted); --new-key-file the new one; --decrypt leaves the store
            unencrypted. A key file holds 32 bytes: head -c 32 /dev/urandom > key
            """)
    @Argument(help: "The store directory.") var directory: String
    @OptionGroup var key: KeyOption
    @Option(
        name: .customLong("new-key-file"), help: ArgumentHelp("The new key: a file of 32 bytes.", valueName: "path"))
    var newKeyFile: String?
    @Flag(help: "Leave the store unencrypted.") var decrypt = false

    func validate() throws {
        guard (newKeyFile != nil) != decrypt else {
            throw ValidationError("give either --new-key-file PATH or --decrypt")
        }
    }

    func run() throws {
        do {
            var options = StoreOptions()
            options.encryptionKey = try key.key()
            options.createIfMissing = false
            let newKey = try newKeyFile.map { try EncryptionKey(contentsOfFile: $0) }
            let started = ContinuousClock.now
            try Store.changeKey(at: directory, options: options, to: newKey)
            let d = ContinuousClock.now - started
            let seconds = Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
            print("rekey seconds=\(String(format: "%.3f", seconds)) encrypted=\(newKey != nil)")
        } catch { fail(error) }
    }
}
