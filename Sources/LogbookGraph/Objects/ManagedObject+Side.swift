/// An object's less-used state, kept out of the object (issue 48: a fetched object is the
/// largest part of a large fetch's memory).
///
/// Every object needs its layout, key, context and values; few need the rest at once: the
/// values as last saved (only once it changes), the fault batch it loads with and its place
/// there (only a batched fault), the record a fetch read for it and its place in that arena
/// (only a fault a fetch made), and the store version its values were read at. One reference,
/// `side`, holds whichever of them the object has, and `sideKind` says which:
///
/// | kind | `side` | `sideIndex` | base version |
/// |---|---|---|---|
/// | `none` | nil | – | 0 |
/// | `version` | a `VersionTag` shared by the objects read at that version | – | the tag's |
/// | `arena` | the fetch's `RecordArena` | the record's index there | the arena's |
/// | `batch` | the `FaultBatch` | the slot there | 0 |
/// | `extras` | an `ObjectExtras` of the object's own, with every field | – | the box's |
///
/// An object moves to `extras` when it needs what its kind cannot say (values as last saved,
/// a version other than its arena's); it stays there. The accessors below keep the names the
/// fields had, so the code that reads and writes them is unchanged.
extension ManagedObject {
    enum Side: UInt8 {
        case none, version, arena, batch, extras
    }

    /// An object's values, or its place in its side while it has none (8 bytes: the index
    /// takes the array's spare bits).
    enum Payload {
        case values([FieldValue])
        case index(UInt32)
    }

    /// Attribute slots, then to-one relationship slots. Empty while the object is a fault.
    ///
    /// Giving an object values while its side is an arena or a batch, whose place in it
    /// `payload` held, moves that place to the object's own box first (`ownExtras()`): the
    /// loads of faults leave their arena or batch before, so that this is rare.
    var slots: [FieldValue] {
        // Lent, not returned (a getter's result is owned: a retain and a release of the
        // array on every read of a value).
        @inline(__always) _read {
            switch payload {
            case .values(let values): yield values
            case .index: yield[]
            }
        }
        set {
            keepPlace()
            payload = .values(newValue)
        }
        _modify {
            keepPlace()
            // The array moved out (no retain), changed as its only reference (no copy), and
            // moved back.
            var held = Payload.index(0)
            swap(&held, &payload)
            var values: [FieldValue]
            switch consume held {
            case .values(let moved): values = moved
            case .index: values = []
            }
            defer { payload = .values(values) }
            yield &values
        }
    }

    /// The object's place in `side` when that is a fetch's arena (its record's offset or
    /// number) or a fault batch (its slot there); held in `payload`, which a fault does not
    /// need for values.
    var sideIndex: UInt32 {
        @inline(__always) get {
            if case .index(let index) = payload { return index }
            return 0
        }
        set { payload = .index(newValue) }
    }

    /// Whether `payload` holds values (then a place in an arena or batch goes to the box).
    private var holdsValues: Bool {
        if case .values(let values) = payload { return !values.isEmpty }
        return false
    }

    /// Before `payload` takes values: a place it holds moves to the object's box.
    @inline(__always)
    private func keepPlace() {
        if sideKind == .arena || sideKind == .batch, case .index = payload { _ = ownExtras() }
    }

    /// The values as last saved (or fetched), kept once the object changes.
    var committed: [FieldValue]? {
        @inline(__always) get { sideKind == .extras ? extras.committed : nil }
        set {
            if sideKind != .extras && newValue == nil { return }
            ownExtras().committed = newValue
        }
    }

    /// For a fault from a batched fetch: the objects that load with it (its place there is
    /// `batchSlot`).
    var batch: FaultBatch? {
        get {
            switch sideKind {
            case .batch: unsafeDowncast(side.unsafelyUnwrapped, to: FaultBatch.self)
            case .extras: extras.batch
            default: nil
            }
        }
        set {
            switch (sideKind, newValue) {
            case (.batch, nil):
                side = nil
                sideKind = .none
            case (.none, let batch?) where !holdsValues:
                side = batch
                sideKind = .batch
                sideIndex = UInt32(bitPattern: -1)
            case (.extras, _), (_, _?): ownExtras().batch = newValue
            default: break
            }
        }
    }

    /// The object's place in `batch` (-1: none).
    var batchSlot: Int32 {
        get {
            switch sideKind {
            case .batch: Int32(bitPattern: sideIndex)
            case .extras: extras.batchSlot
            default: -1
            }
        }
        set {
            switch sideKind {
            case .batch: sideIndex = UInt32(bitPattern: newValue)
            case .extras: extras.batchSlot = newValue
            default: if newValue != -1 { ownExtras().batchSlot = newValue }
            }
        }
    }

    /// The store version the values in `committed` (or `slots`, while unchanged) were read at:
    /// a save checks for a conflict when another save wrote the record after it.
    var baseVersion: UInt64 {
        get {
            switch sideKind {
            case .none, .batch: 0
            case .version: unsafeDowncast(side.unsafelyUnwrapped, to: VersionTag.self).version
            case .arena: recordArena.version
            case .extras: extras.baseVersion
            }
        }
        set {
            switch sideKind {
            case .extras: extras.baseVersion = newValue
            case _ where newValue == baseVersion: break
            case .none, .version: setVersionTag(newValue)
            case .arena, .batch: ownExtras().baseVersion = newValue
            }
        }
    }

    /// For a fault from a direct fetch: its record's bytes, read already (typed reads decode
    /// single values from them; anything else decodes the whole record). Set to nil when the
    /// bytes are no longer the object's values (it was loaded or refreshed).
    var rawArena: RecordArena? {
        get {
            switch sideKind {
            case .arena: recordArena
            case .extras: extras.arena
            default: nil
            }
        }
        set {
            precondition(newValue == nil, "an object is given its record's bytes by attachRecord(_:index:)")
            switch sideKind {
            case .arena: setVersionTag(recordArena.version)
            case .extras: extras.arena = nil
            default: break
            }
        }
    }

    /// The index of the object's record in `rawArena`.
    var rawIndex: UInt32 {
        switch sideKind {
        case .arena: sideIndex
        case .extras: extras.arenaIndex
        default: 0
        }
    }

    /// Gives a new fault its record's bytes: record `index` of `arena` (read at the arena's
    /// version, which becomes the object's base version).
    @inline(__always)
    func attachRecord(_ arena: RecordArena, index: Int) {
        if sideKind == .none && !holdsValues {
            side = arena
            sideKind = .arena
            sideIndex = UInt32(index)
        } else {
            let box = ownExtras()
            box.arena = arena
            box.arenaIndex = UInt32(index)
            box.baseVersion = arena.version
        }
    }

    /// `side` as the arena, when `sideKind` is `.arena`.
    @inline(__always)
    var recordArena: RecordArena { unsafeDowncast(side.unsafelyUnwrapped, to: RecordArena.self) }

    /// One attribute from the object's record in the fetch's arena (`sideKind` is `.arena`),
    /// without a retain and release of the arena: the object holds it through `side`, which
    /// the read does not change (a typed read of a million fetched objects pays a pair less
    /// each).
    @inline(__always)
    func arenaSlot(_ slot: Int) -> FieldValue? {
        let arena = Unmanaged<RecordArena>.fromOpaque(
            UnsafeRawPointer(Unmanaged.passUnretained(side.unsafelyUnwrapped).toOpaque()))
        return arena._withUnsafeGuaranteedRef { $0.slot(slot, index: sideIndex, layout: layout) }
    }

    @inline(__always)
    private var extras: ObjectExtras { unsafeDowncast(side.unsafelyUnwrapped, to: ObjectExtras.self) }

    /// `version` as the base version of an object whose side holds nothing else: a tag shared
    /// with the objects its context last read at that version.
    private func setVersionTag(_ version: UInt64) {
        if version == 0 {
            side = nil
            sideKind = .none
        } else {
            side = token.versionTag(version)
            sideKind = .version
        }
    }

    /// The object's own box, made (with what its side held) when it has none yet.
    @inline(never)
    private func ownExtras() -> ObjectExtras {
        if sideKind == .extras { return extras }
        let box = ObjectExtras()
        box.baseVersion = baseVersion
        switch sideKind {
        case .arena:
            box.arena = recordArena
            box.arenaIndex = sideIndex
        case .batch:
            box.batch = unsafeDowncast(side.unsafelyUnwrapped, to: FaultBatch.self)
            box.batchSlot = Int32(bitPattern: sideIndex)
        default: break
        }
        side = box
        sideKind = .extras
        return box
    }
}

/// The side state of an object that needs more than its kind of side can say (see
/// `ManagedObject.Side`): made once the object changes, or is given a version other than its
/// arena's.
final class ObjectExtras {
    var committed: [FieldValue]?
    var batch: FaultBatch?
    var batchSlot: Int32 = -1
    var arenaIndex: UInt32 = 0
    var baseVersion: UInt64 = 0
    var arena: RecordArena?
}

/// A store version, shared by the objects of a context read at it (an object's base version
/// without a word of its own).
final class VersionTag {
    let version: UInt64
    init(_ version: UInt64) { self.version = version }
}

/// An entity of a context: what each of the context's objects of the entity holds, in one
/// reference, for its layout and its context's token. The context makes one per entity when
/// it is made and holds them; each object holds its own, which keeps the token (and so the
/// object's identity) and the layout alive after the context goes.
final class ObjectBinding {
    let layout: EntityLayout
    let token: ManagedObjectContext.Token

    init(layout: EntityLayout, token: ManagedObjectContext.Token) {
        self.layout = layout
        self.token = token
    }
}
