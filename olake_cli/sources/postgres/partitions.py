"""Partitioned tables: which leaf partitions belong to which root stream."""

from __future__ import annotations

import psycopg
from psycopg import sql

_LEAVES_SQL = """
SELECT n.nspname, c.relname
FROM pg_partition_tree(%s::regclass) t
JOIN pg_class c ON c.oid = t.relid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE t.relid <> %s::regclass
"""


def partition_roots(conn: psycopg.Connection, tables: list[tuple[str, str]]) -> dict[tuple[str, str], tuple[str, str]]:
    """Every partition (at any depth) of the given tables, mapped to the given table it belongs to."""
    roots: dict[tuple[str, str], tuple[str, str]] = {}
    for schema, table in tables:
        qualified = sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(table)).as_string(conn)
        for leaf in conn.execute(_LEAVES_SQL, (qualified, qualified)).fetchall():
            roots[(leaf[0], leaf[1])] = (schema, table)
    return roots
