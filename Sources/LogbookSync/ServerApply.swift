import Foundation
import LogbookGraph
import Logging
import PostgresNIO

// A change log row applied to the server's tables, in SQL, by the server: the body (JSON,
// docs/sync.md) is read from the row itself, so each statement takes only the row's number.
extension ServerSchema {
    /// The SQL expression that turns a JSON value `j` into a column of attribute type `type`.
    static func converted(_ j: String, _ type: AttributeType) -> String {
        switch type {
        case .string, .url, .decimal: "(\(j) #>> '{}')"
        case .int16, .int32, .int64: "(\(j) #>> '{}')::bigint"
        case .double, .float: "(\(j) #>> '{}')::double precision"
        case .bool: "(\(j) #>> '{}')::boolean"
        case .date: "(timestamptz '2001-01-01 00:00:00+00' + make_interval(secs => (\(j) #>> '{}')::double precision))"
        case .data, .transformable: "decode(\(j) #>> '{}', 'base64')"
        case .uuid: "(\(j) #>> '{}')::uuid"
        }
    }

    /// The type of a `jsonb_to_record` column for an attribute.
    static func recordType(_ type: AttributeType) -> String {
        switch type {
        case .string, .url, .decimal, .data, .transformable: "text"
        case .int16, .int32, .int64: "bigint"
        case .double, .float, .date: "double precision"
        case .bool: "boolean"
        case .uuid: "uuid"
        }
    }

    /// A column's value from a `jsonb_to_record` column.
    static func fromRecord(_ column: String, _ type: AttributeType) -> String {
        switch type {
        case .date: "(timestamptz '2001-01-01 00:00:00+00' + make_interval(secs => \(column)))"
        case .data, .transformable: "decode(\(column), 'base64')"
        default: column
        }
    }

    /// The statements that apply change row `seq` (already inserted) to the tables: attribute
    /// values (an update of an object deleted on the server — a tombstone — is dropped: a delete
    /// wins), then to-one references (nil where the destination is gone), memberships and
    /// orders, then deletions.
    /// Only what `summary` says the row holds is run (all of it without one).
    func applyStatements(_ summary: BodySummary? = nil) -> [String] {
        func has(_ set: KeyPath<BodySummary, Set<String>>, _ key: String) -> Bool {
            summary.map { $0[keyPath: set].contains(key) } ?? true
        }
        let row = "\(changes) c"
        let objects = "jsonb_array_elements(c.body -> 'o') x"
        let members = "jsonb_array_elements(c.body -> 'm') m"
        var out: [String] = []
        for table in tables.values.sorted(by: { $0.entity < $1.entity }) {
            let t = name(table.entity)
            let e = "'\(table.entity.replacingOccurrences(of: "'", with: "''"))'"
            // Inserts carry every attribute: one statement writes them all (a row already
            // there, from an earlier push of the same object, takes the values).
            let attributes = table.columns.compactMap { c -> (String, AttributeType)? in
                if case .attribute(let type) = c.kind { return (c.name, type) }
                return nil
            }
            let names = (["id"] + attributes.map { quoted($0.0) }).joined(separator: ", ")
            // The attributes as a record (`jsonb_to_record`: one pass over each object's values).
            let recordType = attributes.map { a in "\(quoted(a.0)) \(Self.recordType(a.1))" }
                .joined(separator: ", ")
            let values =
                (["(x ->> 'id')::uuid"]
                + attributes.map { a in Self.fromRecord("r.\(quoted(a.0))", a.1) }).joined(separator: ", ")
            let record =
                attributes.isEmpty ? "" : ", jsonb_to_record(x -> 'a') AS r(\(recordType))"
            let updates = attributes.map { "\(quoted($0.0)) = EXCLUDED.\(quoted($0.0))" }.joined(separator: ", ")
            if has(\.inserted, table.entity) {
                out.append(
                    """
                    INSERT INTO \(t) (\(names)) SELECT DISTINCT ON ((x ->> 'id')::uuid) \(values) FROM \(row), \(objects)\(record)
                    WHERE c.seq = $1 AND x ->> 'e' = \(e) AND x ->> 'op' = 'i'
                      AND NOT EXISTS (SELECT 1 FROM \(tombstones) z WHERE z.id = (x ->> 'id')::uuid)
                    ON CONFLICT (id) DO \(updates.isEmpty ? "NOTHING" : "UPDATE SET \(updates)")
                    """)
            }
            // Updates: a row for an object the server has not seen, then the values named.
            if has(\.updated, table.entity) {
                out.append(
                    """
                    INSERT INTO \(t) (id) SELECT DISTINCT (x ->> 'id')::uuid FROM \(row), \(objects)
                    WHERE c.seq = $1 AND x ->> 'e' = \(e) AND x ->> 'op' = 'u'
                      AND NOT EXISTS (SELECT 1 FROM \(tombstones) z WHERE z.id = (x ->> 'id')::uuid)
                    ON CONFLICT (id) DO NOTHING
                    """)
            }
            for c in table.columns {
                let key = "'\(c.name.replacingOccurrences(of: "'", with: "''"))'"
                switch c.kind {
                case .attribute(let type):
                    guard has(\.properties, "\(table.entity).\(c.name)") && has(\.updated, table.entity) else {
                        continue
                    }
                    out.append(
                        """
                        UPDATE \(t) AS t SET \(quoted(c.name)) = \(Self.converted("(x -> 'a' -> \(key))", type))
                        FROM \(row), \(objects)
                        WHERE c.seq = $1 AND x ->> 'e' = \(e) AND x ->> 'op' = 'u' AND (x -> 'a') ? \(key)
                          AND t.id = (x ->> 'id')::uuid
                        """)
                case .toOne(let destination, let foreignKey):
                    guard has(\.properties, "\(table.entity).\(c.name)") else { continue }
                    let value =
                        foreignKey && tables[destination] != nil
                        ? "(SELECT d.id FROM \(name(destination)) d WHERE d.id = (x -> 'r' ->> \(key))::uuid)"
                        : "(x -> 'r' ->> \(key))::uuid"
                    out.append(
                        """
                        UPDATE \(t) AS t SET \(quoted(c.name)) = \(value)
                        FROM \(row), \(objects)
                        WHERE c.seq = $1 AND x ->> 'e' = \(e) AND x ->> 'op' <> 'd' AND (x -> 'r') ? \(key)
                          AND t.id = (x ->> 'id')::uuid
                        """)
                case .order:
                    guard has(\.members, "\(table.entity).\(c.name)") else { continue }
                    out.append(
                        """
                        UPDATE \(t) AS t SET \(quoted(c.name)) = ARRAY(SELECT jsonb_array_elements_text(m -> 'ord')::uuid)
                        FROM \(row), \(members)
                        WHERE c.seq = $1 AND m ->> 'e' = \(e) AND m ->> 'rel' = \(key) AND m ? 'ord'
                          AND t.id = (m ->> 'id')::uuid
                        """)
                }
            }
        }
        // Memberships held by join tables, from either side of the pair.
        for (side, join) in joins.sorted(by: { $0.key < $1.key }) where has(\.members, side) {
            let parts = side.split(separator: ".", maxSplits: 1).map(String.init)
            let e = "'\(parts[0].replacingOccurrences(of: "'", with: "''"))'"
            let rel = "'\(parts[1].replacingOccurrences(of: "'", with: "''"))'"
            let ownerSide = parts[0] == join.owner && parts[1] == join.relationship
            let (ownerColumn, memberColumn) = ownerSide ? ("owner", "member") : ("member", "owner")
            let ownerTable = ownerSide ? join.owner : join.member
            let memberTable = ownerSide ? join.member : join.owner
            let exists =
                join.foreignKeys
                ? """
                AND EXISTS (SELECT 1 FROM \(name(ownerTable)) o WHERE o.id = (m ->> 'id')::uuid)
                AND EXISTS (SELECT 1 FROM \(name(memberTable)) p WHERE p.id = a::uuid)
                """ : ""
            out.append(
                """
                INSERT INTO \(name(join.table)) (\(ownerColumn), \(memberColumn))
                SELECT (m ->> 'id')::uuid, a::uuid FROM \(row), \(members), jsonb_array_elements_text(m -> 'add') a
                WHERE c.seq = $1 AND m ->> 'e' = \(e) AND m ->> 'rel' = \(rel) \(exists)
                ON CONFLICT DO NOTHING
                """)
            out.append(
                """
                DELETE FROM \(name(join.table)) AS j USING \(row), \(members), jsonb_array_elements_text(m -> 'rem') a
                WHERE c.seq = $1 AND m ->> 'e' = \(e) AND m ->> 'rel' = \(rel)
                  AND j.\(ownerColumn) = (m ->> 'id')::uuid AND j.\(memberColumn) = a::uuid
                """)
        }
        for table in tables.values.sorted(by: { $0.entity < $1.entity }) where has(\.deleted, table.entity) {
            let e = "'\(table.entity.replacingOccurrences(of: "'", with: "''"))'"
            out.append(
                """
                DELETE FROM \(name(table.entity)) AS t USING \(row), \(objects)
                WHERE c.seq = $1 AND x ->> 'e' = \(e) AND x ->> 'op' = 'd' AND t.id = (x ->> 'id')::uuid
                """)
        }
        guard summary.map({ !$0.deleted.isEmpty }) ?? true else { return out }
        out.append(
            """
            INSERT INTO \(tombstones) (id, entity, scope_seq)
            SELECT (x ->> 'id')::uuid, x ->> 'e', c.scope_seq FROM \(row), \(objects)
            WHERE c.seq = $1 AND x ->> 'op' = 'd'
            ON CONFLICT (id) DO NOTHING
            """)
        return out
    }
}

/// What a row's body holds, so that the server runs only the statements it needs: entities
/// with inserts, updates and deletes, the properties set ("Entity.name"), the memberships and
/// orders ("Entity.relationship").
struct BodySummary: Sendable, Hashable {
    var inserted = Set<String>()
    /// Entities with inserts as columns (`"i"`: statements with bound arrays, not these).
    var insertedColumns = Set<String>()
    var updated = Set<String>()
    var deleted = Set<String>()
    var properties = Set<String>()
    var members = Set<String>()
}
