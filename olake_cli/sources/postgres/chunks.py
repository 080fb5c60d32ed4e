"""Chunk planning for full loads: ctid page ranges (default) or primary-key ranges."""

from __future__ import annotations

from dataclasses import dataclass

from psycopg import sql

CTID = "ctid"


@dataclass(frozen=True)
class ChunkBounds:
    """A half-open key range [min, max); ``None`` is an open end. Values are PostgreSQL text forms."""

    min: str | list[str] | None
    max: str | list[str] | None


def table_pages_and_rows(conn, schema: str, table: str) -> tuple[int, float]:
    """(pages of the largest leaf, estimated rows per page index) of a table or partitioned table.

    A ctid range applies to every partition at once, so rows per page index counts all partitions.
    """
    qualified = f"{sql.Identifier(schema).as_string(conn)}.{sql.Identifier(table).as_string(conn)}"
    row = conn.execute(
        """SELECT coalesce(max(pg_relation_size(t.relid)), 0) / current_setting('block_size')::int,
                  coalesce(sum(pg_relation_size(t.relid)), 0) / current_setting('block_size')::int,
                  coalesce(sum(greatest(c.reltuples, 0)), 0), bool_or(c.reltuples < 0)
           FROM (SELECT relid FROM pg_partition_tree(%s::regclass) WHERE isleaf
                 UNION SELECT %s::regclass) t JOIN pg_class c ON c.oid = t.relid
           WHERE c.relkind IN ('r', 'm', 't')""", (qualified, qualified)).fetchone()
    max_pages, total_pages, tuples, unknown = int(row[0]), int(row[1]), float(row[2]), bool(row[3])
    if total_pages == 0:
        return 0, 0.0
    if unknown or tuples <= 0:
        count_sql = sql.SQL("SELECT count(*) FROM {}.{}").format(sql.Identifier(schema), sql.Identifier(table))
        tuples = float(conn.execute(count_sql).fetchone()[0])
    return max_pages, max(tuples / max(max_pages, 1), 1.0)


def table_identity(conn, schema: str, table: str) -> dict[str, int]:
    """``schema.name`` -> relfilenode of the table, or of every leaf partition of a partitioned table.

    ctid ranges name physical places: a rewrite (VACUUM FULL, CLUSTER, a rewriting ALTER TABLE) or a
    partition attached or detached changes this map, and chunks planned before no longer cover the
    same rows.
    """
    qualified = f"{sql.Identifier(schema).as_string(conn)}.{sql.Identifier(table).as_string(conn)}"
    rows = conn.execute(
        """SELECT n.nspname || '.' || c.relname, pg_relation_filenode(c.oid)::bigint
           FROM (SELECT relid FROM pg_partition_tree(%s::regclass) WHERE isleaf
                 UNION SELECT %s::regclass) t JOIN pg_class c ON c.oid = t.relid
           JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE c.relkind IN ('r', 'm') ORDER BY 1""", (qualified, qualified)).fetchall()
    return {name: int(node) for name, node in rows}


def plan_ctid_chunks(conn, schema: str, table: str, chunk_rows: int) -> list[ChunkBounds]:
    """Page ranges sized toward ``chunk_rows`` rows each; the last range is open-ended."""
    pages, rows_per_page = table_pages_and_rows(conn, schema, table)
    if pages == 0:
        return [ChunkBounds("(0,0)", None)]
    step = max(1, int(chunk_rows / rows_per_page))
    starts = list(range(0, pages, step))
    if len(starts) > 1 and pages - starts[-1] < step // 2:
        starts.pop()  # fold a small tail into the previous chunk
    bounds = []
    for i, start in enumerate(starts):
        end = None if i == len(starts) - 1 else f"({starts[i + 1]},0)"
        bounds.append(ChunkBounds(f"({start},0)", end))
    return bounds


def plan_key_chunks(conn, schema: str, table: str, key: list[str], chunk_rows: int) -> list[ChunkBounds]:
    """Primary-key ranges of about ``chunk_rows`` rows, boundaries read in key order (column collation)."""
    cols = sql.SQL(", ").join(sql.Identifier(k) for k in key)
    as_text = sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(k)) for k in key)
    query = sql.SQL(
        "SELECT {as_text} FROM (SELECT {cols}, row_number() OVER (ORDER BY {cols}) AS olake_rn "
        "FROM {schema}.{table}) s WHERE mod(olake_rn, {step}) = 1 AND olake_rn > 1 ORDER BY olake_rn"
    ).format(as_text=as_text, cols=cols, schema=sql.Identifier(schema), table=sql.Identifier(table),
             step=sql.Literal(max(1, chunk_rows)))
    cuts = [row[0] if len(key) == 1 else list(row) for row in conn.execute(query).fetchall()]
    edges: list = [None] + cuts + [None]
    return [ChunkBounds(edges[i], edges[i + 1]) for i in range(len(edges) - 1)]


def chunk_predicate(chunk_column: str | list[str], key_types: list[str], lo, hi) -> sql.Composable:
    """The WHERE condition selecting [lo, hi) on ctid or on the (composite) key."""
    if chunk_column == CTID:
        parts = []
        if lo is not None:
            parts.append(sql.SQL("ctid >= {}::tid").format(sql.Literal(lo)))
        if hi is not None:
            parts.append(sql.SQL("ctid < {}::tid").format(sql.Literal(hi)))
        return sql.SQL(" AND ").join(parts) if parts else sql.SQL("true")
    key = list(chunk_column)
    lhs = sql.SQL("({})").format(sql.SQL(", ").join(sql.Identifier(k) for k in key))
    parts = []
    for op, bound in ((">=", lo), ("<", hi)):
        if bound is None:
            continue
        values = [bound] if isinstance(bound, str) else list(bound)
        rhs = sql.SQL(", ").join(sql.SQL("{}::{}").format(sql.Literal(v), sql.SQL(t))
                                 for v, t in zip(values, key_types))
        parts.append(sql.SQL("{} {} ({})").format(lhs, sql.SQL(op), rhs))
    return sql.SQL(" AND ").join(parts) if parts else sql.SQL("true")
