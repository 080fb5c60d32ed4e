"""``olake state recover`` rebuilds a usable state from the Parquet destination (seeds/000)."""

from __future__ import annotations

import json

import psycopg

from tests.support.cdc import discover_catalog, make_accounts, sync_once
from tests.support.cli import messages, run_olake, write_json
from tests.support.verify import assert_table_matches, latest_versions, read_parquet


def test_recover_state_then_continue_change_capture(pg_cluster, pg_db, tmp_path):
    dsn = pg_cluster.dsn(pg_db)
    make_accounts(dsn, "acct", 3000)
    make_accounts(dsn, "quiet", 40)  # a cdc stream that sees no change
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot="slot_recover", publication="slot_recover_pub", create_slot_and_publication=True))
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "out")})
    catalog = discover_catalog(src, tmp_path / "cat.json", {"acct": "cdc", "quiet": "cdc"})
    state = tmp_path / "st.json"
    sync_once(src, tmp_path / "cat.json", dst, state)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE acct SET balance = balance * 2 WHERE id <= 500")
        conn.execute("DELETE FROM acct WHERE id BETWEEN 501 AND 600")
    sync_once(src, tmp_path / "cat.json", dst, state)
    committed = json.loads(state.read_text())["streams"]

    state.unlink()  # the state file is lost
    recovered = run_olake("state", "recover", "--config", dst, "--catalog", str(tmp_path / "cat.json"))
    assert recovered.returncode == 0, recovered.stderr.decode()
    [message] = messages(recovered.stdout)
    # each stream's manifest holds the state committed with its files: positions come back exactly,
    # the quiet stream's too (it has no change row to prove a position)
    by_name = lambda streams: sorted(streams, key=lambda s: s["stream_name"])  # noqa: E731
    assert by_name(message["state"]["streams"]) == by_name(committed)
    assert {s["sync_type"] for s in committed} == {"cdc"}
    state.write_bytes(recovered.stdout)

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO acct VALUES (9001, 1.50, 'after recovery')")
        conn.execute("UPDATE acct SET note = 'changed after recovery' WHERE id = 7")
    result = sync_once(src, tmp_path / "cat.json", dst, state)
    assert b"full load" not in result.read_stderr, "a recovered cdc stream must not be copied again"
    quiet = latest_versions(read_parquet(str(tmp_path / "out" / "public" / "quiet")), ["id"])
    assert quiet.num_rows == 40
    schema = next(s for s in catalog["streams"] if s["name"] == "acct")["json_schema"]
    current = latest_versions(read_parquet(str(tmp_path / "out" / "public" / "acct")), ["id"])
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert_table_matches(conn, "public", "acct", schema, current.select(list(schema["properties"])))
        conn.execute("SELECT pg_drop_replication_slot('slot_recover')")


def test_recover_with_nothing_written_gives_empty_state(tmp_path):
    catalog = {"streams": [{"name": "t", "namespace": "public", "sync_mode": "cdc",
                            "supported_sync_modes": ["full_refresh", "cdc"],
                            "json_schema": {"type": "object", "properties": {"id": {"type": "integer", "x-olake-type": "int32"}}}}]}
    write_json(tmp_path / "cat.json", catalog)
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "empty")})
    result = run_olake("state", "recover", "--config", dst, "--catalog", str(tmp_path / "cat.json"))
    assert result.returncode == 0, result.stderr.decode()
    [message] = messages(result.stdout)
    assert message["state"]["streams"] == []
    assert b"copies it in full" in result.stderr
