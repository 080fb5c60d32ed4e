"""Incremental cursor edge cases end to end: NaN/infinity cursors, the look-back window, a changed cursor.

``readings`` has a float8 cursor holding NaN and ±infinity and a ``cursor_lookback`` of 15; ``events``
a timestamptz cursor holding ±infinity and a ``cursor_lookback`` of 10 minutes. Three passes
(``read | write`` twice, then ``sync``):
1. full loads: the saved positions are the largest FINITE values;
2. new rows above the position, late commits inside the windows (5 minutes, 10 below) and outside
   (20 minutes), non-finite rows changed: everything but the row outside the window is copied;
3. ``readings`` switches its cursor to ``seq``: the stream is loaded anew on the new cursor.
"""

from __future__ import annotations

import json

import psycopg
import pyarrow as pa
import pyarrow.compute as pc

from tests.support.cdc import discover_catalog
from tests.support.cli import read_into_write, run_olake, write_json
from tests.support.verify import assert_table_matches, read_parquet

T0 = "2024-05-01 12:00:00+00"


def _make_tables(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"""
            CREATE TABLE readings (id int PRIMARY KEY, reading float8, seq bigint NOT NULL, note text);
            INSERT INTO readings SELECT g, g * 1.5, g * 10, 'r' || g FROM generate_series(1, 300) g;
            INSERT INTO readings VALUES (301, 'NaN', 3010, 'nan'), (302, 'Infinity', 3020, 'inf'),
                                        (303, '-Infinity', 3030, '-inf');
            CREATE TABLE events (id int PRIMARY KEY, updated_at timestamptz, note text);
            INSERT INTO events SELECT g, timestamptz '{T0}' - (400 - g) * interval '1 second', 'e' || g
              FROM generate_series(1, 400) g;
            INSERT INTO events VALUES (401, 'infinity', 'inf'), (402, '-infinity', '-inf');""")


def sync_once(src: str, catalog, dst: str, state):
    """``olake read | olake write``; both must succeed (either side's stderr explains a failure)."""
    result = read_into_write(["--config", src, "--catalog", str(catalog), "--state", str(state)],
                             ["--config", dst, "--state", str(state)])
    assert (result.read_code, result.write_code) == (0, 0), (result.read_stderr + result.write_stderr).decode()
    return result


def _positions(state_path) -> dict[str, object]:
    return {s["stream_name"]: s["stream_state"]["cursor_field"]
            for s in json.loads(state_path.read_text())["streams"]}


def _latest_per_id(data: pa.Table) -> pa.Table:
    """The newest version of each id (largest _olake_op_id), without converting timestamps to Python
    (``infinity`` is outside datetime's range)."""
    order = pc.sort_indices(data, [("id", "ascending"), ("_olake_op_id", "ascending")], null_placement="at_start")
    ordered = data.take(order)
    ids = ordered.column("id").to_pylist()
    last = [i == len(ids) - 1 or ids[i] != ids[i + 1] for i in range(len(ids))]
    return ordered.filter(pa.array(last))


def _assert_stream_matches(conn, out, catalog: dict, name: str, where: str = "true") -> None:
    schema = next(s for s in catalog["streams"] if s["name"] == name)["json_schema"]
    data = _latest_per_id(read_parquet(str(out / "public" / name))).select(list(schema["properties"]))
    conn.execute(f"DROP TABLE IF EXISTS expected_{name}")
    conn.execute(f"CREATE TABLE expected_{name} AS SELECT * FROM {name} WHERE {where}")
    assert_table_matches(conn, "public", f"expected_{name}", schema, data)


def test_nonfinite_cursors_lookback_and_a_changed_cursor(pg_cluster, pg_db, tmp_path):
    dsn = pg_cluster.dsn(pg_db)
    _make_tables(dsn)
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(pg_db, max_parallel=1))
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "out")})
    cat_path, state = tmp_path / "cat.json", tmp_path / "st.json"
    catalog = discover_catalog(src, cat_path, {"readings": "incremental", "events": "incremental"},
                               cursor={"readings": "reading", "events": "updated_at"},
                               only={"readings", "events"})
    next(s for s in catalog["streams"] if s["name"] == "events")["cursor_lookback"] = "10 minutes"
    next(s for s in catalog["streams"] if s["name"] == "readings")["cursor_lookback"] = 15
    cat_path.write_text(json.dumps(catalog))

    sync_once(src, cat_path, dst, state)
    assert _positions(state) == {"readings": "450", "events": T0}

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"""
            INSERT INTO readings SELECT g, g * 1.5, g * 10, 'new ' || g FROM generate_series(304, 320) g;
            INSERT INTO readings VALUES (400, 440, 4000, 'late, inside the window of 15');
            UPDATE readings SET note = 'changed nan' WHERE id IN (301, 303);
            INSERT INTO events VALUES (403, timestamptz '{T0}' + interval '1 minute', 'new'),
                                      (404, timestamptz '{T0}' - interval '5 minutes', 'late, in window'),
                                      (405, timestamptz '{T0}' - interval '20 minutes', 'late, outside');
            UPDATE events SET note = 'changed inf' WHERE id = 401;""")
    second = sync_once(src, cat_path, dst, state)
    assert b"look-back 10 minutes" in second.read_stderr
    assert _positions(state) == {"readings": "480", "events": "2024-05-01 12:01:00+00"}
    with psycopg.connect(dsn, autocommit=True) as conn:
        _assert_stream_matches(conn, tmp_path / "out", catalog, "readings")
        # the documented limit: a late commit older than the window is not seen by cursor-based sync
        _assert_stream_matches(conn, tmp_path / "out", catalog, "events", "id <> 405")

    next(s for s in catalog["streams"] if s["name"] == "readings")["cursor_field"] = ["seq"]
    cat_path.write_text(json.dumps(catalog))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE readings SET seq = seq + 1, note = 'seq moved' WHERE id <= 5")
    third = run_olake("sync", "--source", src, "--destination", dst, "--catalog", str(cat_path),
                      "--state", str(state))
    assert third.returncode == 0, third.stderr.decode()[-3000:]
    assert b"cursor changed from 'reading' to 'seq'" in third.stderr
    assert third.stderr.count(b"olake: error") == 0
    assert _positions(state)["readings"] == "4000"
    with psycopg.connect(dsn, autocommit=True) as conn:
        _assert_stream_matches(conn, tmp_path / "out", catalog, "readings")
