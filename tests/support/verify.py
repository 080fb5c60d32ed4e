"""Value-by-value comparison of a PostgreSQL table with what olake wrote to Parquet.

The Parquet rows are loaded back into a typed copy of the source table (same column types), then both
tables are compared as PostgreSQL's own text output of every column, as multisets (EXCEPT ALL both
ways). Any lost digit, microsecond, zone, byte, array element or dimension shows up as a difference.
Dates and timestamps go back as PostgreSQL text computed from the raw day/microsecond counts (BC and
years beyond 9999 included; int max/min as infinities), nested lists as multi-dimensional arrays,
``ndarray`` structs as PostgreSQL's array text with its dimensions (``[0:2]={...}``).
"""

from __future__ import annotations

import decimal
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.compute as pc
from psycopg import sql

from olake_cli.core.calendar_text import date_text, timestamp_text

INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)
INT32_MAX, INT32_MIN = 2**31 - 1, -(2**31)


def read_parquet(folder: str) -> pa.Table:
    """Every file of one stream's folder as one table; files written before a column was added or
    widened are read under the widest schema (as DuckDB's ``union_by_name`` reads them)."""
    dataset = ds.dataset(folder, format="parquet")
    fragments = [fragment.physical_schema for fragment in dataset.get_fragments()]
    if len(fragments) < 2:
        return dataset.to_table()
    schema = pa.unify_schemas(fragments, promote_options="permissive")
    return ds.dataset(folder, format="parquet", schema=schema).to_table()


def latest_versions(table: pa.Table, key: list[str]) -> pa.Table:
    """The current table from change rows: newest _olake_op_id per key, deletes dropped.

    Only the key and metadata columns become Python values (dates beyond Python's range stay Arrow).
    """
    keys = list(zip(*(table.column(c).to_pylist() for c in key)))
    ranks = table.column("_olake_op_id").to_pylist()
    ops = table.column("_olake_op").to_pylist()
    best: dict[tuple, int] = {}
    for index, k in enumerate(keys):
        if k not in best or (ranks[index] or "") >= (ranks[best[k]] or ""):
            best[k] = index
    kept = [index for index in best.values() if ops[index] != "d"]
    return table.take(pa.array(kept, pa.int64()))


def _scalar(olake_type: str, value: Any) -> Any:
    if value is None:
        return None
    if olake_type == "interval":
        return f"{value['months']} months {value['days']} days {value['microseconds']} microseconds"
    if olake_type == "uuid":
        return str(value)
    if olake_type in ("json",) and isinstance(value, (bytes, bytearray)):
        return value.decode()
    return value


def _temporal_text(olake_type: str, raw: int | None) -> str | None:
    """PostgreSQL input text of a raw date32 / timestamp[us] value (int max/min are infinities)."""
    if raw is None:
        return None
    hi, lo = (INT32_MAX, INT32_MIN) if olake_type == "date" else (INT64_MAX, INT64_MIN)
    if raw in (hi, lo):
        return "infinity" if raw == hi else "-infinity"
    return date_text(raw) if olake_type == "date" else timestamp_text(raw, olake_type == "timestamptz")


def _column_values(olake_type: str, column: pa.Array | pa.ChunkedArray) -> list[Any]:
    """Python values psycopg can adapt: temporal values as PostgreSQL text, arrays as nested lists."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if olake_type.startswith("ndarray<"):
        return _ndarray_values(olake_type, column)
    if olake_type.startswith("array<"):
        elements = _column_values(olake_type[6:-1], column.flatten())
        out, position = [], 0
        for length in pc.list_value_length(column).to_pylist():
            out.append(None if length is None else elements[position:position + length])
            position += length or 0
        return out
    if olake_type in ("timestamp", "timestamptz", "date"):
        raw = column.view(pa.int32() if olake_type == "date" else pa.int64()).to_pylist()
        return [_temporal_text(olake_type, r) for r in raw]
    if isinstance(column.type, pa.ExtensionType) and olake_type != "uuid":
        column = column.cast(column.type.storage_type)
    return [_scalar(olake_type, v) for v in column.to_pylist()]


def _ndarray_values(olake_type: str, column: pa.StructArray) -> list[tuple[str | None, list | None]]:
    """Each ndarray value as (its dimensions' text, its elements nested by its lengths): the two
    parameters of its ``_placeholder``."""
    lower, lengths, elements = column.flatten()
    element_values = _column_values("array<" + olake_type[len("ndarray<"):], elements)
    out: list[tuple[str | None, list | None]] = []
    for valid, lo, n, flat in zip(column.is_valid().to_pylist(), lower.to_pylist(), lengths.to_pylist(),
                                  element_values):
        if not valid:
            out.append((None, None))
            continue
        nested = flat
        for length in reversed(n[1:]):
            nested = [nested[i:i + length] for i in range(0, len(nested), length)]
        out.append(("".join(f"[{a}:{a + b - 1}]" for a, b in zip(lo, n)) + ("=" if n else ""), nested))
    return out


def _placeholder(olake_type: str, pg_type: str) -> sql.Composable:
    """``%s::type``; for an ndarray two parameters, the dimensions' text and the nested elements."""
    if olake_type.startswith("ndarray<"):
        return sql.SQL("(%s::text || %s::{t}::text)::{t}").format(t=sql.SQL(pg_type))
    return sql.SQL("%s::{}").format(sql.SQL(pg_type))


def load_into_copy(conn: psycopg.Connection, schema: str, table: str, json_schema: dict, data: pa.Table) -> str:
    """Create a typed copy of ``schema.table`` holding ``data``; returns the copy's name."""
    copy = f"olake_verify_{table}"
    props = json_schema["properties"]
    cols = list(props)
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(copy)))
    conn.execute(sql.SQL("CREATE TEMP TABLE {} AS SELECT {} FROM {}.{} WITH NO DATA").format(
        sql.Identifier(copy), sql.SQL(", ").join(sql.Identifier(c) for c in cols),
        sql.Identifier(schema), sql.Identifier(table)))
    types = dict(conn.execute(
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = %s::regclass "
        "AND attnum > 0 AND NOT attisdropped", (sql.Identifier(copy).as_string(conn),)).fetchall())
    olake_types = [props[c]["x-olake-type"] for c in cols]
    columns = [_column_values(t, data.column(c)) for t, c in zip(olake_types, cols)]
    placeholders = sql.SQL(", ").join(_placeholder(t, types[c]) for t, c in zip(olake_types, cols))
    insert = sql.SQL("INSERT INTO {} VALUES ({})").format(sql.Identifier(copy), placeholders)
    pairs = [t.startswith("ndarray<") for t in olake_types]
    rows = [tuple(p for value, pair in zip(row, pairs) for p in (value if pair else (value,)))
            for row in zip(*columns)]
    with conn.cursor() as cur:
        cur.executemany(insert, rows)
    return copy


def text_rows_difference(conn: psycopg.Connection, left: str, right: str, cols: list[str]) -> list[tuple]:
    """Rows (as PostgreSQL text of each column) in ``left`` but not in ``right``, multiset-wise."""
    text_cols = sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(c)) for c in cols)
    query = sql.SQL("SELECT {c} FROM {l} EXCEPT ALL SELECT {c} FROM {r} LIMIT 20").format(
        c=text_cols, l=sql.SQL(left), r=sql.SQL(right))
    return conn.execute(query).fetchall()


def assert_table_matches(conn: psycopg.Connection, schema: str, table: str, json_schema: dict,
                         data: pa.Table) -> None:
    """Fail unless ``data`` holds exactly the rows of ``schema.table`` (every column, every value)."""
    cols = list(json_schema["properties"])
    source_count = conn.execute(sql.SQL("SELECT count(*) FROM {}.{}").format(
        sql.Identifier(schema), sql.Identifier(table))).fetchone()[0]
    assert data.num_rows == source_count, f"{schema}.{table}: {data.num_rows} rows in Parquet, {source_count} in source"
    copy = load_into_copy(conn, schema, table, json_schema, data)
    src = sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(table)).as_string(conn)
    dst = sql.Identifier(copy).as_string(conn)
    missing = text_rows_difference(conn, src, dst, cols)
    extra = text_rows_difference(conn, dst, src, cols)
    assert not missing and not extra, f"{schema}.{table}: source rows not in Parquet {missing[:3]}; Parquet rows not in source {extra[:3]}"


def distinct_rows(table: pa.Table, columns: list[str]) -> pa.Table:
    """``table`` restricted to ``columns`` with duplicate rows removed (after a resumed load)."""
    sub = table.select(columns)
    keep, seen = [], set()
    for i, row in enumerate(zip(*(sub.column(c).to_pylist() for c in columns))):
        marker = repr(row)
        if marker not in seen:
            seen.add(marker)
            keep.append(i)
    return sub.take(pa.array(keep, pa.int64()))


__all__ = ["assert_table_matches", "read_parquet", "latest_versions", "distinct_rows", "decimal", "pc"]
