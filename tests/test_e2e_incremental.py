"""Incremental sync end to end: many rows share the boundary cursor value, and none of them is lost.

The full load records the largest ``updated_at`` as the stream's position. Rows then arrive WITH
THAT SAME value (the boundary), with larger values, and existing rows move their cursor forward. The
next pass re-reads the boundary on purpose (``cursor >= position``), so the destination's latest
version of every key equals the source and the state's position becomes the new maximum.
"""

from __future__ import annotations

import json

import psycopg

from tests.support.cdc import discover_catalog, sync_once
from tests.support.cli import write_json
from tests.support.verify import assert_table_matches, latest_versions, read_parquet

BOUNDARY = "2024-05-01 12:00:00.123456+00"


def _make_events(dsn: str) -> None:
    """2000 rows; the 500 newest share the largest cursor value (BOUNDARY)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"""CREATE TABLE events (id int PRIMARY KEY, updated_at timestamptz NOT NULL,
                           amount numeric(12,3), payload text);
                         INSERT INTO events SELECT g,
                           CASE WHEN g > 1500 THEN timestamptz '{BOUNDARY}'
                                ELSE timestamptz '{BOUNDARY}' - (1501 - g) * interval '1 second 7 microseconds' END,
                           g / 8.0, 'v1 ' || g
                         FROM generate_series(1, 2000) g;""")


def _max_cursor(conn: psycopg.Connection) -> str:
    return conn.execute("SELECT max(updated_at)::text FROM events").fetchone()[0]


def test_rows_sharing_the_boundary_cursor_are_not_lost(pg_cluster, pg_db, tmp_path):
    dsn = pg_cluster.dsn(pg_db)
    _make_events(dsn)
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(pg_db, max_parallel=1))
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "out")})
    catalog = discover_catalog(src, tmp_path / "cat.json", {"events": "incremental"},
                               cursor={"events": "updated_at"}, only={"events"})
    state = tmp_path / "st.json"
    sync_once(src, tmp_path / "cat.json", dst, state)
    with psycopg.connect(dsn, autocommit=True) as conn:
        first_max = _max_cursor(conn)
    entry = json.loads(state.read_text())["streams"][0]
    assert entry["sync_type"] == "incremental" and entry["stream_state"]["cursor_field"] == first_max

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"""
            INSERT INTO events SELECT g, timestamptz '{BOUNDARY}', g / 8.0, 'same cursor ' || g
              FROM generate_series(2001, 2300) g;
            INSERT INTO events SELECT g, timestamptz '{BOUNDARY}' + (g - 2300) * interval '1 microsecond',
                   g / 8.0, 'later ' || g FROM generate_series(2301, 2500) g;
            UPDATE events SET updated_at = timestamptz '{BOUNDARY}' + interval '2 minutes',
                   payload = 'moved forward', amount = -amount WHERE id BETWEEN 1 AND 100;
            UPDATE events SET updated_at = timestamptz '{BOUNDARY}', payload = 'moved to the boundary'
              WHERE id BETWEEN 1001 AND 1050;
            UPDATE events SET payload = 'changed at the boundary', amount = 0 WHERE id BETWEEN 1601 AND 1700;""")
        new_max = _max_cursor(conn)
    assert new_max > first_max
    result = sync_once(src, tmp_path / "cat.json", dst, state)
    assert b"incremental on 'updated_at'" in result.read_stderr

    entry = json.loads(state.read_text())["streams"][0]
    assert entry["sync_type"] == "incremental" and entry["stream_state"]["cursor_field"] == new_max
    data = read_parquet(str(tmp_path / "out" / "public" / "events"))
    second_pass = [r for r in data.to_pylist() if r["_olake_op_id"] is not None]
    # the second pass read the boundary again: the 500 + 300 + 50 rows at BOUNDARY, 200 later, 100 moved
    assert len(second_pass) == 500 + 300 + 50 + 200 + 100
    assert len({r["_olake_op_id"] for r in second_pass}) == 1  # one pass, one operation id
    schema = next(s for s in catalog["streams"] if s["name"] == "events")["json_schema"]
    current = latest_versions(data, ["id"]).select(list(schema["properties"]))
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert_table_matches(conn, "public", "events", schema, current)
