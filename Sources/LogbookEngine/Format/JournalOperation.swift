/// One decoded operation of a block. Ranges index into the block.
enum JournalOperation {
    case put(key: UInt64, value: Range<Int>, indexKeys: Range<Int>, indexKeyCount: Int)
    case delete(key: UInt64)
    case set(code: JournalFormat.OperationCode, set: UInt64, members: [UInt64])

    struct Malformed: Error { var offset: Int }

    /// The fixed-size facts of an operation, decoded without allocating (set members are
    /// left in the block; `decode` reads them).
    struct Header {
        var code: JournalFormat.OperationCode
        var key: UInt64
        /// A put's value (empty for other operations).
        var value: Range<Int> = 0..<0
        var indexKeys: Range<Int>
        var indexKeyCount: Int
        var end: Int
    }

    @inline(__always)
    static func header(_ block: UnsafeRawBufferPointer, at offset: Int) throws(Malformed) -> Header {
        var r = ByteReader(block, offset: offset)
        do {
            guard let code = JournalFormat.OperationCode(rawValue: try r.readByte()) else {
                throw Malformed(offset: offset)
            }
            let key = try r.readKey()
            switch code {
            case .put:
                let length = try r.readLength(limit: JournalFormat.maxValueLength)
                let valueStart = r.offset
                try r.skip(length)
                let count = try r.readLength(limit: JournalFormat.maxIndexKeysPerPut)
                let keysStart = r.offset
                for _ in 0..<count {
                    _ = try r.readVarint()
                    try r.skip(try r.readLength(limit: JournalFormat.maxIndexKeyLength))
                }
                return Header(
                    code: code, key: key, value: valueStart..<(valueStart + length), indexKeys: keysStart..<r.offset,
                    indexKeyCount: count, end: r.offset)
            case .delete:
                return Header(code: code, key: key, indexKeys: 0..<0, indexKeyCount: 0, end: r.offset)
            case .setAdd, .setRemove, .setReplace:
                let count = try r.readLength(limit: r.remaining)
                if count > 0 {
                    _ = try r.readKey()
                    for _ in 1..<count { _ = try r.readVarint() }
                }
                return Header(code: code, key: key, indexKeys: 0..<0, indexKeyCount: 0, end: r.offset)
            }
        } catch let error as Malformed {
            throw error
        } catch {
            throw Malformed(offset: offset)
        }
    }

    /// The key and value range of the put at `offset`, reading no further than the value (a
    /// scan's per-record step); nil when the operation there is not a well-formed put.
    @inline(always)
    static func putValue(_ block: UnsafeRawBufferPointer, at offset: Int) -> (key: UInt64, value: Range<Int>)? {
        var r = ByteReader(block, offset: offset)
        do {
            guard try r.readByte() == JournalFormat.OperationCode.put.rawValue else { return nil }
            let key = try r.readKey()
            let length = try r.readLength(limit: JournalFormat.maxValueLength)
            let start = r.offset
            try r.skip(length)
            return (key, start..<r.offset)
        } catch {
            return nil
        }
    }

    /// Decodes the operation at `offset`; returns it and the offset after it.
    static func decode(_ block: UnsafeRawBufferPointer, at offset: Int) throws(Malformed) -> (JournalOperation, Int) {
        var r = ByteReader(block, offset: offset)
        do {
            guard let code = JournalFormat.OperationCode(rawValue: try r.readByte()) else {
                throw Malformed(offset: offset)
            }
            switch code {
            case .put:
                let key = try r.readKey()
                let length = try r.readLength(limit: JournalFormat.maxValueLength)
                let valueStart = r.offset
                try r.skip(length)
                let value = valueStart..<r.offset
                let count = try r.readLength(limit: JournalFormat.maxIndexKeysPerPut)
                let keysStart = r.offset
                for _ in 0..<count {
                    _ = try r.readVarint()
                    try r.skip(try r.readLength(limit: JournalFormat.maxIndexKeyLength))
                }
                return (.put(key: key, value: value, indexKeys: keysStart..<r.offset, indexKeyCount: count), r.offset)
            case .delete:
                return (.delete(key: try r.readKey()), r.offset)
            case .setAdd, .setRemove, .setReplace:
                let set = try r.readKey()
                let count = try r.readLength(limit: r.remaining)
                var members: [UInt64] = []
                members.reserveCapacity(count)
                var previous: UInt64 = 0
                for i in 0..<count {
                    let v = i == 0 ? try r.readKey() : try r.readVarint()
                    if i > 0 {
                        guard v > 0 else { throw Malformed(offset: offset) }
                        let (sum, overflow) = previous.addingReportingOverflow(v)
                        guard !overflow else { throw Malformed(offset: offset) }
                        previous = sum
                    } else {
                        previous = v
                    }
                    members.append(previous)
                }
                return (.set(code: code, set: set, members: members), r.offset)
            }
        } catch let error as Malformed {
            throw error
        } catch {
            throw Malformed(offset: offset)
        }
    }

    /// The offset after the operation at `offset` when it is a well-formed put, nil otherwise
    /// (another operation, or malformed): what `decode` checks of a put, without building it.
    static func endOfPut(_ block: UnsafeRawBufferPointer, at offset: Int) -> Int? {
        guard offset < block.count, block[offset] == JournalFormat.OperationCode.put.rawValue else { return nil }
        var r = ByteReader(block, offset: offset + 1)
        do throws(ByteReader.OutOfBounds) {
            _ = try r.readKey()
            try r.skip(try r.readLength(limit: JournalFormat.maxValueLength))
            let count = try r.readLength(limit: JournalFormat.maxIndexKeysPerPut)
            for _ in 0..<count {
                _ = try r.readVarint()
                try r.skip(try r.readLength(limit: JournalFormat.maxIndexKeyLength))
            }
            return r.offset
        } catch {
            return nil
        }
    }

    /// Calls `body` for each (index, range of the key in `block`) of a put's index section.
    static func forEachIndexKeyRange(
        _ block: UnsafeRawBufferPointer, _ range: Range<Int>, count: Int,
        _ body: (UInt32, Range<Int>) -> Void
    ) {
        var r = ByteReader(block, offset: range.lowerBound)
        for _ in 0..<count {
            guard let index = try? r.readVarint(),
                let length = try? r.readLength(limit: JournalFormat.maxIndexKeyLength)
            else { return }
            let start = r.offset
            guard (try? r.skip(length)) != nil else { return }
            body(UInt32(truncatingIfNeeded: index), start..<(start + length))
        }
    }

    /// Calls `body` for each (index, key bytes) of a put's index section.
    static func forEachIndexKey(
        _ block: UnsafeRawBufferPointer, _ range: Range<Int>, count: Int,
        _ body: (UInt32, UnsafeRawBufferPointer) -> Void
    ) {
        var r = ByteReader(UnsafeRawBufferPointer(rebasing: block[range]))
        for _ in 0..<count {
            // The section was validated by `decode`.
            guard let index = try? r.readVarint(),
                let length = try? r.readLength(limit: JournalFormat.maxIndexKeyLength),
                let bytes = try? r.readBytes(length)
            else { return }
            body(UInt32(truncatingIfNeeded: index), bytes)
        }
    }
}
