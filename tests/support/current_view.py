"""How tests read a stream's current table as users do: the README's query over Parquet (DuckDB), and
the live rows of an Iceberg table (pyiceberg, position deletes applied)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa


def current_view_sql(folder: str, columns: list[str], key: list[str], unchanged: bool = True) -> str:
    """The documented query: newest version per key, unchanged TOAST values carried forward (streams
    without ``_olake_toast_unchanged``, as MongoDB's, ``unchanged=False``: the query without FILTER)."""
    def q(name: str) -> str:
        return '"' + name.replace('"', '""') + '"'

    def lit(name: str) -> str:
        return "'" + name.replace("'", "''") + "'"

    keys = ", ".join(q(k) for k in key)
    def value(c: str) -> str:
        kept = f" FILTER (WHERE NOT list_contains(coalesce(_olake_toast_unchanged, []), {lit(c)}))" if unchanged else ""
        return f"arg_max_null({q(c)}, _olake_op_id){kept} AS {q(c)}"

    values = ",\n  ".join(value(c) for c in columns if c not in key)
    return (f"SELECT {keys},\n  {values}\nFROM read_parquet({lit(folder + '/part-*.parquet')}, union_by_name = true)\n"
            f"GROUP BY {keys}\nHAVING arg_max_null(_olake_op, _olake_op_id) <> 'd'")


def current_view(folder: str, columns: list[str], key: list[str], unchanged: bool = True) -> pa.Table:
    """Run the documented query with DuckDB; columns come back in ``columns`` order."""
    table = duckdb.sql(current_view_sql(folder, columns, key, unchanged)).to_arrow_table()
    return table.select(columns)


def iceberg_table(root: Path, namespace: str, name: str):
    """The pyiceberg table of a stream in the embedded catalog of an Iceberg destination at ``root``."""
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("olake", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/warehouse")
    return catalog.load_table((namespace, name))


def iceberg_rows(root: Path, namespace: str, name: str) -> pa.Table:
    """Every live row of a stream's Iceberg table (position deletes applied): its current contents."""
    return iceberg_table(root, namespace, name).scan().to_arrow()
