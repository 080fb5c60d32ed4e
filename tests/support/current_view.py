"""The README's current-table query (DuckDB), built for one stream, so tests read what users read."""

from __future__ import annotations

import duckdb
import pyarrow as pa


def current_view_sql(folder: str, columns: list[str], key: list[str]) -> str:
    """The documented query: newest version per key, unchanged TOAST values carried forward."""
    def q(name: str) -> str:
        return '"' + name.replace('"', '""') + '"'

    def lit(name: str) -> str:
        return "'" + name.replace("'", "''") + "'"

    keys = ", ".join(q(k) for k in key)
    values = ",\n  ".join(
        f"arg_max_null({q(c)}, _olake_op_id) FILTER "
        f"(WHERE NOT list_contains(coalesce(_olake_toast_unchanged, []), {lit(c)})) AS {q(c)}"
        for c in columns if c not in key)
    return (f"SELECT {keys},\n  {values}\nFROM read_parquet({lit(folder + '/*.parquet')}, union_by_name = true)\n"
            f"GROUP BY {keys}\nHAVING arg_max_null(_olake_op, _olake_op_id) <> 'd'")


def current_view(folder: str, columns: list[str], key: list[str]) -> pa.Table:
    """Run the documented query with DuckDB; columns come back in ``columns`` order."""
    table = duckdb.sql(current_view_sql(folder, columns, key)).to_arrow_table()
    return table.select(columns)
