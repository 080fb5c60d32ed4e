"""Value-by-value comparison of a source PostgreSQL table with its copy in a target PostgreSQL.

Both sides are read as PostgreSQL's own text output of every column (same session settings), as
multisets, so any lost digit, microsecond, zone, byte, array element or dimension shows up.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

_SETTINGS = "SET TimeZone = 'UTC'; SET DateStyle = 'ISO'; SET IntervalStyle = 'postgres'; SET extra_float_digits = 1"


def table_texts(dsn: str, schema: str, table: str, columns: list[str]) -> list[tuple]:
    """Every row of ``schema.table`` as the text of ``columns``, sorted."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(_SETTINGS)
        texts = sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(c)) for c in columns)
        rows = conn.execute(sql.SQL("SELECT {} FROM {}").format(texts, sql.Identifier(schema, table))).fetchall()
    return sorted(rows, key=lambda row: tuple((v is None, v or "") for v in row))


def assert_same_rows(source_dsn: str, source: tuple[str, str], target_dsn: str, target: tuple[str, str],
                     columns: list[str]) -> int:
    """Fail unless both tables hold the same rows (every column's text); returns the row count."""
    expected = table_texts(source_dsn, *source, columns)
    found = table_texts(target_dsn, *target, columns)
    if expected != found:
        missing = [r for r in expected if r not in found][:5]
        extra = [r for r in found if r not in expected][:5]
        raise AssertionError(f"{target[0]}.{target[1]} differs from {source[0]}.{source[1]}: {len(found)} rows "
                             f"against {len(expected)}; missing {missing}; unexpected {extra}")
    return len(expected)


def columns_of(dsn: str, schema: str, table: str) -> list[str]:
    """The user columns of a table, in order."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [r[0] for r in conn.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped "
            "ORDER BY attnum", (sql.Identifier(schema, table).as_string(conn),)).fetchall()]
