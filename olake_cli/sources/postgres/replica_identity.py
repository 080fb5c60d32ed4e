"""Which tables can be captured without breaking the source: the replica identity rule.

Once a table is in a publication that publishes updates and deletes, PostgreSQL rejects UPDATE and
DELETE on it unless it has a usable replica identity. A relation qualifies with REPLICA IDENTITY
DEFAULT and a primary key, REPLICA IDENTITY FULL, or REPLICA IDENTITY USING INDEX on an index that
still exists; not with DEFAULT and no primary key, nor with NOTHING. A plain table is judged alone;
a partitioned table qualifies when its root and every leaf partition (at any depth) qualify.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql

_REASONS = {"n": "REPLICA IDENTITY NOTHING", "d": "no primary key (REPLICA IDENTITY DEFAULT)",
            "i": "a REPLICA IDENTITY USING INDEX whose index no longer exists"}

# For each table ``r.root``: rows (relid, isleaf, level) of the table itself (level 0) and its leaf
# partitions at any depth. A plain table that is not a partition has no partition tree: its own leaf.
ROOT_AND_LEAVES_SQL = """(
  SELECT relid, isleaf, level FROM pg_partition_tree(r.root::regclass) WHERE isleaf OR level = 0
  UNION ALL SELECT r.root::regclass, true, 0 WHERE NOT EXISTS (SELECT FROM pg_partition_tree(r.root::regclass))
)"""
_RELATIONS_SQL = f"""
SELECT r.root, pt.level = 0, pt.isleaf, n.nspname, c.relname, c.relreplident,
       EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary),
       EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisreplident)
FROM unnest(%s::oid[]) AS r(root) CROSS JOIN LATERAL {ROOT_AND_LEAVES_SQL} pt
JOIN pg_class c ON c.oid = pt.relid JOIN pg_namespace n ON n.oid = c.relnamespace
ORDER BY r.root, pt.level, n.nspname, c.relname
"""


@dataclass(frozen=True)
class ResolvedTable:
    """A selected table found in ``pg_class``."""

    schema: str
    name: str
    oid: int
    partitioned: bool

    @property
    def label(self) -> str:
        return f"{self.schema}.{self.name}"


def resolve_tables(conn: psycopg.Connection, tables: list[tuple[str, str]]
                   ) -> tuple[list[ResolvedTable], list[tuple[str, str]]]:
    """(found tables in the given order, (schema, table) pairs that do not exist)."""
    rows = conn.execute(
        "SELECT t.ord, c.oid, c.relkind FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY AS t(s, n, ord)"
        " JOIN pg_namespace ns ON ns.nspname = t.s"
        " JOIN pg_class c ON c.relnamespace = ns.oid AND c.relname = t.n AND c.relkind IN ('r', 'p')",
        ([s for s, _ in tables], [n for _, n in tables])).fetchall()
    found = {ord_ - 1: (oid, kind) for ord_, oid, kind in rows}
    resolved = [ResolvedTable(s, n, found[i][0], found[i][1] == "p")
                for i, (s, n) in enumerate(tables) if i in found]
    return resolved, [pair for i, pair in enumerate(tables) if i not in found]


@dataclass(frozen=True)
class RelationIdentity:
    """The replica identity of one relation judged for a table: the table itself, or one of its leaves."""

    is_root: bool
    is_leaf: bool
    schema: str
    name: str
    ident: str
    has_pk: bool
    has_ident_index: bool

    @property
    def usable(self) -> bool:
        """Whether UPDATE and DELETE stay possible once published, and changes carry the old row's key."""
        return self.ident == "f" or (self.ident == "d" and self.has_pk) or (
            self.ident == "i" and self.has_ident_index)

    @property
    def label(self) -> str:
        return f"{self.schema}.{self.name}"


@dataclass(frozen=True)
class KeylessTable:
    """A table that does not qualify, with the relations (root and/or leaves) that fail the rule."""

    table: ResolvedTable
    failing: tuple[RelationIdentity, ...]

    @property
    def reason(self) -> str:
        """E.g. ``no primary key (REPLICA IDENTITY DEFAULT)``, or ``partition s.p has ...`` for leaves."""
        first = self.failing[0]
        if first.is_root:
            return _REASONS[first.ident]
        if len(self.failing) == 1:
            return f"partition {first.label} has {_REASONS[first.ident]}"
        names = ", ".join(rel.label for rel in self.failing)
        return f"partitions {names} have {_REASONS[first.ident]}"

    def fix_sql(self, conn: psycopg.Connection) -> str:
        """``ALTER TABLE ... REPLICA IDENTITY FULL;`` for each failing relation, one per line."""
        return "\n".join(sql.SQL("ALTER TABLE {} REPLICA IDENTITY FULL;").format(
            sql.Identifier(rel.schema, rel.name)).as_string(conn) for rel in self.failing)


def relation_identities(conn: psycopg.Connection, oids: list[int]) -> dict[int, list[RelationIdentity]]:
    """For each table oid: the table itself, then its leaf partitions at any depth."""
    found: dict[int, list[RelationIdentity]] = {oid: [] for oid in oids}
    for root, *values in conn.execute(_RELATIONS_SQL, (list(oids),)).fetchall():
        found[root].append(RelationIdentity(*values))
    return found


def keyless_tables(conn: psycopg.Connection, tables: list[ResolvedTable]) -> dict[int, KeylessTable]:
    """The given tables that do not qualify for change capture, by oid."""
    identities = relation_identities(conn, [t.oid for t in tables])
    keyless = {}
    for table in tables:
        failing = tuple(rel for rel in identities[table.oid] if not rel.usable)
        if failing:
            keyless[table.oid] = KeylessTable(table, failing)
    return keyless
