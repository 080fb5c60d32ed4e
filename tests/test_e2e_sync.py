"""``olake sync``: one process, full-load chunks written by the Spark tasks, changes through the pipe."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg

from tests.support.cdc import discover_catalog, make_accounts
from tests.support.cli import messages, run_olake, write_json
from tests.support.verify import assert_table_matches, latest_versions, read_parquet

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "postgres" / "demo.sql"


def test_sync_copies_every_type_exactly(pg_cluster, pg_db, tmp_path):
    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(FIXTURE.read_text())
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(pg_db, schemas=["shop", "public"],
                                                                       chunk_rows=4000))
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "out")})
    catalog = discover_catalog(src, tmp_path / "cat.json", {})
    state = tmp_path / "st.json"
    result = run_olake("sync", "--source", src, "--destination", dst, "--catalog", str(tmp_path / "cat.json"),
                       "--state", str(state))
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    out = messages(result.stdout)
    assert out and {m["type"] for m in out} == {"STATE", "TRACE"}
    assert {m["trace"]["type"] for m in out if m["type"] == "TRACE"} == {"ESTIMATE", "STREAM_STATUS"}
    assert b"wrote 0 record(s)" in result.stderr, "full-load rows are written by the tasks, not piped"
    final = json.loads(state.read_text())
    assert len(final["streams"]) == len(catalog["streams"])
    assert all(not s["stream_state"].get("chunks") for s in final["streams"])
    with psycopg.connect(dsn, autocommit=True) as conn:
        for entry in catalog["streams"]:
            data = read_parquet(str(tmp_path / "out" / entry["namespace"] / entry["name"]))
            assert set(data.column("_olake_op").to_pylist()) <= {"r"}
            assert_table_matches(conn, entry["namespace"], entry["name"], entry["json_schema"], data)


def test_sync_full_load_then_changes(pg_cluster, pg_db, tmp_path):
    dsn = pg_cluster.dsn(pg_db)
    make_accounts(dsn, "acct", 6000)
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot="slot_sync", publication="slot_sync_pub", create_slot_and_publication=True,
        chunk_rows=1500))
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "out")})
    catalog = discover_catalog(src, tmp_path / "cat.json", {"acct": "cdc"})
    state = tmp_path / "st.json"
    args = ["sync", "--source", src, "--destination", dst, "--catalog", str(tmp_path / "cat.json"),
            "--state", str(state)]
    first = run_olake(*args)
    assert first.returncode == 0, first.stderr.decode()[-3000:]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE acct SET balance = balance + 10 WHERE id % 3 = 0")
        conn.execute("DELETE FROM acct WHERE id BETWEEN 100 AND 199")
        conn.execute("INSERT INTO acct SELECT g, 1, 'synced later' FROM generate_series(7001, 7200) g")
    second = run_olake(*args)
    assert second.returncode == 0, second.stderr.decode()[-3000:]
    assert b"change capture: 2300 change(s)" in second.stderr
    schema = catalog["streams"][0]["json_schema"]
    data = read_parquet(str(tmp_path / "out" / "public" / "acct"))
    current = latest_versions(data, ["id"]).select(list(schema["properties"]))
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert_table_matches(conn, "public", "acct", schema, current)
        conn.execute("SELECT pg_drop_replication_slot('slot_sync')")
