/// The part of a fetch's results a request keeps: `fetchOffset` results skipped, then at most
/// `fetchLimit` (0: no limit), as in Core Data. Every fetch path applies it through this type:
/// to its keys, its objects, its dictionaries or its count.
///
/// ```swift
/// var request = FetchRequest<Item>()
/// request.fetchOffset = 20
/// request.fetchLimit = 10
/// request.window.stopAfter                  // 30: a walk in the result's order may stop there
/// request.window.apply(to: 0..<100)         // 20..<30
/// ```
struct ResultWindow: Sendable, Equatable {
    /// Results skipped first.
    var offset: Int
    /// At most this many results after the offset (0: no limit).
    var limit: Int

    /// Every result.
    static let all = ResultWindow(offset: 0, limit: 0)

    /// How many results a walk in the result's order must produce to fill the window (offset
    /// and limit); nil without a limit.
    var stopAfter: Int? { limit > 0 ? offset + limit : nil }

    /// Whether the window keeps every result.
    var keepsAll: Bool { offset == 0 && limit == 0 }

    /// The window of `results`.
    func apply<C: Collection>(to results: C) -> C.SubSequence {
        var slice = results[...]
        if offset > 0 { slice = slice.dropFirst(offset) }
        if limit > 0 { slice = slice.prefix(limit) }
        return slice
    }

    /// The window of an array, in place.
    func apply<T>(to results: inout [T]) {
        if offset > 0 { results.removeFirst(min(offset, results.count)) }
        if limit > 0 && results.count > limit { results.removeLast(results.count - limit) }
    }

    /// How many of `count` results the window keeps.
    func count(of count: Int) -> Int {
        var n = count
        if offset > 0 { n = max(0, n - offset) }
        if limit > 0 { n = min(n, limit) }
        return n
    }
}

extension FetchRequest {
    /// The request's offset and limit as one value.
    var window: ResultWindow {
        get { ResultWindow(offset: fetchOffset, limit: fetchLimit) }
        set {
            fetchOffset = newValue.offset
            fetchLimit = newValue.limit
        }
    }
}
