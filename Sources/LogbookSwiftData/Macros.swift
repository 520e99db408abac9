import LogbookGraph
@_exported import Observation

// SwiftData's macros, expanded by the `LogbookMacros` plug-in into code against Logbook.

/// Makes a class a persistent model (SwiftData's `@Model`).
///
/// Stored properties become attributes (optionals are optional attributes; `Codable` values
/// are stored through a transformer); properties of `@Model` types, optionals of them and
/// arrays of them become relationships, with inverses given by `@Relationship(inverse:)` or
/// inferred when only one relationship points back. The object is created with its own
/// initializer, lives unattached until `ModelContext.insert(_:)`, and is `Observable`.
///
/// ```swift
/// @Model final class Book {
///     @Attribute(.unique) var isbn: String
///     var title: String
///     var author: Author?
///     @Transient var isExpanded = false
///     init(isbn: String, title: String) { self.isbn = isbn; self.title = title }
/// }
/// ```
@attached(
    member,
    names: named(_$backingData), named(persistentBackingData), named(schemaMetadata), named(schemaConstraints),
    named(init), named(_$observationRegistrar), named(_$notifyMutation), named(_$persistedMetadata)
)
@attached(memberAttribute)
@attached(extension, conformances: PersistentModel, Observable)
public macro Model() = #externalMacro(module: "LogbookMacros", type: "ModelMacro")

/// Put by `@Model` on each persisted property: not for use in source.
@attached(accessor, names: named(init), named(get), named(set))
@attached(peer, names: prefixed(_))
public macro _PersistedProperty(subclass: Bool = false) =
    #externalMacro(module: "LogbookMacros", type: "PersistedPropertyMacro")

/// Options of a persisted attribute (SwiftData's `@Attribute`).
///
/// ```swift
/// @Attribute(.unique) var isbn: String
/// @Attribute(originalName: "name") var title: String
/// @Attribute(.transformable(by: "ColorTransformer")) var color: Color
/// ```
@attached(peer)
public macro Attribute(
    _ options: Schema.Attribute.Option..., originalName: String? = nil, hashModifier: String? = nil
) = #externalMacro(module: "LogbookMacros", type: "MarkerMacro")

/// Options of a relationship (SwiftData's `@Relationship`).
///
/// ```swift
/// @Relationship(deleteRule: .cascade, inverse: \Book.author) var books: [Book] = []
/// ```
@attached(peer)
public macro Relationship(
    _ options: Schema.Relationship.Option..., deleteRule: Schema.Relationship.DeleteRule = .nullify,
    minimumModelCount: Int? = 0, maximumModelCount: Int? = 0, originalName: String? = nil,
    inverse: AnyKeyPath? = nil, hashModifier: String? = nil
) = #externalMacro(module: "LogbookMacros", type: "MarkerMacro")

/// Keeps a property of a `@Model` class out of the store (SwiftData's `@Transient`): it needs
/// a default value, and a fetched object starts with it.
@attached(peer)
public macro Transient() = #externalMacro(module: "LogbookMacros", type: "MarkerMacro")

/// Properties whose values no two objects of the model may share, each list on its own
/// (SwiftData's `#Unique`). Inserting an object whose values match a stored one updates the
/// stored one (an upsert), as in SwiftData.
///
/// ```swift
/// @Model final class Person {
///     #Unique<Person>([\.givenName, \.familyName], [\.email])
///     …
/// }
/// ```
@freestanding(declaration)
public macro Unique<T>(_ constraints: [PartialKeyPath<T>]...) =
    #externalMacro(module: "LogbookMacros", type: "ConstraintMacro")

/// Indexes of a model (SwiftData's `#Index`): one key path makes an index of that property,
/// several a compound index, used by fetches with equalities on its leading properties.
///
/// ```swift
/// #Index<Trip>([\.name], [\.startDate, \.endDate])
/// ```
@freestanding(declaration)
public macro Index<T>(_ indices: [PartialKeyPath<T>]...) =
    #externalMacro(module: "LogbookMacros", type: "ConstraintMacro")

/// Gives an actor a model context of its own, isolated to it (SwiftData's `@ModelActor`).
///
/// ```swift
/// @ModelActor actor Importer {
///     func importBooks(_ titles: [String]) throws {
///         for t in titles { modelContext.insert(Book(isbn: t, title: t)) }
///         try modelContext.save()
///     }
/// }
/// let importer = Importer(modelContainer: container)
/// try await importer.importBooks(["A", "B"])
/// ```
@attached(member, names: named(modelExecutor), named(modelContainer), named(init))
@attached(extension, conformances: ModelActor)
public macro ModelActor() = #externalMacro(module: "LogbookMacros", type: "ModelActorMacro")
