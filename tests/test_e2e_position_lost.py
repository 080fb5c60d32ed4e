"""Lost change positions end to end: a dropped slot, a slot advanced past the stream, an invalidated slot.

With ``on_position_lost: resync`` (the default) the stream is copied again with a new full load and the
files of the earlier load are removed once it completes, so rows deleted meanwhile do not come back.
With ``on_position_lost: fail`` ``read`` stops with a config_error saying why and the state stays as it was.
"""

from __future__ import annotations

import json
import os

import psycopg
import pytest

from tests.support.cdc import discover_catalog, make_accounts, sync_once
from tests.support.cli import read_into_write, run_olake, trace_errors, write_json
from tests.support.pgcluster import create_database, start_cluster
from tests.support.verify import assert_table_matches, latest_versions, read_parquet


def _configs(cluster, db, tmp_path, slot: str) -> tuple[str, str, str]:
    """(resync source config, fail source config, parquet config) paths."""
    base = cluster.source_config(db, replication_slot=slot, publication=f"{slot}_pub",
                                 create_slot_and_publication=True, max_parallel=1)
    src = write_json(tmp_path / "src.json", base)
    src_fail = write_json(tmp_path / "src_fail.json", {**base, "on_position_lost": "fail"})
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "out")})
    return src, src_fail, dst


def _run(dsn: str, *statements: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def _slot(dsn: str, slot: str) -> tuple | None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT (confirmed_flush_lsn - '0/0'::pg_lsn)::text, wal_status FROM pg_replication_slots "
                            "WHERE slot_name = %s", (slot,)).fetchone()


def _acct_state(state_path) -> dict:
    return next(s for s in json.loads(state_path.read_text())["streams"] if s["stream_name"] == "acct")


def _assert_destination_equals_source(dsn: str, catalog: dict, out_dir) -> None:
    schema = next(s for s in catalog["streams"] if s["name"] == "acct")["json_schema"]
    data = read_parquet(str(out_dir / "public" / "acct"))
    current = latest_versions(data, ["id"]).select(list(schema["properties"]))
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert_table_matches(conn, "public", "acct", schema, current)


def _assert_resynced(result, state_path, out_dir, old_load_id: str, reason: str) -> str:
    """The run said why it re-synced, the stream has a new load and only that load's files remain."""
    stderr = result.read_stderr.decode()
    assert "change position lost" in stderr and reason in stderr, stderr[-2000:]
    assert "full load in" in stderr
    entry = _acct_state(state_path)
    load_id = entry["stream_state"]["load_id"]
    assert entry["sync_type"] == "cdc" and load_id != old_load_id and not entry["stream_state"].get("chunks")
    files = [n for n in os.listdir(out_dir / "public" / "acct") if n.endswith(".parquet")]
    assert files and all(n.startswith(f"part-{load_id}-") for n in files), files
    return load_id


def _assert_fails_unchanged(src_fail: str, catalog: str, state_path, reason: str) -> None:
    """``read`` with on_position_lost = fail: non-zero exit, a config_error saying why, state untouched."""
    before = state_path.read_bytes()
    result = run_olake("read", "--config", src_fail, "--catalog", catalog, "--state", str(state_path))
    assert result.returncode != 0
    errors = trace_errors(result.stdout)
    assert len(errors) == 1 and errors[0]["trace"]["error"]["failure_type"] == "config_error"
    message = errors[0]["trace"]["error"]["message"]
    assert "change position lost" in message and reason in message and "on_position_lost" in message, message
    assert state_path.read_bytes() == before


def test_dropped_then_advanced_slot_resyncs_or_fails(pg_cluster, pg_db, tmp_path):
    dsn, slot = pg_cluster.dsn(pg_db), "slot_lost"
    make_accounts(dsn, "acct", 2000)
    src, src_fail, dst = _configs(pg_cluster, pg_db, tmp_path, slot)
    catalog = discover_catalog(src, tmp_path / "cat.json", {"acct": "cdc"}, only={"acct"})
    cat, state, out = str(tmp_path / "cat.json"), tmp_path / "st.json", tmp_path / "out"
    sync_once(src, tmp_path / "cat.json", dst, state)
    _run(dsn, "UPDATE acct SET balance = balance + 10, note = 'cdc 1' WHERE id <= 100",
         "DELETE FROM acct WHERE id BETWEEN 101 AND 150",
         "INSERT INTO acct SELECT g, g, 'new ' || g FROM generate_series(5001, 5100) g")
    sync_once(src, tmp_path / "cat.json", dst, state)  # change capture: the old load now holds 'u' rows
    first_load = _acct_state(state)["stream_state"]["load_id"]

    # (a) the slot is dropped; rows change and disappear meanwhile
    _run(dsn, f"SELECT pg_drop_replication_slot('{slot}')",
         "UPDATE acct SET balance = 0, note = 'after drop' WHERE id <= 50",
         "DELETE FROM acct WHERE id BETWEEN 51 AND 60 OR id BETWEEN 151 AND 200 OR id BETWEEN 5001 AND 5010",
         "INSERT INTO acct SELECT g, -g, 'after drop ' || g FROM generate_series(6001, 6050) g")
    _assert_fails_unchanged(src_fail, cat, state, f"replication slot '{slot}' does not exist")
    before = state.read_bytes()
    piped = read_into_write(["--config", src_fail, "--catalog", cat, "--state", str(state)],
                            ["--config", dst, "--state", str(state)])
    assert piped.read_code != 0 and piped.write_code != 0 and state.read_bytes() == before
    assert "change position lost" in trace_errors(piped.write_stdout)[0]["trace"]["error"]["internal_message"]
    assert _slot(dsn, slot) is None, "with on_position_lost = fail nothing is created"
    result = sync_once(src, tmp_path / "cat.json", dst, state)
    second_load = _assert_resynced(result, state, out, first_load, "does not exist")
    _assert_destination_equals_source(dsn, catalog, out)

    # (c) the slot is moved past the stream's committed position by hand
    _run(dsn, "UPDATE acct SET note = 'skipped' WHERE id BETWEEN 1000 AND 1100",
         "DELETE FROM acct WHERE id BETWEEN 1101 AND 1200",
         f"SELECT pg_replication_slot_advance('{slot}', pg_current_wal_lsn())")
    _assert_fails_unchanged(src_fail, cat, state, "past the stream's committed position")
    result = sync_once(src, tmp_path / "cat.json", dst, state)
    _assert_resynced(result, state, out, second_load, "past the stream's committed position")
    _assert_destination_equals_source(dsn, catalog, out)
    _run(dsn, f"SELECT pg_drop_replication_slot('{slot}')")


@pytest.fixture()
def tiny_wal_cluster():
    """A separate cluster that invalidates slots holding more than 1MB of WAL."""
    cluster = start_cluster({"max_slot_wal_keep_size": "1MB"})
    create_database(cluster, "lostwal")
    yield cluster
    cluster.stop()


def test_invalidated_slot_resyncs(tiny_wal_cluster, tmp_path):
    dsn, slot = tiny_wal_cluster.dsn("lostwal"), "slot_walgone"
    make_accounts(dsn, "acct", 2000)
    src, src_fail, dst = _configs(tiny_wal_cluster, "lostwal", tmp_path, slot)
    catalog = discover_catalog(src, tmp_path / "cat.json", {"acct": "cdc"}, only={"acct"})
    state, out = tmp_path / "st.json", tmp_path / "out"
    sync_once(src, tmp_path / "cat.json", dst, state)
    first_load = _acct_state(state)["stream_state"]["load_id"]
    _run(dsn, "UPDATE acct SET note = 'lost change' WHERE id <= 300", "DELETE FROM acct WHERE id > 1900")
    for _ in range(3):
        _run(dsn, "SELECT pg_switch_wal()", "CHECKPOINT")
        if _slot(dsn, slot)[1] == "lost":
            break
    assert _slot(dsn, slot)[1] == "lost", "the server must have invalidated the slot"
    _assert_fails_unchanged(src_fail, str(tmp_path / "cat.json"), state, "wal_status = lost")

    result = sync_once(src, tmp_path / "cat.json", dst, state)
    assert "dropped the invalidated replication slot" in result.read_stderr.decode()
    _assert_resynced(result, state, out, first_load, "wal_status = lost")
    assert _slot(dsn, slot)[1] in ("reserved", "extended")
    _assert_destination_equals_source(dsn, catalog, out)
