// swift-tools-version: 6.1
// libFuzzer targets for the decoders that read what is on disk or what a user types:
// the frame reader, the checkpoint decoder, the manifest decoder, the record codec and the
// predicate parser. A package of its own, built with the fuzzer and address sanitizers:
//
//   swift build -c release --package-path Fuzz -Xswiftc -sanitize=fuzzer,address \
//       -Xswiftc -parse-as-library -Xswiftc -enable-testing --product FuzzFrames
//   Fuzz/.build/release/FuzzFrames Fuzz/Corpus/frames -max_total_time=60
//
// or simply `Fuzz/run` (every target; LOGBOOK_FUZZ_SECONDS sets each one's time).
import PackageDescription

let fuzzTargets = ["FuzzFrames", "FuzzCheckpoint", "FuzzManifest", "FuzzRecordCodec", "FuzzPredicate"]

let package = Package(
    name: "LogbookFuzz",
    platforms: [.macOS(.v15)],
    dependencies: [.package(name: "Logbook", path: "..")],
    targets: fuzzTargets.map { name in
        .executableTarget(
            name: name,
            dependencies: [
                "FuzzDriver", "FuzzModel",
                .product(name: "LogbookEngine", package: "Logbook"),
                .product(name: "LogbookGraph", package: "Logbook")
            ]
        )
    } + [
        .target(name: "FuzzDriver"),
        .target(name: "FuzzModel", dependencies: [.product(name: "LogbookGraph", package: "Logbook")]),
        // Writes the seed corpus (Corpus/) from real encoder output; built without sanitizers.
        .executableTarget(
            name: "FuzzSeeds",
            dependencies: [
                "FuzzModel",
                .product(name: "LogbookEngine", package: "Logbook"),
                .product(name: "LogbookGraph", package: "Logbook")
            ]
        )
    ],
    swiftLanguageModes: [.v6]
)
