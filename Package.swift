// swift-tools-version: 6.1
import CompilerPluginSupport
import PackageDescription

// The modules follow the architecture: the engine (`LogbookEngine`), the object graph with
// Core Data's API (`LogbookGraph`), SwiftData's layer with its macros (`LogbookSwiftData`),
// and `Logbook`, which re-exports both. The `logbook` tool and apps that use the Core
// Data–style API alone depend on `LogbookGraph`, and build without swift-syntax.

// `import SwiftData` on Linux (a module re-exporting Logbook under SwiftData's name): only where
// Apple's framework of that name does not exist.
#if os(Linux)
    let offersSwiftDataModule = true
#else
    let offersSwiftDataModule = false
#endif

let package = Package(
    name: "Logbook",
    platforms: [.macOS(.v15)],
    products: [
        // Everything: the object graph, and SwiftData's layer with its macros.
        .library(name: "Logbook", targets: ["Logbook"]),
        // The object graph with Core Data's API alone: no macros, no swift-syntax to build.
        .library(name: "LogbookGraph", targets: ["LogbookGraph"]),
        .library(name: "LogbookEngine", targets: ["LogbookEngine"]),
        // Stores kept in step through PostgreSQL (postgres-nio): a product of its own, so that
        // the others do not fetch or build it.
        .library(name: "LogbookSync", targets: ["LogbookSync"]),
        .executable(name: "logbook", targets: ["LogbookCLI"])
    ] + (offersSwiftDataModule ? [.library(name: "SwiftData", targets: ["SwiftData"])] : []),
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        // AES-256-GCM, HKDF and HMAC for encrypted stores (`StoreOptions.encryptionKey`).
        .package(url: "https://github.com/apple/swift-crypto", from: "4.5.2"),
        // `swift package generate-documentation --target LogbookGraph` (a plugin: nothing is linked).
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
        // The `@Model` family of macros (SwiftData's API): built for the host, never linked, and
        // only for what depends on `LogbookSwiftData`.
        .package(url: "https://github.com/swiftlang/swift-syntax", from: "603.0.1"),
        // PostgreSQL's wire protocol, for `LogbookSync` only.
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
        // TLS to the server (postgres-nio's own dependency), for `LogbookSync` only.
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        // The logger postgres-nio takes, for `LogbookSync` only.
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2")
    ],
    targets: [
        // Debian's liblz4-dev (`apt-get install liblz4-dev`).
        .systemLibrary(
            name: "CLZ4",
            pkgConfig: "liblz4",
            providers: [.apt(["liblz4-dev"]), .brew(["lz4"])]
        ),
        // CRC-32C with the CPU's CRC instructions where present.
        .target(name: "CLogbookSupport"),
        // The storage engine: bytes, keys, versions and transactions. Knows nothing of entities.
        .target(
            name: "LogbookEngine",
            dependencies: ["CLZ4", "CLogbookSupport", .product(name: "Crypto", package: "swift-crypto")],
            swiftSettings: [.enableUpcomingFeature("ExistentialAny")]
        ),
        // The object graph: Core Data's model, contexts, fetches, batch requests and history.
        .target(
            name: "LogbookGraph",
            dependencies: ["LogbookEngine"],
            swiftSettings: [.enableUpcomingFeature("ExistentialAny")]
        ),
        // SwiftData's API over the object graph.
        .target(
            name: "LogbookSwiftData",
            dependencies: ["LogbookGraph", "LogbookEngine", "LogbookMacros"],
            swiftSettings: [.enableUpcomingFeature("ExistentialAny")]
        ),
        // Sync through PostgreSQL: an outbox of each store's saves pushed to a change log on the
        // server, and the log pulled back in server order (docs/sync.md).
        .target(
            name: "LogbookSync",
            dependencies: [
                "LogbookGraph", "LogbookEngine", .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"), .product(name: "Logging", package: "swift-log")
            ],
            swiftSettings: [.enableUpcomingFeature("ExistentialAny")]
        ),
        // `import Logbook`: both layers, re-exported.
        .target(name: "Logbook", dependencies: ["LogbookGraph", "LogbookSwiftData"]),
        // `@Model`, `@Attribute`, `@Relationship`, `@Transient`, `#Unique`, `#Index` and
        // `@ModelActor`: SwiftData's macros, expanding to code against `Logbook`.
        .macro(
            name: "LogbookMacros",
            dependencies: [
                .product(name: "SwiftSyntax", package: "swift-syntax"),
                .product(name: "SwiftSyntaxMacros", package: "swift-syntax"),
                .product(name: "SwiftCompilerPlugin", package: "swift-syntax"),
                .product(name: "SwiftDiagnostics", package: "swift-syntax")
            ]
        ),
        // What the test targets share: temporary directories and stores, a seeded generator, the
        // fault-injecting file system. Only test targets depend on it.
        .target(
            name: "LogbookTestSupport",
            dependencies: ["LogbookEngine"],
            path: "Tests/LogbookTestSupport"
        ),
        // The context checker (a seeded generator of steps over several contexts, and the run
        // that checks invariants after each): the tests run it, the crash helper runs it to be
        // killed.
        .target(
            name: "LogbookContextCheck",
            dependencies: ["LogbookGraph", "LogbookEngine", "LogbookTestSupport"],
            path: "Tests/LogbookContextCheck"
        ),
        .testTarget(
            name: "LogbookTests",
            dependencies: [
                "LogbookGraph", "LogbookEngine", "LogbookTestSupport", "LogbookContextCheck", "LogbookCrashHelper"
            ]
        ),
        // The `logbook` tool (named so that it does not clash with the `Logbook` module).
        .executableTarget(
            name: "LogbookCLI",
            dependencies: [
                "LogbookGraph",
                "LogbookEngine",
                "LogbookSync",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                // `logbook bench sync` talks to the server directly (COPY, its schema).
                .product(name: "PostgresNIO", package: "postgres-nio"), .product(name: "Logging", package: "swift-log")
            ]
        ),
        .testTarget(
            name: "LogbookCLITests",
            dependencies: ["LogbookCLI", "LogbookGraph", "LogbookEngine"]
        ),
        // A child process for the kill -9 crash tests: commits and acknowledges over a pipe.
        .executableTarget(
            name: "LogbookCrashHelper",
            dependencies: ["LogbookEngine", "LogbookGraph", "LogbookContextCheck", "Logbook", "LogbookSync"]
        ),
        .testTarget(
            name: "LogbookEngineTests",
            dependencies: ["LogbookEngine", "CLogbookSupport", "LogbookCrashHelper", "LogbookTestSupport"]
        ),
        // SwiftData code, unchanged but for `import Logbook` (its sample app imports SwiftData
        // alone, a module that exists on Linux only).
        .testTarget(
            name: "SwiftDataStyleTests",
            dependencies: ["Logbook", "LogbookTestSupport", "LogbookCrashHelper"]
                + (offersSwiftDataModule ? ["SwiftData"] : []),
            exclude: offersSwiftDataModule ? [] : ["SampleApp.swift"]
        ),
        // Sync through a real PostgreSQL server (LOGBOOK_POSTGRES_URL: .ci/test starts one).
        .testTarget(
            name: "LogbookSyncTests",
            dependencies: ["LogbookSync", "LogbookGraph", "LogbookEngine", "LogbookTestSupport", "LogbookCrashHelper"]
        ),
        // What the macros write, and what they refuse, checked on source text.
        .testTarget(
            name: "LogbookMacrosTests",
            dependencies: [
                "LogbookMacros",
                .product(name: "SwiftSyntaxMacrosGenericTestSupport", package: "swift-syntax"),
                .product(name: "SwiftSyntaxMacroExpansion", package: "swift-syntax")
            ]
        )
    ],
    swiftLanguageModes: [.v6]
)

if offersSwiftDataModule {
    package.targets += [
        // SwiftData's module name on Linux: re-exports Logbook, Foundation and Observation.
        .target(name: "SwiftData", dependencies: ["Logbook"]),
        // App code that imports SwiftData alone, unchanged.
        .testTarget(name: "SwiftDataImportTests", dependencies: ["SwiftData"])
    ]
}
