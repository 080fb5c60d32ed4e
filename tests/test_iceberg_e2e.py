"""Iceberg destination end to end: the real commands, a real SQLite-backed pyiceberg catalog, real
PostgreSQL and MongoDB servers; every table is read back with pyiceberg (and DuckDB's ``iceberg_scan``
when its extension can be loaded) and compared with the source value by value."""

from __future__ import annotations

import functools
import json
import subprocess
from pathlib import Path

import psycopg
import pyarrow as pa

from tests.support.cdc import discover_catalog, make_accounts
from tests.support.cli import messages, olake_cmd, olake_env, read_into_write, run_olake, write_json
from tests.support.current_view import iceberg_rows, iceberg_table
from tests.support.matrix import LONG
from tests.support.mongo import connect
from tests.support.verify import assert_table_matches

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "postgres" / "demo.sql"


@functools.cache
def _duckdb_iceberg_loads() -> bool:
    """Whether DuckDB's iceberg extension loads here: asked once per process, as a failed load (no
    network to fetch it) costs seconds each time."""
    import duckdb

    try:
        duckdb.connect().execute("LOAD iceberg")
    except duckdb.Error:
        return False
    return True


def duckdb_rows(root: Path, namespace: str, name: str):
    """The same rows through DuckDB's iceberg_scan, or None when the extension cannot be loaded here."""
    import duckdb

    if not _duckdb_iceberg_loads():
        return None
    con = duckdb.connect()
    con.execute("LOAD iceberg")
    location = iceberg_table(root, namespace, name).metadata_location
    return con.execute(f"SELECT * FROM iceberg_scan('{location}')").to_arrow_table()


def assert_stream_matches(conn, root: Path, stream: dict) -> None:
    """The stream's Iceberg table equals the PostgreSQL table (rows, every column, every value)."""
    columns = list(stream["json_schema"]["properties"])
    data = iceberg_rows(root, stream["namespace"], stream["name"])
    assert_table_matches(conn, stream["namespace"], stream["name"], stream["json_schema"], data.select(columns))
    via_duckdb = duckdb_rows(root, stream["namespace"], stream["name"])
    if via_duckdb is not None:
        assert via_duckdb.num_rows == data.num_rows


def sync_once(src: str, catalog: Path, dst: str, state: Path):
    """One ``olake read | olake write`` run; asserts both succeed (the writer's error first)."""
    result = read_into_write(["--config", src, "--catalog", str(catalog), "--state", str(state)],
                             ["--config", dst, "--state", str(state)])
    assert result.write_code == 0, result.write_stderr.decode()[-3000:]
    assert result.read_code == 0, result.read_stderr.decode()[-3000:]
    return result


def _fingerprint(root: Path, stream: dict):
    """Every row of a stream's table, sorted by key, without the write time."""
    rows = iceberg_rows(root, stream["namespace"], stream["name"]).drop_columns(["_olake_synced_at"])
    keys = [k[0] for k in stream["source_defined_primary_key"]]
    rows = rows.sort_by([(k, "ascending") for k in keys]).combine_chunks()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema) as writer:
        writer.write_table(rows)
    return sink.getvalue()  # bytes: NaN equals NaN, -0.0 differs from 0.0


def _cdc_source(pg_cluster, db: str, slot: str, **extra) -> dict:
    return pg_cluster.source_config(db, replication_slot=slot, publication=f"{slot}_pub",
                                    create_slot_and_publication=True, **extra)


def _change_demo(conn) -> None:
    """Updates (one leaves a large TOASTed value alone), a key update, deletes and inserts."""
    conn.execute("UPDATE shop.all_types SET c_integer = 7, c_text = 'changed' WHERE id = 1")
    conn.execute("UPDATE shop.all_types SET c_integer = 8 WHERE id = 9223372036854775807")  # c_text TOASTed
    conn.execute("UPDATE shop.all_types SET id = 42 WHERE id = 3")
    conn.execute("DELETE FROM shop.all_types WHERE id = 2")
    conn.execute("UPDATE acct SET balance = balance + 1, note = note || '+' WHERE id % 7 = 0")
    conn.execute("UPDATE acct SET id = id + 100000 WHERE id BETWEEN 10 AND 19")
    conn.execute("DELETE FROM acct WHERE id BETWEEN 200 AND 260")
    conn.execute("INSERT INTO acct SELECT g, g, 'new' FROM generate_series(50001, 50300) g")
    conn.execute("UPDATE shop.products SET price = price + 1 WHERE sku < 'M'")


def test_postgres_full_load_changes_recover_and_state_from(pg_cluster, pg_db, tmp_path):
    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(FIXTURE.read_text())
    make_accounts(dsn, "acct", 1500)
    src = write_json(tmp_path / "src.json", _cdc_source(pg_cluster, pg_db, "slot_ice", schemas=["shop", "public"],
                                                       chunk_rows=500))
    root = tmp_path / "lake"
    dst = write_json(tmp_path / "dst.json", {"type": "iceberg", "path": str(root)})
    catalog = discover_catalog(src, tmp_path / "cat.json", {"acct": "cdc", "all_types": "cdc"},
                               only={"acct", "all_types", "products", "app_settings"})
    streams = [s for s in catalog["streams"] if s["selected"]]
    cat, state = str(tmp_path / "cat.json"), tmp_path / "st.json"
    sync_once(src, tmp_path / "cat.json", dst, state)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for stream in streams:
            assert_stream_matches(conn, root, stream)
        _change_demo(conn)

    sync_once(src, tmp_path / "cat.json", dst, state)  # the changes
    with psycopg.connect(dsn, autocommit=True) as conn:
        for stream in streams:
            assert_stream_matches(conn, root, stream)
        conn.execute("UPDATE acct SET note = 'read --state-from' WHERE id = 8")
        conn.execute("INSERT INTO acct VALUES (90001, 1.50, 'after the changes')")
    assert json.loads(iceberg_table(root, "public", "acct").properties["olake.state"])["sync_type"] == "cdc"
    # a replay of the same batch and `state recover` then `sync`: the conformance suite (Iceberg included)
    # and tests/test_state_recover.py; here the state the tables committed is read back by `state recover`
    recovered = run_olake("state", "recover", "--config", dst, "--catalog", cat)
    assert recovered.returncode == 0, recovered.stderr.decode()
    [message] = messages(recovered.stdout)
    kinds = {s["stream_name"]: s["sync_type"] for s in message["state"]["streams"]}
    assert kinds["acct"] == "cdc" and kinds["all_types"] == "cdc"
    # no state file at all: read resumes from what the tables committed
    direct = read_into_write(["--config", src, "--catalog", cat, "--state-from", dst], ["--config", dst])
    assert direct.read_code == 0 and direct.write_code == 0, direct.read_stderr.decode()[-3000:]
    assert b"acct: full load" not in direct.read_stderr
    with psycopg.connect(dsn, autocommit=True) as conn:
        for stream in streams:
            assert_stream_matches(conn, root, stream)
        conn.execute("SELECT pg_drop_replication_slot('slot_ice')")


def _sync(src: str, dst: str, cat: str, state: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(olake_cmd("sync", "--source", src, "--destination", dst, "--catalog", cat,
                                    "--state", str(state)), capture_output=True, env={**olake_env(), **(env or {})},
                          timeout=600)


def _crash_after(commits: int) -> dict:
    """Environment that SIGKILLs olake right after its (commits + 1)-th Iceberg commit, before the
    state file is written."""
    return {"OLAKE_TEST_CRASH_AT": "iceberg-committed", "OLAKE_TEST_CRASH_AFTER": str(commits)}


def _ids(root: Path, name: str) -> list[int]:
    return iceberg_rows(root, "public", name).column("id").to_pylist()


def test_sync_sigkill_between_iceberg_commit_and_state_file(pg_cluster, pg_db, tmp_path):
    """Killed right after an Iceberg commit, before the state file: in the first load (with
    OLAKE_TEST_LONG=1), and in a second load of a stream, whose readers keep the first load whole."""
    dsn = pg_cluster.dsn(pg_db)
    make_accounts(dsn, "acct", 6000)
    make_accounts(dsn, "items", 2500)
    src = write_json(tmp_path / "src.json", _cdc_source(pg_cluster, pg_db, "slot_kill", chunk_strategy="primary_key",
                                                       chunk_rows=1000, max_parallel=1))
    root = tmp_path / "lake"
    dst = write_json(tmp_path / "dst.json", {"type": "iceberg", "path": str(root), "partitioning": {
        "acct": [{"column": "id", "transform": "bucket[4]"}]}})
    catalog = discover_catalog(src, tmp_path / "cat.json", {"acct": "cdc"}, only={"acct", "items"})
    streams = {s["name"]: s for s in catalog["streams"] if s["selected"]}
    cat, state = str(tmp_path / "cat.json"), tmp_path / "st.json"

    if LONG:  # by default the fault harness kills sync into Iceberg at its load's commits
        # commits: acct opened, items opened, then one per chunk; killed right after the 4th
        killed = _sync(src, dst, cat, state, _crash_after(3))
        assert killed.returncode == -9, killed.stderr.decode()[-3000:]
        ids = _ids(root, "acct")
        assert 0 < len(ids) < 6000 and len(set(ids)) == len(ids), killed.stderr.decode()[-3000:]
    done = _sync(src, dst, cat, state)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    with psycopg.connect(dsn, autocommit=True) as conn:
        for stream in streams.values():
            assert_stream_matches(conn, root, stream)
        first_items = sorted(_ids(root, "items"))
        conn.execute("UPDATE acct SET balance = balance * 2, note = 'x' WHERE id % 5 = 0")
        conn.execute("UPDATE acct SET id = -id WHERE id BETWEEN 3000 AND 3010")
        conn.execute("DELETE FROM acct WHERE id BETWEEN 100 AND 400")
        conn.execute("INSERT INTO acct SELECT g, g, 'late' FROM generate_series(10001, 10500) g")
        conn.execute("DELETE FROM items WHERE id > 2000")
        conn.execute("INSERT INTO items SELECT g, 0, 'second load' FROM generate_series(3001, 3600) g")

    # the second run's commits: (acct continues: nothing new), items' new load is staged, its first
    # chunks (three in all); the kill lands before its last chunk whatever the first one counts
    killed = _sync(src, dst, cat, state, _crash_after(2))
    assert killed.returncode == -9, killed.stderr.decode()[-3000:]
    assert sorted(_ids(root, "items")) == first_items, "readers keep the whole first load until the second is"
    assert json.loads(iceberg_table(root, "public", "items").properties["olake.staged-load"])["files"]
    done = _sync(src, dst, cat, state)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    with psycopg.connect(dsn, autocommit=True) as conn:
        for stream in streams.values():
            assert_stream_matches(conn, root, stream)
        conn.execute("SELECT pg_drop_replication_slot('slot_kill')")
    assert "olake.staged-load" not in iceberg_table(root, "public", "items").properties


def _mongo_docs(count: int) -> list[dict]:
    from bson import Decimal128, ObjectId
    from bson.datetime_ms import DatetimeMS

    return [{"_id": i, "v": i, "note": f"seed {i}", "sub": {"a": i, "b": {"c": f"deep {i}"}},
             "tags": [f"t{i}", "x"], "when": DatetimeMS(1_700_000_000_000 + i), "dec": Decimal128(f"{i}.25"),
             "oid": ObjectId(f"{i:024x}")} for i in range(1, count + 1)]


def _canon(value):
    if isinstance(value, dict):
        return {k: _canon(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_canon(v) for v in value]
    if hasattr(value, "timestamp") and hasattr(value, "tzinfo"):
        return value.timestamp()  # the same instant, whatever the unit and zone object
    return value


def test_mongodb_full_load_then_changes_sync(mongo_server, mongo_db, tmp_path):
    from olake_cli.sources.mongodb.bson_types import documents_to_batch

    with connect(mongo_server.uri) as client:
        client[mongo_db].things.insert_many(_mongo_docs(2500))
    src = write_json(tmp_path / "src.json", {"type": "mongodb", "uri": mongo_server.uri, "database": mongo_db,
                                             "chunk_documents": 600})
    root = tmp_path / "lake"
    dst = write_json(tmp_path / "dst.json", {"type": "iceberg", "path": str(root)})
    catalog = discover_catalog(src, tmp_path / "cat.json", {"things": "cdc"})
    stream = next(s for s in catalog["streams"] if s["name"] == "things")
    cat, state = str(tmp_path / "cat.json"), tmp_path / "st.json"
    first = _sync(src, dst, cat, state)
    assert first.returncode == 0, first.stderr.decode()[-3000:]
    with connect(mongo_server.uri) as client:
        coll = client[mongo_db].things
        coll.update_many({"_id": {"$lte": 300}}, {"$inc": {"v": 1000}, "$set": {"sub.b.c": "changed"}})
        coll.replace_one({"_id": 301}, {**_mongo_docs(301)[-1], "note": "replaced", "tags": []})
        coll.delete_many({"_id": {"$gt": 2000}})
        coll.insert_many([{**d, "_id": d["_id"] + 10_000, "note": "new"} for d in _mongo_docs(50)])
        coll.update_one({"_id": 10_001}, {"$set": {"note": "inserted then updated"}})
        coll.delete_one({"_id": 10_002})
    second = _sync(src, dst, cat, state)
    assert second.returncode == 0, second.stderr.decode()[-3000:]
    with connect(mongo_server.uri) as client:
        source = list(client[mongo_db].things.find())
    columns = list(stream["json_schema"]["properties"])
    expected = documents_to_batch(source, stream["json_schema"], "things")
    actual = iceberg_rows(root, mongo_db, "things").select(columns)
    assert actual.num_rows == len(source)
    want = {r["_id"]: _canon(r) for r in expected.to_pylist()}
    got = {r["_id"]: _canon(r) for r in actual.to_pylist()}
    assert got == want
