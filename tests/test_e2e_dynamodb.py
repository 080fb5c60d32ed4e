"""DynamoDB end to end: the real commands against a real endpoint (moto's server), compared item by item.

A full load of every attribute type (``read | write`` to Parquet, ``sync`` to Iceberg); a killed INIT_SYNC
resuming inside its segment with nothing lost or doubled; puts, updates and deletes during and after
INIT_SYNC converging (``sync`` to Parquet; ``read | write`` to Iceberg, between a killed INIT_SYNC and its
resumption and while it resumes); a position older than the safe
zone running INIT_SYNC again; ``init_sync: skip``; the seed's states in ``olake state show``.

What moto does not emulate, and how the path is covered: it never trims stream records, so the
safe-zone paths are reached through the stored position (its time, ``cursor_field``, moved back beyond
``safe_zone_hours`` here, in the state file and in the destination's record that ``sync`` resumes from; a shard id the stream does not have, and a stream ARN that is not the
table's, in test_dynamodb_capture.py); it keeps one shard per table, so lineage order is covered by
``lineage_order``'s unit test.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.support.cdc import sync_once
from tests.support.cli import messages, run_olake, trace_errors, write_json
from tests.support.current_view import iceberg_rows
from tests.support.dynamo import (NAMESPACE, ItemWriter, age_position, all_items, assert_equals_table, create_table,
                                  discovered_catalog, dynamo_source, every_type_items, first_schema, parquet_current,
                                  put_items, seed_accounts)
from tests.support.verify import read_parquet


def _parquet(tmp_path: Path, name: str = "lake") -> tuple[str, Path]:
    root = tmp_path / name
    return write_json(tmp_path / f"{name}.json", {"type": "parquet", "path": str(root)}), root


def _iceberg(tmp_path: Path, name: str = "ice") -> tuple[str, Path]:
    root = tmp_path / name
    return write_json(tmp_path / f"{name}.json", {"type": "iceberg", "path": str(root)}), root


def _sync(src: str, catalog: Path, dst: str, state: Path) -> str:
    result = run_olake("sync", "--source", src, "--destination", dst, "--catalog", str(catalog),
                       "--state", str(state))
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    return result.stderr.decode()


def test_full_load_of_every_attribute_type(moto_server, dynamo_table, tmp_path):
    create_table(moto_server.client(), dynamo_table)
    put_items(moto_server.client(), dynamo_table, every_type_items(60))
    src = dynamo_source(tmp_path, moto_server, dynamo_table, segments=3, checkpoint_items=1000)
    full = discovered_catalog(tmp_path, src, "full_refresh")
    schema = first_schema(full)
    types = {name: prop["x-olake-type"] for name, prop in schema["properties"].items()}
    assert types == {"pk": "string", "sk": "decimal(38,0)", "addr": "document", "blobs": "array<bytes>",
                     "events": "array<document>", "gone": "json", "huge": "numeric", "mixed": "json",
                     "ok": "bool", "price": "decimal(38,3)", "raw": "bytes", "s": "string",
                     "scores": "array<decimal(38,2)>", "tags": "array<string>", "varmap": "json",
                     "words": "array<string>"}

    dst, root = _parquet(tmp_path)
    state = tmp_path / "state.json"
    sync_once(src, full, dst, state)
    assert_equals_table(read_parquet(str(root / NAMESPACE / dynamo_table)).to_pylist(), moto_server, dynamo_table,
                        schema)

    # cdc into Iceberg: INIT_SYNC, then SYNC replays the inserts (made within the replay margin) on top
    ice, ice_root = _iceberg(tmp_path)
    _sync(src, discovered_catalog(tmp_path, src, "cdc"), ice, tmp_path / "ice-state.json")
    assert_equals_table(iceberg_rows(ice_root, NAMESPACE, dynamo_table).to_pylist(), moto_server, dynamo_table,
                        schema)


def test_killed_init_sync_resumes_inside_its_segment(moto_server, dynamo_table, tmp_path, monkeypatch):
    client = moto_server.client()
    create_table(client, dynamo_table)
    put_items(client, dynamo_table, [{"pk": {"S": f"p{i % 29}"}, "sk": {"N": str(i)}, "v": {"S": f"value {i}"}}
                                     for i in range(200)])
    src = dynamo_source(tmp_path, moto_server, dynamo_table, checkpoint_items=25, page_items=25)
    catalog = discovered_catalog(tmp_path, src, "full_refresh")
    dst, root = _parquet(tmp_path)
    state = tmp_path / "state.json"
    monkeypatch.setenv("OLAKE_TEST_CRASH_AT", "state-saved")
    monkeypatch.setenv("OLAKE_TEST_CRASH_AFTER", "4")
    killed = run_olake("sync", "--source", src, "--destination", dst, "--catalog", str(catalog),
                       "--state", str(state))
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    monkeypatch.delenv("OLAKE_TEST_CRASH_AT")
    chunks = json.loads(state.read_text())["streams"][0]["stream_state"]["chunks"]
    inside = [c for c in chunks if c["min"][2] is not None]
    assert inside, f"no chunk resumes inside a segment: {chunks}"
    assert any(c["status"] == "pending" for c in inside) and any(c["status"] == "succeed" for c in chunks)
    committed = read_parquet(str(root / NAMESPACE / dynamo_table)).num_rows
    assert 0 < committed < 200

    shown = run_olake("state", "show", str(state)).stdout.decode()
    assert "INIT_SYNC" not in shown and "FULL_LOAD" in shown  # a full_refresh stream's load
    stderr = _sync(src, catalog, dst, state)
    assert "resuming full load" in stderr
    rows = read_parquet(str(root / NAMESPACE / dynamo_table)).to_pylist()
    assert_equals_table(rows, moto_server, dynamo_table, first_schema(catalog))  # 200 rows: none lost, none doubled


def _assert_fails_unchanged(src_fail: str, catalog: Path, state: Path, reason: str) -> None:
    """``read`` with on_position_lost = fail: non-zero exit, one config_error saying why, the state untouched."""
    before = state.read_bytes()
    result = run_olake("read", "--config", src_fail, "--catalog", str(catalog), "--state", str(state))
    assert result.returncode != 0
    errors = trace_errors(result.stdout)
    assert len(errors) == 1 and errors[0]["trace"]["error"]["failure_type"] == "config_error", result.stdout
    message = errors[0]["trace"]["error"]["message"]
    assert "change position lost" in message and reason in message and "on_position_lost = fail" in message
    assert not [m for m in messages(result.stdout) if m["type"] in ("RECORD", "STATE")]
    assert state.read_bytes() == before


def test_changes_during_and_after_init_sync_converge_with_sync_to_parquet(moto_server, dynamo_table, tmp_path):
    seed_accounts(moto_server, dynamo_table, 150)
    src = dynamo_source(tmp_path, moto_server, dynamo_table)
    catalog = discovered_catalog(tmp_path, src, "cdc")
    schema = first_schema(catalog)
    dst, root = _parquet(tmp_path)
    state = tmp_path / "state.json"
    writer = ItemWriter(moto_server, dynamo_table, 150)
    writer.start()
    try:
        _sync(src, catalog, dst, state)  # INIT_SYNC with changes under way, then SYNC
    finally:
        writer.stop()
    assert writer.ops > 20
    for _ in range(60):  # after INIT_SYNC
        writer.change()
    stderr = _sync(src, catalog, dst, state)
    assert "re-syncing" not in stderr
    assert_equals_table(parquet_current(root, dynamo_table), moto_server, dynamo_table, schema)
    shown = run_olake("state", "show", str(state)).stdout.decode()
    assert "SYNC" in shown and "INIT_SYNC" not in shown

    # a stored position older than safe_zone_hours (moto never trims: the position is aged instead)
    load_id = age_position(state, root, dynamo_table, 21)["load_id"]
    for _ in range(30):
        writer.change()
    aged = "the stored position is 21.0 hours old, beyond safe_zone_hours = 20"
    src_fail = dynamo_source(tmp_path, moto_server, dynamo_table, name="src-fail", on_position_lost="fail")
    _assert_fails_unchanged(src_fail, catalog, state, aged)
    stderr = _sync(src, catalog, dst, state)
    assert f"change position lost: {aged}" in stderr
    assert "re-syncing with a fresh full load" in stderr
    assert json.loads(state.read_text())["streams"][0]["stream_state"]["load_id"] != load_id  # a new INIT_SYNC
    assert_equals_table(parquet_current(root, dynamo_table), moto_server, dynamo_table, schema)


def test_changes_during_and_after_a_killed_init_sync_converge_with_read_write_to_iceberg(
        moto_server, dynamo_table, tmp_path):
    from tests.support.cli import kill_read_after_chunks

    seed_accounts(moto_server, dynamo_table, 150)
    # as Spark tasks, chunks come slowly enough for the kill to land in the middle of the load
    src = dynamo_source(tmp_path, moto_server, dynamo_table, in_process_rows=0)
    catalog = discovered_catalog(tmp_path, src, "cdc")
    schema = first_schema(catalog)
    shown = run_olake("state", "show", str(tmp_path / "state.json"), "--catalog", str(catalog)).stdout.decode()
    assert "DISCOVERY" in shown
    dst, root = _iceberg(tmp_path)
    state = tmp_path / "state.json"
    read_args = ["--config", src, "--catalog", str(catalog), "--state", str(state)]
    kill_read_after_chunks(read_args, ["--config", dst, "--state", str(state)], chunks=3)
    assert "INIT_SYNC" in run_olake("state", "show", str(state)).stdout.decode()
    writer = ItemWriter(moto_server, dynamo_table, 150, seed=5, pause=0.05)
    for _ in range(80):  # between the killed INIT_SYNC and its resumption
        writer.change()
    writer.start()
    try:
        sync_once(src, catalog, dst, state)  # the rest of INIT_SYNC with changes under way, then SYNC
    finally:
        writer.stop()
    assert writer.ops > 90  # 80 of them before the run
    for _ in range(60):  # after INIT_SYNC
        writer.change()
    sync_once(src, catalog, dst, state)
    assert_equals_table(iceberg_rows(root, NAMESPACE, dynamo_table).to_pylist(), moto_server, dynamo_table, schema)
    assert "SYNC" in run_olake("state", "show", str(state)).stdout.decode()


def test_init_sync_skip_captures_only_later_changes(moto_server, dynamo_table, tmp_path):
    seed_accounts(moto_server, dynamo_table, 50)
    time.sleep(1.1)  # the skip position is the current second: the seed's records are older
    src = dynamo_source(tmp_path, moto_server, dynamo_table, init_sync="skip")
    catalog = discovered_catalog(tmp_path, src, "cdc")
    dst, root = _parquet(tmp_path)
    state = tmp_path / "state.json"
    stderr = _sync(src, catalog, dst, state)
    assert "init_sync = skip" in stderr
    assert json.loads(state.read_text())["streams"][0]["sync_type"] == "cdc"
    writer = ItemWriter(moto_server, dynamo_table, 50, seed=9)
    for _ in range(40):
        writer.change()
    _sync(src, catalog, dst, state)
    rows = {(r["pk"], str(r["sk"])) for r in parquet_current(root, dynamo_table)}
    touched_items = {(i["pk"]["S"], i["sk"]["N"]) for i in all_items(moto_server.client(), dynamo_table)
                     if i["note"]["S"] != "n" + i["sk"]["N"]}  # put or updated after the skip
    assert rows == touched_items
