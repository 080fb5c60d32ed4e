"""Incremental sync end to end: many rows share the boundary cursor value, and none of them is lost.

The full load records the largest ``updated_at`` as the stream's position. Rows then arrive WITH
THAT SAME value (the boundary), with larger values, and existing rows move their cursor forward. The
next pass re-reads the boundary on purpose (``cursor >= position``), so the destination's latest
version of every key equals the source and the state's position becomes the new maximum.
"""

from __future__ import annotations

import json

import psycopg
import pytest

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


# ------------------------------------------------------------- a clock stepping back between passes

HOUR_MS = 3_600_000
PASS_CLOCK_MS = 1_800_000_000_000


def _incremental_catalog(source):
    from olake_cli.core.catalog import parse_catalog

    catalog = parse_catalog(source.discover())
    catalog.streams = [s for s in catalog.streams if s.name == "items"]
    catalog.streams[0].sync_mode, catalog.streams[0].cursor_field = "incremental", ["updated_at"]
    return catalog


def _one_pass(path: str, source, catalog, dst_config: dict, state_path, clock_ms: int) -> None:
    """One incremental pass in-process with the reader's clock at ``clock_ms``: ``read | write``
    through a byte buffer, or ``sync`` (both pipelines joined by their in-memory pipe)."""
    import io

    from olake_cli.core.messages import MessageWriter
    from olake_cli.core.registry import make_destination
    from olake_cli.core.state import FileStateStore
    from olake_cli.engine.chunk_runner import SparkChunkRunner
    from olake_cli.pipeline.read import ReadPipeline
    from olake_cli.pipeline.sync import run_in_process
    from olake_cli.pipeline.write import WritePipeline

    store = FileStateStore(str(state_path))
    destination = make_destination(dst_config["type"], dst_config, lambda line: None)
    runner = SparkChunkRunner(lambda: pytest.fail("an incremental pass started Spark"))
    if path == "sync":
        run_in_process(source, destination, catalog, store.load(), store, None, runner,
                       MessageWriter(io.BytesIO()), lambda line: None, clock=lambda: clock_ms)
        return
    piped = io.BytesIO()
    ReadPipeline(source, catalog, store.load(), MessageWriter(piped), runner, lambda line: None,
                 clock=lambda: clock_ms).run()
    WritePipeline(destination, None, store, MessageWriter(io.BytesIO()), lambda line: None).run(
        io.BytesIO(piped.getvalue()))


@pytest.mark.parametrize("destination", ["parquet", "iceberg"])
@pytest.mark.parametrize("path", ["read|write", "sync"])
def test_a_clock_stepping_back_never_ranks_a_newer_pass_below_an_older_one(pg_cluster, pg_db, tmp_path,
                                                                          path, destination):
    """Pass 2 runs with the clock an hour behind pass 1: its rows must still win in the current table."""
    from olake_cli.sources.postgres.source import PostgresSource
    from tests.support.current_view import current_view, iceberg_rows

    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("""CREATE TABLE items (id int PRIMARY KEY, updated_at timestamptz NOT NULL, v text);
                        INSERT INTO items SELECT g, '2024-06-01 10:00+00', 'first ' || g
                        FROM generate_series(1, 50) g;""")
    source = PostgresSource(pg_cluster.source_config(pg_db))
    catalog = _incremental_catalog(source)
    state_path = tmp_path / "st.json"  # a stream already past its full load: passes need no Spark
    write_json(state_path, {"level": "global", "version": "v1", "streams": [{
        "sync_type": "incremental", "stream_name": "items", "stream_namespace": "public",
        "stream_state": {"cursor_field": "2024-01-01 00:00:00+00"}}]})
    root = tmp_path / "out"
    dst_config = {"type": destination, "path": str(root)}

    _one_pass(path, source, catalog, dst_config, state_path, PASS_CLOCK_MS)
    with psycopg.connect(dsn, autocommit=True) as conn:  # the boundary value is read again: all 50 rows
        conn.execute("UPDATE items SET v = 'second ' || id WHERE id <= 10")
    _one_pass(path, source, catalog, dst_config, state_path, PASS_CLOCK_MS - HOUR_MS)

    columns = ["id", "updated_at", "v"]
    if destination == "parquet":
        current = current_view(str(root / "public" / "items"), columns, ["id"])
    else:
        current = iceberg_rows(root, "public", "items").select(columns)
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert_table_matches(conn, "public", "items", catalog.streams[0].json_schema, current)
    stream_state = json.loads(state_path.read_text())["streams"][0]["stream_state"]
    assert stream_state["pass_op_id"] == [PASS_CLOCK_MS + 1, 0]
