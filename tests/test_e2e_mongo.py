"""MongoDB end to end: the real commands against a real wire-protocol server, compared document by document.

Full loads of a collection with mixed ``_id`` types and every BSON type (``read | write`` and ``sync``),
changes made during a full load converging through change capture, SIGKILL in the full load and in
change capture, a lost resume token (re-sync or config error) and a server without change streams.
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import subprocess
import uuid
from pathlib import Path

import pytest
from bson import Binary, Code, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp
from bson.datetime_ms import DatetimeMS
from pymongo import UpdateOne

from olake_cli.sources.mongodb.bson_types import documents_to_batch
from tests.support.cdc import discover_catalog, sync_once
from tests.support.cli import kill_read_after_chunks, olake_cmd, olake_env, run_olake, trace_errors, write_json
from tests.support.mongo import MongoWriter, assert_lake_equals_collection, connect, seed_documents
from tests.support.verify import read_parquet

DOCS = 3000


def _config(tmp_path: Path, uri: str, database: str, name: str = "src.json", **extra) -> str:
    return write_json(tmp_path / name, {"type": "mongodb", "uri": uri, "database": database,
                                        "chunk_documents": 400, **extra})


def _dest(tmp_path: Path, name: str = "lake") -> tuple[str, Path]:
    root = tmp_path / name
    return write_json(tmp_path / f"{name}.json", {"type": "parquet", "path": str(root)}), root


def _mixed_documents(count: int) -> list[dict]:
    """Documents whose ``_id``s span many BSON type brackets and whose fields hold every BSON type."""
    rng = random.Random(11)
    ids = []
    for i in range(count):
        kind = i % 8
        ids.append([ObjectId(), i, Int64(2**53 + i), i + 0.5, f"key-{i:05d}", uuid.UUID(int=i),
                    DatetimeMS(i * 86_400_000 - 10**12), Decimal128(f"{i}.25")][kind])
    docs = []
    for i, _id in enumerate(ids):
        docs.append({
            "_id": _id, "n32": i, "n64": Int64(2**62 + i), "f": [math.nan, math.inf, -math.inf, -0.0, 1.5][i % 5],
            "dec": Decimal128(["NaN", "-Infinity", "-0", "1E+6144", "12.30"][i % 5]), "s": f"text {i} é",
            "when": DatetimeMS([-62_135_596_800_000, 253_402_300_799_999, -1, i][i % 4]),  # SecantusDB: years 1..9999
            "oid": ObjectId(), "bin": Binary(bytes([i % 256]) * 3, 0), "uid": uuid.UUID(int=rng.getrandbits(128)),
            "ts": Timestamp(1_700_000_000 + i, 1), "re": Regex("^a.*", "i"), "lo": MinKey(), "hi": MaxKey(),
            "code": Code("function() {}"), "odd": Binary(b"\x01\x02", 128),
            "sub": {"a": i, "b": {"c": f"deep {i}"}}, "tags": [f"t{i}", "x"], "mixed": [i, "s"][i % 2],
            "maybe": None if i % 3 else i,
        })
    return docs


def _canon(value):
    """A value with floats compared by their text (NaN equals NaN, -0.0 differs from 0.0)."""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dict):
        return {k: _canon(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_canon(v) for v in value]
    return value


def _rows_by_id(table, columns: list[str]) -> dict:
    rows = table.select(columns).to_pylist()
    return {json.dumps(_canon(r["_id"]), default=str): _canon(r) for r in rows}


def _assert_matches_source(folder: Path, docs: list[dict], stream: dict) -> None:
    """The stream's Parquet rows equal the source documents converted to the catalog's types."""
    columns = list(stream["json_schema"]["properties"])
    expected = documents_to_batch(docs, stream["json_schema"], stream["name"])
    actual = read_parquet(str(folder))
    assert actual.num_rows == len(docs), f"{actual.num_rows} rows for {len(docs)} documents"
    got, want = _rows_by_id(actual, columns), _rows_by_id(expected, columns)
    assert got.keys() == want.keys()
    for key, row in want.items():
        assert got[key] == row, key


def test_full_load_of_mixed_ids_and_every_bson_type(mongo_server, mongo_db, tmp_path):
    docs = _mixed_documents(DOCS)
    with connect(mongo_server.uri) as client:
        client[mongo_db].things.insert_many(docs)
        source_docs = list(client[mongo_db].things.find())
    src = _config(tmp_path, mongo_server.uri, mongo_db)
    catalog = discover_catalog(src, tmp_path / "cat.json", {})
    stream = next(s for s in catalog["streams"] if s["name"] == "things")
    assert stream["namespace"] == mongo_db and stream["source_defined_primary_key"] == [["_id"]]

    dst, root = _dest(tmp_path)
    state = tmp_path / "st.json"
    sync_once(src, tmp_path / "cat.json", dst, state)
    _assert_matches_source(root / mongo_db / "things", source_docs, stream)
    saved = json.loads(state.read_text())
    assert saved["streams"][0]["sync_type"] == "full-load"

    sync_dst, sync_root = _dest(tmp_path, "synced")
    result = run_olake("sync", "--source", src, "--destination", sync_dst, "--catalog", str(tmp_path / "cat.json"),
                       "--state", str(tmp_path / "sync-st.json"))
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    _assert_matches_source(sync_root / mongo_db / "things", source_docs, stream)


def test_changes_during_full_load_converge_through_cdc(mongo_server, mongo_db, tmp_path):
    seed_documents(mongo_server.uri, mongo_db, "acct", 6000)
    src = _config(tmp_path, mongo_server.uri, mongo_db)
    discover_catalog(src, tmp_path / "cat.json", {"acct": "cdc"})
    dst, root = _dest(tmp_path)
    state = tmp_path / "st.json"
    writer = MongoWriter(mongo_server.uri, mongo_db, "acct", 6000)
    writer.start()
    try:
        sync_once(src, tmp_path / "cat.json", dst, state)
    finally:
        writer.stop()
    assert writer.ops > 0
    sync_once(src, tmp_path / "cat.json", dst, state)  # the changes after the load's position
    assert_lake_equals_collection(mongo_server.uri, mongo_db, "acct", root / mongo_db / "acct")
    saved = json.loads(state.read_text())["streams"][0]
    assert saved["sync_type"] == "cdc" and isinstance(saved["stream_state"]["cursor_field"], str)

    with connect(mongo_server.uri) as client:  # a quiet run, then more changes, in sync mode too
        coll = client[mongo_db].acct
        coll.update_many({"_id": {"$lt": 50}}, {"$set": {"note": "bulk"}})
        coll.delete_many({"_id": {"$gte": 50, "$lt": 60}})
        coll.insert_one({"_id": 10**6, "v": 1, "note": "late"})
    result = run_olake("sync", "--source", src, "--destination", dst, "--catalog", str(tmp_path / "cat.json"),
                       "--state", str(state))
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    assert_lake_equals_collection(mongo_server.uri, mongo_db, "acct", root / mongo_db / "acct")


def test_sigkill_in_full_load_and_in_change_capture_then_resume(mongo_server, mongo_db, tmp_path):
    seed_documents(mongo_server.uri, mongo_db, "big", 2000)
    src = _config(tmp_path, mongo_server.uri, mongo_db, chunk_documents=100)  # 20 chunks, as many commits
    discover_catalog(src, tmp_path / "cat.json", {"big": "cdc"})
    dst, root = _dest(tmp_path)
    state = tmp_path / "st.json"
    read_args = ["--config", src, "--catalog", str(tmp_path / "cat.json"), "--state", str(state)]
    kill_read_after_chunks(read_args, ["--config", dst, "--state", str(state)], chunks=3)
    chunks = json.loads(state.read_text())["streams"][0]["stream_state"]["chunks"]
    assert 3 <= sum(c["status"] == "succeed" for c in chunks) < len(chunks), "killed inside the load"
    sync_once(src, tmp_path / "cat.json", dst, state)
    assert_lake_equals_collection(mongo_server.uri, mongo_db, "big", root / mongo_db / "big")

    with connect(mongo_server.uri) as client:  # one cluster time per change: many checkpoints
        coll = client[mongo_db].big
        for i in range(1, 1501):
            coll.update_one({"_id": i}, {"$set": {"note": f"change {i}"}})
    env = {**olake_env(), "OLAKE_CDC_CHECKPOINT_EVERY": "50"}
    reader = subprocess.Popen(olake_cmd("read", *read_args), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              env=env)
    writer = subprocess.Popen(olake_cmd("write", "--config", dst, "--state", str(state)), stdin=reader.stdout,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    reader.stdout.close()
    checkpoints = 0
    for line in writer.stdout:
        if json.loads(line)["state"]["streams"][0]["sync_type"] == "cdc":
            checkpoints += 1
            if checkpoints == 4:
                break
    assert reader.poll() is None, "read finished before it could be killed"
    os.kill(reader.pid, signal.SIGKILL)
    reader.wait()
    writer.communicate(timeout=60)
    sync_once(src, tmp_path / "cat.json", dst, state)
    assert_lake_equals_collection(mongo_server.uri, mongo_db, "big", root / mongo_db / "big")


def _small_oplog_server(tmp_path: Path):
    from secantus import SecantusDBServer

    return SecantusDBServer(storage_path=str(tmp_path / "small-oplog"), oplog_max_entries=200)


def test_lost_resume_token_fails_or_resyncs(mongo_server, tmp_path):
    """With ``on_position_lost: fail`` the read stops with a config_error and leaves the state file alone;
    the same state with ``resync`` loads the collection anew."""
    if mongo_server.real_mongod:
        pytest.skip("needs a server whose oplog can be rolled over quickly (SecantusDB with a 200-entry oplog)")
    with _small_oplog_server(tmp_path) as server:
        seed_documents(server.uri, "shop", "orders", 500)
        src = _config(tmp_path, server.uri, "shop", on_position_lost="resync")
        discover_catalog(src, tmp_path / "cat.json", {"orders": "cdc"}, only={"orders"})
        dst, root = _dest(tmp_path)
        state = tmp_path / "st.json"
        sync_once(src, tmp_path / "cat.json", dst, state)
        with connect(server.uri) as client:
            client.shop.orders.update_one({"_id": 1}, {"$set": {"note": "before the roll-over"}})
            client.shop.noise.insert_many([{"i": i} for i in range(1500)])  # pushes the position out
            client.shop.noise.bulk_write([UpdateOne({"i": i}, {"$set": {"j": i}}) for i in range(1100)])
        before = state.read_bytes()
        failing = _config(tmp_path, server.uri, "shop", "src-fail.json", on_position_lost="fail")
        result = run_olake("read", "--config", failing, "--catalog", str(tmp_path / "cat.json"), "--state", str(state))
        assert result.returncode != 0
        errors = trace_errors(result.stdout)
        assert errors and errors[0]["trace"]["error"]["failure_type"] == "config_error"
        assert "change position lost" in result.stderr.decode()
        assert state.read_bytes() == before
        result = sync_once(src, tmp_path / "cat.json", dst, state)
        assert b"re-syncing with a fresh full load" in result.read_stderr
        assert_lake_equals_collection(server.uri, "shop", "orders", root / "shop" / "orders")


def test_cdc_on_a_server_without_change_streams_is_a_config_error(tmp_path):
    from secantus import SecantusDBServer

    with SecantusDBServer(storage_path=str(tmp_path / "standalone"), replica_set_name=None) as server:
        seed_documents(server.uri, "shop", "orders", 10)
        src = _config(tmp_path, server.uri, "shop")
        catalog = discover_catalog(src, tmp_path / "cat.json", {})
        assert "cdc" not in catalog["streams"][0]["supported_sync_modes"]
        catalog["streams"][0]["sync_mode"] = "cdc"
        catalog["streams"][0]["supported_sync_modes"].append("cdc")  # a catalog made elsewhere
        (tmp_path / "cat.json").write_text(json.dumps(catalog))
        result = run_olake("read", "--config", src, "--catalog", str(tmp_path / "cat.json"))
        assert result.returncode != 0
        lines = [l for l in result.stderr.decode().splitlines() if l.startswith("olake: error")]
        assert len(lines) == 1 and "replica set" in lines[0], result.stderr.decode()
