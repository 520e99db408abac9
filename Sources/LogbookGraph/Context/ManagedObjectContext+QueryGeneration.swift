import LogbookEngine

extension ManagedObjectContext {
    /// Pins the context to a version of the store (`.current`, or the token of another pinned
    /// context), or unpins it (`.unpinned`). A child context reads through its parent and
    /// cannot be pinned: that is an `.invalidArgument` error.
    public func setQueryGeneration(_ token: QueryGenerationToken) throws {
        if isHistorical {
            throw LogbookError(.readOnly, "a context as of a past version stays at that version")
        }
        if parent != nil && token.kind != .unpinned {
            throw LogbookError(
                .invalidArgument, "a child context reads through its parent; pin the parent to a query generation")
        }
        switch token.kind {
        case .current: pinnedSnapshot = container.store.snapshot()
        case .unpinned: pinnedSnapshot = nil
        case .pinned: pinnedSnapshot = token.snapshot
        }
    }

    /// The version the context is pinned to, nil when it is not pinned.
    public var queryGenerationToken: QueryGenerationToken? {
        pinnedSnapshot.map { QueryGenerationToken(kind: .pinned, snapshot: $0) }
    }
}
