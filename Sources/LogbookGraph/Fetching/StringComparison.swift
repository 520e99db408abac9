import Foundation

/// How a sort compares strings.
public enum StringComparison: Sendable, Hashable {
    /// By Unicode scalar values, as `<` on `String` does (the order of the store's indexes).
    case plain
    /// Ignoring case (Core Data's `caseInsensitiveCompare:`).
    case caseInsensitive
    /// Ignoring accents and other diacritics.
    case diacriticInsensitive
    /// Ignoring both.
    case caseAndDiacriticInsensitive
    /// The current locale's order (`localizedCompare:`).
    case localized
    /// The order the Finder uses: localized, case-insensitive, numbers by value
    /// (`localizedStandardCompare:`, "Item 9" before "Item 10").
    case localizedStandard

    var foldingOptions: String.CompareOptions? {
        switch self {
        case .caseInsensitive: [.caseInsensitive]
        case .diacriticInsensitive: [.diacriticInsensitive]
        case .caseAndDiacriticInsensitive: [.caseInsensitive, .diacriticInsensitive]
        default: nil
        }
    }
}
