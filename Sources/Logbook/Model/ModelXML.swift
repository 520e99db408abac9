import Foundation

#if canImport(FoundationXML)
    import FoundationXML
#endif

extension ManagedObjectModel {
    /// Loads a model from the XML that Xcode writes for a Core Data model, so that Core Data
    /// users bring their models as they are. `url` is the `.xcdatamodeld` directory (its
    /// current version is used), an `.xcdatamodel` directory, or its `contents` file.
    ///
    /// ```swift
    /// let model = try ManagedObjectModel(contentsOf: URL(fileURLWithPath: "Model.xcdatamodeld"),
    ///                                    classes: ["Person": Person.self])
    /// ```
    ///
    /// Entities, attributes (type, optional, default, min/max, regular expression, indexed,
    /// renaming identifier), relationships (destination, inverse, to-many, delete rule, min/max
    /// count) and fetch indexes are read; what Logbook does not model (configurations, fetched
    /// properties, uniqueness constraints, entity inheritance) is refused or ignored as noted in
    /// the error.
    public convenience init(contentsOf url: URL, classes: [String: ManagedObject.Type] = [:]) throws {
        let file = try Self.contentsFile(url)
        guard let data = FileManager.default.contents(atPath: file.path) else {
            throw LogbookError(.invalidModel, "cannot read \(file.path)")
        }
        try self.init(xml: data, classes: classes)
    }

    /// Loads a model from the XML of an `.xcdatamodel`'s `contents` file.
    public convenience init(xml data: Data, classes: [String: ManagedObject.Type] = [:]) throws {
        let reader = CoreDataModelXML(classes: classes)
        let parser = XMLParser(data: data)
        parser.delegate = reader
        guard parser.parse(), reader.error == nil else {
            throw reader.error
                ?? LogbookError(
                    .invalidModel,
                    "the model XML is malformed: \(parser.parserError.map { "\($0)" } ?? "unknown error") at line \(parser.lineNumber)"
                )
        }
        guard reader.sawModel else {
            throw LogbookError(.invalidModel, "the XML is not a Core Data model (no <model> element)")
        }
        try self.init(entities: reader.entities)
    }

    static func contentsFile(_ url: URL) throws -> URL {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: url.path, isDirectory: &isDirectory) else {
            throw LogbookError(.invalidModel, "no model at \(url.path)")
        }
        guard isDirectory.boolValue else { return url }
        if url.pathExtension == "xcdatamodeld" {
            // The current version, else the only one.
            var version: String?
            let current = url.appendingPathComponent(".xccurrentversion")
            if let plist = FileManager.default.contents(atPath: current.path),
                let dict = try? PropertyListSerialization.propertyList(from: plist, format: nil) as? [String: Any]
            {
                version = dict["_XCCurrentVersionName"] as? String
            }
            let versions = ((try? FileManager.default.contentsOfDirectory(atPath: url.path)) ?? []).filter {
                $0.hasSuffix(".xcdatamodel")
            }.sorted()
            guard let chosen = version ?? versions.last else {
                throw LogbookError(.invalidModel, "\(url.path) holds no .xcdatamodel")
            }
            return url.appendingPathComponent(chosen).appendingPathComponent("contents")
        }
        return url.appendingPathComponent("contents")
    }
}

/// Reads `<model>`, `<entity>`, `<attribute>`, `<relationship>`, `<fetchIndexElement>`.
final class CoreDataModelXML: NSObject, XMLParserDelegate {
    let classes: [String: ManagedObject.Type]
    var entities: [EntityDescription] = []
    var error: LogbookError?
    var sawModel = false
    private var current: EntityDescription?
    private var indexed: Set<String> = []

    init(classes: [String: ManagedObject.Type]) { self.classes = classes }

    func parser(
        _ parser: XMLParser, didStartElement element: String, namespaceURI: String?, qualifiedName: String?,
        attributes a: [String: String] = [:]
    ) {
        guard error == nil else { return }
        switch element {
        case "model": sawModel = true
        case "entity":
            guard let name = a["name"] else {
                fail(parser, "an entity has no name")
                return
            }
            if a["parentEntity"] != nil {
                fail(parser, "entity \(name) inherits from \(a["parentEntity"]!): entity inheritance is not supported")
                return
            }
            let cls = classes[name] ?? a["representedClassName"].flatMap { classes[$0] }
            current = EntityDescription(name, class: cls, renamedFrom: a["elementID"])
            indexed = []
        case "attribute":
            guard current != nil, let name = a["name"], let typeName = a["attributeType"] else {
                fail(parser, "an attribute lacks a name or type")
                return
            }
            let type: AttributeType
            switch typeName {
            case "String": type = .string
            case "Integer 16": type = .int16
            case "Integer 32": type = .int32
            case "Integer 64": type = .int64
            case "Double": type = .double
            case "Float": type = .float
            case "Boolean": type = .bool
            case "Date": type = .date
            case "Binary": type = .data
            case "UUID": type = .uuid
            case "URI": type = .url
            case "Decimal": type = .decimal
            case "Transformable":
                type = .transformable(transformer: a["valueTransformerName"] ?? "NSSecureUnarchiveFromDataTransformer")
            default:
                fail(parser, "attribute \(name) has type \(typeName), which Logbook does not support")
                return
            }
            var rules: [ValidationRule] = []
            let minV = a["minValueString"].flatMap(Double.init)
            let maxV = a["maxValueString"].flatMap(Double.init)
            if minV != nil || maxV != nil {
                if type == .string || type == .data {
                    rules.append(.length(Int(minV ?? 0)...Int(maxV ?? Double(Int.max / 2))))
                } else {
                    rules.append(.range((minV ?? -.greatestFiniteMagnitude)...(maxV ?? .greatestFiniteMagnitude)))
                }
            }
            if let pattern = a["regularExpressionString"] { rules.append(.pattern(pattern)) }
            var defaultValue: (any Sendable)?
            if let d = a["defaultValueString"] {
                switch type {
                case .string: defaultValue = d
                case .int16, .int32, .int64: defaultValue = Int(d)
                case .double, .float: defaultValue = Double(d)
                case .bool: defaultValue = (d == "YES" || d == "1" || d == "true")
                case .decimal: defaultValue = Decimal(string: d)
                case .uuid: defaultValue = UUID(uuidString: d)
                case .url: defaultValue = URL(string: d)
                default: defaultValue = nil
                }
            }
            current!.attributes.append(
                AttributeDescription(
                    name, type, optional: a["optional"] == "YES", default: defaultValue,
                    indexed: a["indexed"] == "YES", rules: rules, renamedFrom: a["elementID"]))
        case "relationship":
            guard current != nil, let name = a["name"], let destination = a["destinationEntity"] else {
                fail(parser, "a relationship lacks a name or destination")
                return
            }
            let rule: DeleteRule
            switch a["deletionRule"] ?? "Nullify" {
            case "Cascade": rule = .cascade
            case "Deny": rule = .deny
            case "No Action": rule = .noAction
            default: rule = .nullify
            }
            if a["ordered"] == "YES" {
                fail(parser, "relationship \(name) is ordered, which Logbook does not support")
                return
            }
            current!.relationships.append(
                RelationshipDescription(
                    name, to: destination, inverse: a["inverseName"], toMany: a["toMany"] == "YES", deleteRule: rule,
                    optional: a["optional"] == "YES", minCount: Int(a["minCount"] ?? "") ?? 0,
                    maxCount: Int(a["maxCount"] ?? "") ?? .max,
                    renamedFrom: a["elementID"]))
        case "fetchIndexElement":
            if let property = a["property"] { indexed.insert(property) }
        default: break
        }
    }

    func parser(_ parser: XMLParser, didEndElement element: String, namespaceURI: String?, qualifiedName: String?) {
        guard element == "entity", var entity = current else { return }
        for i in entity.attributes.indices where indexed.contains(entity.attributes[i].name) {
            entity.attributes[i].isIndexed = true
        }
        entities.append(entity)
        current = nil
    }

    private func fail(_ parser: XMLParser, _ message: String) {
        error = LogbookError(.invalidModel, message + " (line \(parser.lineNumber))")
        parser.abortParsing()
    }
}
