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
    /// Entities (with inheritance: `parentEntity`, `isAbstract`), attributes (type, optional,
    /// transient, default, min/max, regular expression, indexed, renaming identifier, user
    /// info), relationships (destination, inverse, to-many, delete rule, min/max count, user
    /// info), fetch indexes, fetched properties, fetch request templates, configurations and
    /// uniqueness constraints are read. What Logbook reads but does not act on is listed in
    /// `warnings`, never a refusal; only what would change the data's meaning is refused.
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
        try self.init(
            entities: reader.entities, fetchRequestTemplates: reader.templates, configurations: reader.configurations,
            warnings: reader.warnings)
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

/// Reads `<model>`, `<entity>`, `<attribute>`, `<relationship>`, `<fetchIndexElement>`,
/// `<fetchedProperty>`, `<fetchRequest>`, `<configuration>`, `<uniquenessConstraint>` and
/// `<userInfo>`; everything else (the diagram's `<elements>`) is layout and skipped.
final class CoreDataModelXML: NSObject, XMLParserDelegate {
    let classes: [String: ManagedObject.Type]
    var entities: [EntityDescription] = []
    var templates: [String: (entityName: String, predicateFormat: String?)] = [:]
    var configurations: [String: [String]] = [:]
    var warnings: [String] = []
    var error: LogbookError?
    var sawModel = false
    private var current: EntityDescription?
    private var fetchIndexes: [[String]] = []
    private var fetchIndex: [String]?
    /// What a `<userInfo>` entry belongs to: the entity, or its last attribute or relationship.
    private enum Owner { case entity, attribute, relationship }
    private var owner: Owner = .entity
    private var fetchedProperty: String?
    private var configuration: String?
    private var constraint: [String]?

    init(classes: [String: ManagedObject.Type]) { self.classes = classes }

    func parser(
        _ parser: XMLParser, didStartElement element: String, namespaceURI: String?, qualifiedName: String?,
        attributes a: [String: String] = [:]
    ) {
        guard error == nil else { return }
        switch element {
        case "model": sawModel = true
        case "entity": startEntity(parser, a)
        case "attribute": attribute(parser, a)
        case "relationship": relationship(parser, a)
        case "fetchIndex": fetchIndex = []
        case "fetchIndexElement":
            if let property = a["property"] { fetchIndex?.append(property) }
        case "fetchedProperty":
            fetchedProperty = a["name"]
        case "fetchRequest":
            guard let name = a["name"], let entity = a["entity"] else { return }
            if let property = fetchedProperty, current != nil {
                current!.fetchedProperties.append(
                    FetchedPropertyDescription(property, destination: entity, predicate: a["predicateString"]))
            } else if current == nil {
                templates[name] = (entity, a["predicateString"])
            }
        case "configuration":
            configuration = a["name"]
            if let c = configuration { configurations[c, default: []] = configurations[c] ?? [] }
        case "memberEntity":
            if let c = configuration, let name = a["name"] { configurations[c, default: []].append(name) }
        case "uniquenessConstraint": constraint = []
        case "constraint":
            if let v = a["value"] { constraint?.append(v) }
        case "entry":
            guard let key = a["key"], let value = a["value"], current != nil else { return }
            switch owner {
            case .entity: current!.userInfo[key] = value
            case .attribute:
                if !current!.attributes.isEmpty {
                    current!.attributes[current!.attributes.count - 1].userInfo[key] = value
                }
            case .relationship:
                if !current!.relationships.isEmpty {
                    current!.relationships[current!.relationships.count - 1].userInfo[key] = value
                }
            }
        default: break
        }
    }

    private func startEntity(_ parser: XMLParser, _ a: [String: String]) {
        guard let name = a["name"] else {
            fail(parser, "an entity has no name")
            return
        }
        // `.Name` is Xcode's "current module" form of a class name.
        let className = a["representedClassName"].map { $0.hasPrefix(".") ? String($0.dropFirst()) : $0 }
        let cls = classes[name] ?? className.flatMap { classes[$0] }
        current = EntityDescription(
            name, class: cls, parent: a["parentEntity"], abstract: a["isAbstract"] == "YES",
            renamedFrom: a["renamingIdentifier"] ?? a["elementID"])
        fetchIndexes = []
        owner = .entity
    }

    private func attribute(_ parser: XMLParser, _ a: [String: String]) {
        // Xcode writes a transient attribute of type Undefined without an `attributeType`.
        guard current != nil, let name = a["name"],
            let typeName = a["attributeType"] ?? (a["transient"] == "YES" ? "Undefined" : nil)
        else {
            fail(parser, "an attribute lacks a name or type")
            return
        }
        let entity = current!.name
        var transient = a["transient"] == "YES"
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
        case "Undefined":
            // Core Data allows Undefined only for transient attributes: values kept in memory.
            type = .data
            transient = true
            warnings.append("\(entity).\(name): an Undefined attribute is read as transient Binary data")
        case "Object ID":
            type = .url
            warnings.append(
                "\(entity).\(name): an Object ID attribute is read as a URI (an object ID's URI representation)")
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
            case .date: defaultValue = Double(d).map { Date(timeIntervalSinceReferenceDate: $0) }
            default: defaultValue = nil
            }
            if defaultValue == nil {
                warnings.append("\(entity).\(name): the default value \"\(d)\" is not a \(type) and is ignored")
            }
        }

        var attribute = AttributeDescription(
            name, type, optional: a["optional"] == "YES", default: defaultValue,
            indexed: a["indexed"] == "YES" && !transient, transient: transient, rules: rules,
            renamedFrom: a["renamingIdentifier"] ?? a["elementID"])
        if a["derived"] == "YES" { attribute.derivationExpression = a["derivationExpression"] }
        attribute.preservesValueInHistoryOnDeletion = a["preserveAfterDeletion"] == "YES"
        current!.attributes.append(attribute)
        owner = .attribute
    }

    private func relationship(_ parser: XMLParser, _ a: [String: String]) {
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
        let toMany = a["toMany"] == "YES"
        // A to-one is written `maxCount="1"` (and `minCount="1"` beside `optional="YES"` in old
        // files): the counts bound to-many relationships only.
        current!.relationships.append(
            RelationshipDescription(
                name, to: destination, inverse: a["inverseName"], toMany: toMany, ordered: a["ordered"] == "YES",
                deleteRule: rule,
                optional: a["optional"] == "YES", minCount: toMany ? Int(a["minCount"] ?? "") ?? 0 : 0,
                maxCount: toMany ? Int(a["maxCount"] ?? "") ?? .max : .max,
                renamedFrom: a["renamingIdentifier"] ?? a["elementID"]))
        owner = .relationship
    }

    func parser(_ parser: XMLParser, didEndElement element: String, namespaceURI: String?, qualifiedName: String?) {
        guard error == nil else { return }
        switch element {
        case "attribute", "relationship": owner = .entity
        case "fetchedProperty": fetchedProperty = nil
        case "fetchIndex":
            if let f = fetchIndex, !f.isEmpty { fetchIndexes.append(f) }
            fetchIndex = nil
        case "uniquenessConstraint":
            if let c = constraint, !c.isEmpty { current?.uniquenessConstraints.append(c) }
            constraint = nil
        case "configuration": configuration = nil
        case "entity":
            guard var entity = current else { return }
            for index in fetchIndexes {
                if index.count > 1 {
                    entity.compoundIndexes.append(index)
                } else if let i = entity.attributes.firstIndex(where: { $0.name == index[0] }) {
                    if !entity.attributes[i].isTransient { entity.attributes[i].isIndexed = true }
                } else if let r = entity.relationships.firstIndex(where: { $0.name == index[0] }) {
                    entity.relationships[r].isIndexed = true
                }
            }
            entities.append(entity)
            current = nil
        default: break
        }
    }

    private func fail(_ parser: XMLParser, _ message: String) {
        error = LogbookError(.invalidModel, message + " (line \(parser.lineNumber))")
        parser.abortParsing()
    }
}
