"""Schema changes between runs, detected when a run resolves its tables (any sync mode).

A dropped column is read as NULL (warning), widened columns take their wider type (warning; the
Parquet files get it), an added column is noted and not copied; a renamed column or a type change that
would lose values fails the run with one clear line before anything is emitted, leaving the state as is.
"""

from __future__ import annotations

import psycopg
import pyarrow as pa

from tests.support.cdc import discover_catalog, sync_once
from tests.support.cli import messages, run_olake, trace_errors, write_json
from tests.support.verify import assert_table_matches, read_parquet


def test_schema_changes_between_runs(pg_cluster, pg_db, tmp_path):
    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("""CREATE TABLE gadgets (id int PRIMARY KEY, qty int, ratio real, price numeric(6,2),
                          legacy text, old_name text, note text);
                        INSERT INTO gadgets SELECT g, g * 3, g / 8.0, g / 4.0, 'legacy ' || g, 'o' || g, 'n' || g
                        FROM generate_series(1, 300) g;""")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(pg_db, max_parallel=1))
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "out")})
    cat_path, state = tmp_path / "cat.json", tmp_path / "st.json"
    catalog = discover_catalog(src, cat_path, {}, only={"gadgets"})
    schema = catalog["streams"][0]["json_schema"]
    sync_once(src, cat_path, dst, state)

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("""ALTER TABLE gadgets ALTER qty TYPE bigint, ALTER ratio TYPE double precision,
                          ALTER price TYPE numeric(10,3), DROP COLUMN legacy, ADD COLUMN extra text DEFAULT 'x';
                        INSERT INTO gadgets VALUES (301, 5000000000, 1e300, 1234567.125, 'o301', 'n301');""")
    second = sync_once(src, cat_path, dst, state)
    stderr = second.read_stderr.decode()
    assert "gadgets: column 'legacy' no longer exists in the table; it is read as NULL" in stderr
    assert "gadgets: column 'qty' widened from int32 to int64" in stderr
    assert "gadgets: column 'price' widened from decimal(6,2) to decimal(10,3)" in stderr
    assert "gadgets: column(s) extra are not in the catalog" in stderr
    data = read_parquet(str(tmp_path / "out" / "public" / "gadgets"))
    assert data.schema.field("qty").type == pa.int64() and data.schema.field("ratio").type == pa.float64()
    assert data.schema.field("price").type == pa.decimal128(10, 3)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("""CREATE TABLE expected AS SELECT id, qty, ratio, price, NULL::text AS legacy, old_name, note
                        FROM gadgets""")
        assert_table_matches(conn, "public", "expected", schema, data.select(list(schema["properties"])))

    before = state.read_bytes()
    read_args = ["read", "--config", src, "--catalog", str(cat_path), "--state", str(state)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE gadgets RENAME old_name TO new_name")
    renamed = run_olake(*read_args)
    assert renamed.returncode != 0 and [m["type"] for m in messages(renamed.stdout)] == ["TRACE"]
    assert b"column 'old_name' was renamed to 'new_name'" in renamed.stderr
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE gadgets RENAME new_name TO old_name; "
                     "ALTER TABLE gadgets ALTER note TYPE int USING length(note)")
    narrowed = run_olake(*read_args)
    assert narrowed.returncode != 0 and len(trace_errors(narrowed.stdout)) == 1
    assert trace_errors(narrowed.stdout)[0]["trace"]["error"]["failure_type"] == "config_error"
    assert b"'note' string -> int32" in narrowed.stderr
    assert state.read_bytes() == before
