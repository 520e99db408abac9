// The model the record-codec target and its seeds share: an entity with an attribute of
// every type and a to-one relationship (with its to-many inverse).
import LogbookGraph

public func everythingModel() throws -> ManagedObjectModel {
    try ManagedObjectModel {
        EntityDescription("Everything") {
            AttributeDescription("string", .string, optional: true)
            AttributeDescription("int16", .int16, optional: true)
            AttributeDescription("int32", .int32, optional: true)
            AttributeDescription("int64", .int64, optional: true)
            AttributeDescription("double", .double, optional: true)
            AttributeDescription("float", .float, optional: true)
            AttributeDescription("bool", .bool, optional: true)
            AttributeDescription("date", .date, optional: true)
            AttributeDescription("data", .data, optional: true)
            AttributeDescription("uuid", .uuid, optional: true)
            AttributeDescription("url", .url, optional: true)
            AttributeDescription("decimal", .decimal, optional: true)
            RelationshipDescription("other", to: "Everything", inverse: "others")
            RelationshipDescription("others", to: "Everything", inverse: "other", toMany: true)
        }
    }
}
