"""SIGKILL ``olake read`` in the middle of a multi-chunk full load, resume from the state, lose nothing."""

from __future__ import annotations

import json

import psycopg
import pyarrow.compute as pc
import pytest

from tests.support.cli import kill_read_after_chunks, read_into_write, run_olake, write_json
from tests.support.verify import assert_table_matches, distinct_rows, read_parquet

ROWS = 90_000
CHUNK_ROWS = 3_000


@pytest.fixture()
def big_table(pg_cluster, pg_db):
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
        conn.execute(f"""CREATE TABLE items (id bigint PRIMARY KEY, name text, price numeric(10,2),
                        created timestamptz);
                        INSERT INTO items SELECT g, 'item ' || g, g / 100.0,
                          timestamptz '2024-01-01 00:00:00+00' + g * interval '1 minute'
                        FROM generate_series(1, {ROWS}) g; ANALYZE items;""")
    return pg_db


def _chunks(state_path):
    try:
        state = json.loads(state_path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return []
    for stream in state.get("streams", []):
        if stream["stream_name"] == "items":
            return stream["stream_state"].get("chunks") or []
    return []


def test_sigkill_read_then_resume(pg_cluster, big_table, tmp_path):
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        big_table, chunk_strategy="primary_key", chunk_rows=CHUNK_ROWS, max_parallel=1, batch_rows=500))
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "out")})
    disc = run_olake("discover", "--config", src)
    assert disc.returncode == 0, disc.stderr
    (tmp_path / "cat.json").write_bytes(disc.stdout)
    state = tmp_path / "st.json"
    read_args = ["--config", src, "--catalog", str(tmp_path / "cat.json"), "--state", str(state)]

    code, stderr = kill_read_after_chunks(read_args, ["--config", dst, "--state", str(state)])
    errors = [line for line in stderr.decode().splitlines() if line.startswith("olake: error:")]
    assert code != 0 and len(errors) == 1, stderr.decode()[-2000:]  # no "success" for a cron job to report
    assert "the reading side stopped early" in errors[0] and "'public.items'" in errors[0], errors
    assert "run the same command again to resume" in errors[0]

    chunks_at_kill = _chunks(state)
    total = len(chunks_at_kill)
    assert total == ROWS // CHUNK_ROWS
    unfinished = [c for c in chunks_at_kill if c["status"] != "succeed"]
    assert 0 < len(unfinished) < total, "the kill must land in the middle of the load"

    result = read_into_write(read_args, ["--config", dst, "--state", str(state)])
    assert result.read_code == 0, result.read_stderr.decode()[-2000:]
    assert result.write_code == 0, result.write_stderr.decode()[-2000:]
    final = json.loads(state.read_text())
    items = next(s for s in final["streams"] if s["stream_name"] == "items")
    assert not items["stream_state"].get("chunks")

    data = read_parquet(str(tmp_path / "out" / "public" / "items"))
    catalog = json.loads((tmp_path / "cat.json").read_text())["catalog"]
    schema = next(s for s in catalog["streams"] if s["name"] == "items")["json_schema"]
    unique = distinct_rows(data, list(schema["properties"]))
    with psycopg.connect(pg_cluster.dsn(big_table), autocommit=True) as conn:
        assert_table_matches(conn, "public", "items", schema, unique)

    # Duplicates may only come from chunks that were not marked done when read was killed.
    ids = data.column("id").to_pylist()
    seen, duplicated = set(), set()
    for i in ids:
        (duplicated if i in seen else seen).add(i)
    def in_unfinished(i):
        return any((c["min"] is None or i >= int(c["min"])) and (c["max"] is None or i < int(c["max"]))
                   for c in unfinished)
    assert all(in_unfinished(i) for i in duplicated), "a chunk marked done was read twice"
    assert pc.count_distinct(data.column("id")).as_py() == ROWS
