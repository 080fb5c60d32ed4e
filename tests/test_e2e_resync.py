"""Loading a stream anew: the old contents stay until the new load replaces them; a lost stream is reloaded.

A ``cdc`` stream whose source cannot be followed any more (a partition's TRUNCATE, a MongoDB collection
replaced by ``renameCollection`` with ``dropTarget`` or by ``$out``, or dropped and created again) is marked to load anew
on the next run: until that load's last commit the destination keeps the old contents, whole. A
destination that lost a stream's data (its Iceberg table dropped, its Parquet manifest and folders
deleted) while the state says the stream is past its full load loads it anew instead of applying
the later changes to nothing. Every case runs the real commands (``read | write`` and ``sync``, to
Parquet and to Iceberg) and compares the destination with the source value by value.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import psycopg
import pyarrow as pa
import pytest

from olake_cli.sources.mongodb.bson_types import documents_to_batch
from tests.support.cdc import discover_catalog, make_accounts
from tests.support.cli import messages, read_into_write, run_olake, with_stream_ends, write_json
from tests.support.current_view import iceberg_rows, iceberg_table
from tests.support.matrix import cases
from tests.support.mongo import connect
from tests.support.verify import assert_table_matches, latest_versions, read_parquet

ALL_CASES = [("iceberg", "pipe"), ("iceberg", "sync"), ("parquet", "pipe"), ("parquet", "sync")]
# The triggers are the source's (each destination's own part is in the conformance suite's re-sync case):
# by default each runs once, the lost destination once per destination, so that every destination and
# both paths appear; OLAKE_TEST_ALL_PATHS=1 runs every pairing (tests/support/matrix.py).
TRUNCATED = cases(ALL_CASES, [("parquet", "sync")])
REPLACED = cases(ALL_CASES, [("iceberg", "pipe")])
LOST = cases(ALL_CASES, [("iceberg", "pipe"), ("parquet", "sync")])
PARTITIONED = """
CREATE TABLE events (id int, region text, v int, note text, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
CREATE TABLE events_eu PARTITION OF events FOR VALUES IN ('eu');
CREATE TABLE events_us PARTITION OF events FOR VALUES IN ('us');
INSERT INTO events SELECT g, CASE WHEN g % 2 = 0 THEN 'eu' ELSE 'us' END, g, 'n' || g FROM generate_series(1, 100) g;
"""


class Lake:
    """One destination (Parquet or the embedded Iceberg catalog), its config, and the runs into it."""

    def __init__(self, kind: str, tmp_path: Path, src: str, mode: str) -> None:
        self.kind, self.root, self.src, self.mode = kind, tmp_path / "lake", src, mode
        self.dst = write_json(tmp_path / "dst.json", {"type": kind, "path": str(self.root)})
        self.catalog, self.state = tmp_path / "cat.json", tmp_path / "st.json"

    def run(self) -> str:
        """One run of ``read | write`` or ``sync``, which must succeed; returns every line it logged."""
        args = ["--catalog", str(self.catalog), "--state", str(self.state)]
        if self.mode == "sync":
            result = run_olake("sync", "--source", self.src, "--destination", self.dst, *args)
            assert result.returncode == 0, result.stderr.decode()[-3000:]
            return result.stderr.decode()
        result = read_into_write(["--config", self.src, *args], ["--config", self.dst, "--state", str(self.state)])
        assert result.write_code == 0, result.write_stderr.decode()[-3000:]
        assert result.read_code == 0, result.read_stderr.decode()[-3000:]
        return result.read_stderr.decode() + result.write_stderr.decode()

    def rows(self, namespace: str, name: str, columns: list[str], key: list[str]) -> pa.Table:
        """The stream's current table as users read it."""
        if self.kind == "iceberg":
            return iceberg_rows(self.root, namespace, name).select(columns)
        return latest_versions(read_parquet(str(self.root / namespace / name)), key).select(columns)

    def lose(self, namespace: str, name: str) -> None:
        """Lose the stream's data outside olake: drop the table, or delete the manifest and every folder."""
        if self.kind == "iceberg":
            table = iceberg_table(self.root, namespace, name)
            shutil.rmtree(table.location().removeprefix("file://"))
            table.catalog.drop_table((namespace, name))
            return
        for path in (self.root / namespace).glob(f"*{name}*"):
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()

    def sync_type(self, name: str) -> str:
        """The stream's phase in the state file."""
        return next(s for s in json.loads(self.state.read_text())["streams"] if s["stream_name"] == name)["sync_type"]


def _pg_matches(dsn: str, lake: Lake, schema: dict, name: str, key: list[str], source: str | None = None) -> None:
    """The stream ``public.<name>`` equals the PostgreSQL table ``source`` (default: the same table)."""
    namespace, table = (source or f"public.{name}").split(".")
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert_table_matches(conn, namespace, table, schema, lake.rows("public", name, list(schema["properties"]), key))


@pytest.mark.parametrize("dest,mode", TRUNCATED)
def test_a_truncated_partition_keeps_the_table_until_its_reload(pg_cluster, pg_db, tmp_path, dest, mode):
    dsn, slot = pg_cluster.dsn(pg_db), f"slot_rs_{dest}_{mode}"
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot=slot, publication=f"{slot}_pub", create_slot_and_publication=True, max_parallel=1))
    lake = Lake(dest, tmp_path, src, mode)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(PARTITIONED)
    schema = next(s for s in discover_catalog(src, lake.catalog, {"events": "cdc"}, only={"events"})["streams"]
                  if s["name"] == "events")["json_schema"]
    lake.run()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE events SET note = 'before' WHERE id <= 10")
        conn.execute("CREATE SCHEMA snap; CREATE TABLE snap.events AS SELECT * FROM events")  # not captured
        conn.execute("TRUNCATE events_eu")
        conn.execute("UPDATE events SET note = 'after' WHERE id <= 20")
    logged = lake.run()
    assert "partition public.events_eu was truncated" in logged
    assert lake.sync_type("events") == "full-load"
    _pg_matches(dsn, lake, schema, "events", ["id", "region"], source="snap.events")  # 100 rows, as before
    assert "public.events: marked to load anew by an earlier run" in lake.run()  # replaced in one commit
    _pg_matches(dsn, lake, schema, "events", ["id", "region"])  # 50 rows
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"SELECT pg_drop_replication_slot('{slot}')")


def _mongo_seed(client, database: str) -> None:
    db = client[database]
    for name in ("renamed", "outed", "dropped"):
        db[name].insert_many([{"_id": i, "v": i, "note": f"{name} {i}"} for i in range(1, 41)])
    db.fresh.insert_many([{"_id": 1000 + i, "v": -i, "note": "fresh"} for i in range(25)])


def _mongo_rows(lake: Lake, database: str, stream: dict) -> dict:
    columns = list(stream["json_schema"]["properties"])
    return {r["_id"]: r for r in lake.rows(database, stream["name"], columns, ["_id"]).to_pylist()}


def _mongo_source_rows(uri: str, database: str, stream: dict) -> dict:
    with connect(uri) as client:
        docs = list(client[database][stream["name"]].find())
    return {r["_id"]: r for r in documents_to_batch(docs, stream["json_schema"], stream["name"]).to_pylist()}


@pytest.mark.parametrize("dest,mode", REPLACED)
def test_replaced_or_dropped_collections_keep_their_tables_until_the_reload(mongo_server, mongo_db, tmp_path,
                                                                             dest, mode):
    uri = mongo_server.uri
    src = write_json(tmp_path / "src.json", {"type": "mongodb", "uri": uri, "database": mongo_db})
    lake = Lake(dest, tmp_path, src, mode)
    with connect(uri) as client:
        _mongo_seed(client, mongo_db)
    catalog = discover_catalog(src, lake.catalog, dict.fromkeys(("renamed", "outed", "dropped"), "cdc"),
                               only={"renamed", "outed", "dropped"})
    streams = [s for s in catalog["streams"] if s["selected"]]
    lake.run()
    before = {s["name"]: _mongo_source_rows(uri, mongo_db, s) for s in streams}
    assert all(len(rows) == 40 for rows in before.values())
    with connect(uri) as client:
        db = client[mongo_db]
        db.fresh.aggregate([{"$match": {}}, {"$out": "outed"}])
        db.fresh.aggregate([{"$match": {}}, {"$out": "staging"}])
        client.admin.command("renameCollection", f"{mongo_db}.staging", to=f"{mongo_db}.renamed", dropTarget=True)
        db.dropped.drop()
        db.dropped.insert_many([{"_id": 2000 + i, "v": i, "note": "created again"} for i in range(7)])
    logged = lake.run()
    for stream in streams:
        assert f"{mongo_db}.{stream['name']}: the collection saw" in logged, logged[-3000:]
        assert lake.sync_type(stream["name"]) == "full-load"
        assert _mongo_rows(lake, mongo_db, stream) == before[stream["name"]], stream["name"]
    lake.run()  # each new load replaces the old contents in one commit
    for stream in streams:
        expected = _mongo_source_rows(uri, mongo_db, stream)
        assert len(expected) == {"dropped": 7}.get(stream["name"], 25)
        assert _mongo_rows(lake, mongo_db, stream) == expected, stream["name"]


@pytest.mark.parametrize("dest,mode", LOST)
def test_a_stream_whose_destination_lost_its_data_is_loaded_anew(pg_cluster, pg_db, tmp_path, dest, mode):
    dsn = pg_cluster.dsn(pg_db)
    slot = f"slot_lost_{dest}_{mode}"
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot=slot, publication=f"{slot}_pub", create_slot_and_publication=True, max_parallel=1))
    lake = Lake(dest, tmp_path, src, mode)
    make_accounts(dsn, "acct", 1000)
    make_accounts(dsn, "ledger", 1000)
    catalog = discover_catalog(src, lake.catalog, {"acct": "cdc", "ledger": "incremental"},
                               cursor={"ledger": "id"}, only={"acct", "ledger"})
    schemas = {s["name"]: s["json_schema"] for s in catalog["streams"]}
    lake.run()
    for name in schemas:
        lake.lose("public", name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE acct SET note = 'changed' WHERE id <= 3")
        conn.execute("INSERT INTO acct SELECT g, 1, 'new' FROM generate_series(1001, 1002) g")
        conn.execute("INSERT INTO ledger SELECT g, 1, 'new' FROM generate_series(1001, 1005) g")
    logged = lake.run()
    marked = {name: lake.sync_type(name) for name in schemas}
    if mode == "pipe":  # the reader had already started from the state file: the next run loads anew
        lake.run()
    for name, schema in schemas.items():  # 1,000 rows each, not the 5 changed since
        _pg_matches(dsn, lake, schema, name, ["id"])
    for name, was in (("acct", "cdc"), ("ledger", "incremental")):
        assert f"public.{name}: the state says '{was}' but the destination holds no data of its load" in logged, \
            logged[-3000:]
    if mode == "pipe":
        assert marked == {"acct": "full-load", "ledger": "full-load"}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"SELECT pg_drop_replication_slot('{slot}')")


def _stream_state(statuses: list[str] | None, sync_type: str = "full-load") -> dict:
    inner = {"cursor_field": "0/1", "load_id": "L1", "sync_mode": "cdc", "columns": ["id", "v"]}
    if statuses is not None:
        inner["chunks"] = [{"status": s, "min": str(i), "max": str(i + 1)} for i, s in enumerate(statuses)]
    return {"type": "STATE", "state": {"level": "stream", "version": "v1", "streams": [
        {"sync_type": sync_type, "stream_name": "t", "stream_namespace": "ns", "stream_state": inner}]}}


@pytest.mark.parametrize("dest", ["iceberg", "parquet"])
def test_a_full_load_resumed_into_a_destination_that_lost_its_chunks(tmp_path, dest):
    """The state file says chunk 0 is done, the destination holds nothing: committing chunk 1 alone
    would pass for the whole load; the writer commits a marker instead and the next run loads anew."""
    columns = {"id": {"type": ["integer"], "x-olake-type": "int32"}, "v": {"type": ["string", "null"],
                                                                          "x-olake-type": "string"}}
    lines = [{"type": "CATALOG", "catalog": {"streams": [{
        "name": "t", "namespace": "ns", "sync_mode": "cdc", "supported_sync_modes": ["full_refresh", "cdc"],
        "source_defined_primary_key": [["id"]], "json_schema": {"type": "object", "properties": columns}}]}},
             _stream_state(["succeed", "pending"])]
    lines += [{"type": "RECORD", "record": {"stream": "t", "namespace": "ns", "emitted_at": 0,
                                            "data": {"id": i, "v": "chunk 1"}}} for i in range(10, 20)]
    lines += [_stream_state(["succeed", "succeed"]), _stream_state(None, "cdc")]
    root, state = tmp_path / "lake", tmp_path / "st.json"
    dst = write_json(tmp_path / "dst.json", {"type": dest, "path": str(root)})
    result = run_olake("write", "--config", dst, "--state", str(state),
                       stdin=with_stream_ends(b"".join(json.dumps(m).encode() + b"\n" for m in lines)))
    assert result.returncode == 0, result.stderr.decode()
    if dest == "iceberg":  # not chunk 1 alone
        assert iceberg_rows(root, "ns", "t").num_rows == 0
    else:
        assert not (root / "ns" / "t").exists()
    assert b"ns.t: the state says 'full-load' but the destination holds no data of its load" in result.stderr
    assert result.stderr.count(b"the stream is loaded anew on the next run") == 1, result.stderr
    echoed = [m["state"]["streams"][0] for m in messages(result.stdout) if m["type"] == "STATE"]
    saved = json.loads(state.read_text())["streams"][0]
    for entry in [*echoed, saved]:  # every STATE, as committed, asks for a new load
        assert entry["sync_type"] == "full-load" and entry["stream_state"] == {
            "cursor_field": None, "chunks": [], "sync_mode": "cdc", "columns": ["id", "v"]}
    assert len(echoed) == 3
