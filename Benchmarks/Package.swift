// swift-tools-version: 6.1
// Benchmarks of Logbook, side by side with GRDB (SQLite). A package of its own so that users
// of the library never fetch these dependencies.
import PackageDescription

let package = Package(
    name: "LogbookBenchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "Logbook", path: ".."),
        .package(url: "https://github.com/groue/GRDB.swift", exact: "7.10.0"),
    ],
    targets: [
        // The same workloads on Logbook and on GRDB, in one process run, printed as one table.
        .executableTarget(
            name: "PeerRunner",
            dependencies: [
                .product(name: "Logbook", package: "Logbook"),
                .product(name: "LogbookEngine", package: "Logbook"),
                .product(name: "GRDB", package: "GRDB.swift"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
