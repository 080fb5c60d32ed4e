"""The publication side of change capture: is every selected table published, with every action?

A selected table is published when each of its leaf partitions (the table itself if it is not
partitioned) is in the publication, directly, through an ancestor (the root or an intermediate
parent), through its schema (FOR TABLES IN SCHEMA) or FOR ALL TABLES; whether the publication uses
``publish_via_partition_root`` does not matter (change capture maps leaves to their root), but olake's
own publications do not use it, since PostgreSQL then publishes no TRUNCATE of a single partition.
Tables without a usable replica identity (see replica_identity) are never added by olake.

PostgreSQL publishes no change made while a table is out of the publication, and keeps no record of
when a table joined it. What it does keep is the catalog row that makes the table a member: a table
removed and added again gets a new row with a new oid (oids are not reused). So change capture records
those rows with each stream's position (:class:`Membership`) and, at every run, requires each of the
table's leaves to be published now by a row recorded before: otherwise the table was out for a while.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from olake_cli.sources.postgres.replica_identity import ROOT_AND_LEAVES_SQL, KeylessTable, ResolvedTable

PUBLISH_ACTIONS = ("insert", "update", "delete", "truncate")
PUBLICATION_ROWS = "publication_rows"  # the stream state key holding Membership.rows()
PUBLISH_EVERYTHING = ", ".join(PUBLISH_ACTIONS)


@dataclass(frozen=True)
class CdcProblem:
    """One change-capture misconfiguration: a one-line explanation and the SQL that fixes it."""

    what: str
    fix_sql: str | None = None
    breaks_source: bool = False  # the source application's own writes fail until it is fixed


@dataclass(frozen=True)
class PublicationView:
    """What one publication holds for a set of tables (``row`` is None when it does not exist)."""

    name: str
    row: dict[str, Any] | None
    covered: dict[int, bool]
    filtered: dict[int, list[tuple[str, str]]]

    def covers(self, table: ResolvedTable) -> bool:
        """Whether every leaf of ``table`` is published."""
        return self.row is not None and self.covered.get(table.oid, False)


_LEAVES_PUBLISHED_SQL = f"""
SELECT r.root, pt.isleaf, EXISTS (
  SELECT 1 FROM (SELECT pt.relid UNION SELECT relid FROM pg_partition_ancestors(pt.relid)) a(relid)
  JOIN pg_class ac ON ac.oid = a.relid
  WHERE EXISTS (SELECT 1 FROM pg_publication_rel pr WHERE pr.prpubid = %(pub)s AND pr.prrelid = a.relid)
     OR {{by_schema}})
FROM unnest(%(oids)s::oid[]) AS r(root) CROSS JOIN LATERAL {ROOT_AND_LEAVES_SQL} pt
"""
_BY_SCHEMA = ("EXISTS (SELECT 1 FROM pg_publication_namespace pn"
              " WHERE pn.pnpubid = %(pub)s AND pn.pnnspid = ac.relnamespace)")
_FILTERED_SQL = """
SELECT r.root, n.nspname, c.relname
FROM unnest(%(oids)s::oid[]) AS r(root)
JOIN pg_publication_rel pr ON pr.prpubid = %(pub)s AND (pr.prqual IS NOT NULL OR pr.prattrs IS NOT NULL)
JOIN pg_class c ON c.oid = pr.prrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE pr.prrelid = r.root OR pr.prrelid IN (SELECT relid FROM pg_partition_tree(r.root::regclass)
                     UNION SELECT relid FROM pg_partition_ancestors(r.root::regclass))
ORDER BY r.root, n.nspname, c.relname
"""


def inspect_publication(conn: psycopg.Connection, publication: str,
                        tables: list[ResolvedTable]) -> PublicationView:
    """Read the publication and which of ``tables`` it covers (and filters)."""
    cur = conn.execute("SELECT oid, puballtables, pubinsert, pubupdate, pubdelete, pubtruncate, pubviaroot"
                       " FROM pg_publication WHERE pubname = %s", (publication,))
    found = cur.fetchone()
    row = None if found is None else dict(zip([c.name for c in cur.description], found))
    if row is None or row["puballtables"]:
        return PublicationView(publication, row, {t.oid: row is not None for t in tables}, {})
    params = {"pub": row["oid"], "oids": [t.oid for t in tables]}
    modern = conn.info.server_version >= 150000
    leaves: dict[int, list[tuple[bool, bool]]] = {t.oid: [] for t in tables}
    query = _LEAVES_PUBLISHED_SQL.format(by_schema=_BY_SCHEMA if modern else "false")
    for root, is_leaf, is_published in conn.execute(query, params).fetchall():
        leaves[root].append((is_leaf, is_published))
    # judged on the leaves; a partitioned table without partitions on itself
    covered = {oid: all([p for leaf, p in rows if leaf] or [p for _, p in rows]) for oid, rows in leaves.items()}
    filtered: dict[int, list[tuple[str, str]]] = {}
    for root, schema, name in (conn.execute(_FILTERED_SQL, params).fetchall() if modern else []):
        filtered.setdefault(root, []).append((schema, name))
    return PublicationView(publication, row, covered, filtered)


_MEMBERSHIP_SQL = f"""
SELECT r.root, pt.isleaf, ARRAY(
  SELECT 'table:' || pr.oid FROM pg_publication_rel pr
  WHERE pr.prpubid = p.oid AND pr.prrelid IN (SELECT pt.relid UNION SELECT relid FROM pg_partition_ancestors(pt.relid))
  {{by_schema}}
  UNION ALL SELECT 'all:' || p.oid WHERE p.puballtables)
FROM unnest(%(oids)s::oid[]) AS r(root) CROSS JOIN LATERAL {ROOT_AND_LEAVES_SQL} pt
LEFT JOIN pg_publication p ON p.pubname = %(pub)s
"""
_SCHEMA_ROWS = """UNION ALL SELECT 'schema:' || pn.oid FROM pg_publication_namespace pn
  JOIN pg_class ac ON ac.relnamespace = pn.pnnspid
  WHERE pn.pnpubid = p.oid AND ac.oid IN (SELECT pt.relid UNION SELECT relid FROM pg_partition_ancestors(pt.relid))"""


@dataclass(frozen=True)
class Membership:
    """The catalog rows that publish one table: for each leaf partition it is judged on (the table itself
    when it is not partitioned), ``table:<pg_publication_rel oid>`` (the leaf or an ancestor listed),
    ``schema:<pg_publication_namespace oid>`` or ``all:<pg_publication oid>`` (FOR ALL TABLES)."""

    leaves: tuple[frozenset[str], ...]

    def rows(self) -> list[str]:
        """Every row, sorted (what a stream state records)."""
        return sorted(frozenset().union(*self.leaves))

    def gap(self, recorded: list[str] | None) -> str | None:
        """``left`` when a leaf is not published now; ``rejoined`` when one is published only by rows made
        since ``recorded`` was seen (it left and came back); None when every leaf stayed published."""
        if not all(self.leaves):
            return "left"
        if recorded is not None and not all(leaf & frozenset(recorded) for leaf in self.leaves):
            return "rejoined"
        return None


def publication_members(conn: psycopg.Connection, publication: str, oids: list[int]) -> dict[int, Membership]:
    """Which catalog rows of ``publication`` publish each table (by oid) now."""
    query = _MEMBERSHIP_SQL.format(by_schema=_SCHEMA_ROWS if conn.info.server_version >= 150000 else "")
    leaves: dict[int, list[tuple[bool, frozenset[str]]]] = {oid: [] for oid in oids}
    for root, is_leaf, rows in conn.execute(query, {"pub": publication, "oids": oids}).fetchall():
        leaves[root].append((is_leaf, frozenset(rows)))
    return {oid: Membership(tuple([r for leaf, r in found if leaf] or [r for _, r in found]))
            for oid, found in leaves.items()}


def create_publication_sql(conn: psycopg.Connection, publication: str, tables: list[ResolvedTable]) -> str:
    """``CREATE PUBLICATION "pub" FOR TABLE ...;`` (publishing every action, not via the partition root)."""
    parts = [sql.SQL("CREATE PUBLICATION {}").format(sql.Identifier(publication))]
    if tables:
        parts.append(sql.SQL("FOR TABLE {}").format(_table_list(tables)))
    return sql.SQL(" ").join(parts).as_string(conn) + ";"


def via_root_note(conn: psycopg.Connection, view: PublicationView, tables: list[ResolvedTable]) -> str | None:
    """A warning when the publication publishes via the partition root and a partitioned table is captured."""
    partitioned = [t.label for t in tables if t.partitioned]
    if view.row is None or not view.row["pubviaroot"] or not partitioned:
        return None
    fix = sql.SQL("ALTER PUBLICATION {} SET (publish_via_partition_root = false);").format(
        sql.Identifier(view.name)).as_string(conn)
    return (f"publication '{view.name}' uses publish_via_partition_root, so PostgreSQL publishes nothing for a "
            f"TRUNCATE of a single partition of {', '.join(partitioned)} and the destination would keep its "
            f"rows; run {fix}")


def add_tables_sql(conn: psycopg.Connection, publication: str, tables: list[ResolvedTable]) -> str:
    """``ALTER PUBLICATION "pub" ADD TABLE "s"."t1", "s"."t2";``"""
    return sql.SQL("ALTER PUBLICATION {} ADD TABLE {};").format(
        sql.Identifier(publication), _table_list(tables)).as_string(conn)


def publish_everything_sql(conn: psycopg.Connection, publication: str) -> str:
    """``ALTER PUBLICATION "pub" SET (publish = 'insert, update, delete, truncate');``"""
    return sql.SQL("ALTER PUBLICATION {} SET (publish = {});").format(
        sql.Identifier(publication), sql.Literal(PUBLISH_EVERYTHING)).as_string(conn)


def skipped_actions(view: PublicationView) -> list[str]:
    """The publish actions (insert, update, delete, truncate) the existing publication leaves out."""
    return [op for op in PUBLISH_ACTIONS if view.row is not None and not view.row[f"pub{op}"]]


def coverage_problems(conn: psycopg.Connection, view: PublicationView,
                      keyed: list[ResolvedTable]) -> list[CdcProblem]:
    """The publication is missing, leaves some of ``keyed`` out, filters them, or skips an action."""
    if view.row is None:
        return [CdcProblem(f"publication '{view.name}' does not exist in this database",
                           create_publication_sql(conn, view.name, keyed))]
    uncovered = uncovered_problem(conn, view, keyed)
    problems = ([uncovered] if uncovered else []) + filter_problems(conn, view, keyed)
    skipped = skipped_actions(view)
    if skipped:
        problems.append(CdcProblem(f"publication '{view.name}' does not publish {', '.join(skipped)}, so "
                                   "those changes would be lost", publish_everything_sql(conn, view.name)))
    return problems


def uncovered_problem(conn: psycopg.Connection, view: PublicationView,
                      keyed: list[ResolvedTable]) -> CdcProblem | None:
    """The existing publication leaves some of ``keyed`` out (None: it covers them all)."""
    uncovered = [t for t in keyed if not view.covers(t)]
    if not uncovered:
        return None
    return CdcProblem(f"publication '{view.name}' does not cover {', '.join(t.label for t in uncovered)}",
                      add_tables_sql(conn, view.name, uncovered))


def filter_problems(conn: psycopg.Connection, view: PublicationView, keyed: list[ResolvedTable]) -> list[CdcProblem]:
    """The publication's row filters and column lists on ``keyed`` (or their partitions or ancestors)."""
    problems = []
    for table in keyed:
        for schema, name in view.filtered.get(table.oid, []):
            fix = sql.SQL("ALTER PUBLICATION {0} DROP TABLE {1};\nALTER PUBLICATION {0} ADD TABLE {1};").format(
                sql.Identifier(view.name), sql.Identifier(schema, name)).as_string(conn)
            problems.append(CdcProblem(f"publication '{view.name}' has a row filter or column list on "
                                       f"{schema}.{name}, so some changes of {table.label} would never arrive",
                                       fix))
    return problems


def keyless_fix_sql(conn: psycopg.Connection, view: PublicationView | None, keyless: KeylessTable) -> str:
    """REPLICA IDENTITY FULL on each failing relation, then ADD TABLE unless already published."""
    fix = keyless.fix_sql(conn)
    if view is not None and not view.covers(keyless.table):
        fix += "\n" + add_tables_sql(conn, view.name, [keyless.table])
    return fix


def keyless_problem(conn: psycopg.Connection, view: PublicationView | None, keyless: KeylessTable) -> CdcProblem:
    """Why ``keyless`` cannot use cdc, and the SQL that gives it a replica identity (and publishes it)."""
    table = keyless.table
    if view is not None and view.covers(table):
        effect = "it is published, so PostgreSQL rejects UPDATE and DELETE on it now"
    else:
        effect = ("olake leaves it out of the publication, since PostgreSQL would then reject UPDATE and "
                  "DELETE on it")
    return CdcProblem(f"table {table.label} cannot use cdc: {keyless.reason}; {effect}; give it a primary key "
                      "or REPLICA IDENTITY FULL (the fix), or copy it with full_refresh",
                      keyless_fix_sql(conn, view, keyless), breaks_source=view is not None and view.covers(table))


def _table_list(tables: list[ResolvedTable]) -> sql.Composable:
    return sql.SQL(", ").join(sql.Identifier(t.schema, t.name) for t in tables)
