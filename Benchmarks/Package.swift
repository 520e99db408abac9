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
        .package(url: "https://github.com/ordo-one/benchmark", exact: "1.38.1", traits: ["MallocInterposer"])
    ],
    targets: [
        // The same workloads on Logbook and on GRDB, in one process run, printed as one table.
        .executableTarget(
            name: "PeerRunner",
            dependencies: [
                .product(name: "LogbookGraph", package: "Logbook"),
                .product(name: "LogbookEngine", package: "Logbook"),
                .product(name: "GRDB", package: "GRDB.swift")
            ]
        ),
        // Hot paths under ordo-one/benchmark, with thresholds checked in (Thresholds/):
        //   swift package benchmark                      # run
        //   swift package benchmark thresholds check     # fail on a regression
        .executableTarget(
            name: "LogbookBenchmarks",
            dependencies: [
                .product(name: "LogbookGraph", package: "Logbook"),
                .product(name: "LogbookEngine", package: "Logbook"),
                .product(name: "Benchmark", package: "benchmark")
            ],
            path: "Benchmarks/LogbookBenchmarks",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        )
    ],
    swiftLanguageModes: [.v6]
)
