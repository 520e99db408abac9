// swift-tools-version: 6.1
import CompilerPluginSupport
import PackageDescription

let package = Package(
    name: "Logbook",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "Logbook", targets: ["Logbook"]),
        .library(name: "LogbookEngine", targets: ["LogbookEngine"]),
        .executable(name: "logbook", targets: ["LogbookCLI"])
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        // The `@Model` family of macros (SwiftData's API); built for the host, never linked.
        .package(url: "https://github.com/swiftlang/swift-syntax", from: "603.0.1"),
        // `swift package generate-documentation --target Logbook` (a plugin: nothing is linked).
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0")
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
            dependencies: ["CLZ4", "CLogbookSupport"],
            swiftSettings: [.enableUpcomingFeature("ExistentialAny")]
        ),
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
        // The object graph: Core Data's model on the engine, and SwiftData's API over it.
        .target(
            name: "Logbook",
            dependencies: ["LogbookEngine", "LogbookMacros"],
            swiftSettings: [.enableUpcomingFeature("ExistentialAny")]
        ),
        .testTarget(
            name: "LogbookTests",
            dependencies: ["Logbook", "LogbookEngine"]
        ),
        // SwiftData code, unchanged but for `import Logbook`.
        .testTarget(
            name: "SwiftDataStyleTests",
            dependencies: ["Logbook"]
        ),
        // The `logbook` tool (named so that it does not clash with the `Logbook` module).
        .executableTarget(
            name: "LogbookCLI",
            dependencies: [
                "Logbook",
                "LogbookEngine",
                .product(name: "ArgumentParser", package: "swift-argument-parser")
            ]
        ),
        .testTarget(
            name: "LogbookCLITests",
            dependencies: ["LogbookCLI", "Logbook", "LogbookEngine"]
        ),
        // A child process for the kill -9 crash tests: commits and acknowledges over a pipe.
        .executableTarget(
            name: "LogbookCrashHelper",
            dependencies: ["LogbookEngine"]
        ),
        .testTarget(
            name: "LogbookEngineTests",
            dependencies: ["LogbookEngine", "CLogbookSupport", "LogbookCrashHelper"]
        )
    ],
    swiftLanguageModes: [.v6]
)
