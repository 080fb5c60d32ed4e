"""The MongoDB source against a real wire-protocol server: ``_id`` chunk planning over mixed BSON type
brackets (no document lost or read twice, bounds exact through the state file), chunk readers, discover,
incremental ranges, and ``olake check`` / ``discover`` with good and broken configs.
"""

from __future__ import annotations

import collections
import json
import math
import pickle
import time
import uuid

import pyarrow as pa
import pytest
from bson import Binary, Code, DatetimeMS, Decimal128, Int64, MaxKey, MinKey, ObjectId, Timestamp

from olake_cli.core.catalog import CatalogStream, parse_catalog
from olake_cli.core.errors import CatalogError, ConfigError, TransientError
from olake_cli.core.state import Chunk, State, StreamState, parse_state
from olake_cli.sources.mongodb.brackets import (
    bracket_of, chunk_filter, encode_value, parse_bound, parse_value_text, value_text,
)
from olake_cli.sources.mongodb.bson_schema import BSON_CODEC_OPTIONS
from olake_cli.sources.mongodb.bson_types import documents_to_batch
from olake_cli.sources.mongodb.chunks import plan_chunks
from olake_cli.sources.mongodb.source import MongoSource
from tests.support.cli import messages, run_olake, write_json
from tests.support.mongo import connect
from tests.support.pgcluster import free_port
from tests.test_bad_input import assert_one_error

NUMBER_TYPES = ("int", "long", "double", "decimal")


def _config(uri: str, database: str, **extra) -> dict:
    return {"type": "mongodb", "uri": uri, "database": database, **extra}


def _source(mongo_server, database: str, **extra) -> MongoSource:
    return MongoSource(_config(mongo_server.uri, database, **extra))


def _stream(source: MongoSource, name: str, **choices) -> CatalogStream:
    entry = next(s for s in source.discover()["streams"] if s["name"] == name)
    return CatalogStream.from_dict({**entry, **choices})


def _mixed_ids(count: int) -> list:
    """``_id``s of every bracket an _id can have, with values that stress exactness."""
    ids = []
    for i in range(count):
        kind = i % 13
        ids.append([
            ObjectId(), i, Int64(2**60 + i), i + 0.5, Decimal128(f"{i}.25"), f"key-{i:05d}-é",
            uuid.UUID(int=i * 7919), DatetimeMS(i * 86_400_000 - 10**12), {"a": i, "b": "x"},
            Binary(bytes([i % 256]) * (1 + i % 5), 0), Timestamp(1_000 + i, i), Int64(-(2**62) - i),
            {"b": i, "a": [i, "y"]},
        ][kind])
    # bracket edges: NaN and the infinities (numbers), -0.0, both booleans, null, MinKey and MaxKey
    return ids + [math.nan, math.inf, -math.inf, -0.5, True, False, None, MinKey(), MaxKey(),
                  Code("function () {}")]


def _ids_of(coll, query: dict) -> collections.Counter:
    return collections.Counter(encode_value(d["_id"]) for d in coll.find(query, projection={"_id": 1}))


# ----------------------------------------------------------------------------- chunk bounds


@pytest.mark.parametrize("value", [
    5, -(2**31), Int64(5), Int64(2**53 + 1), Int64(-(2**63)), 2.5, -0.0, math.nan, -math.inf,
    Decimal128("1.10"), Decimal128("-0"), Decimal128("NaN"), Decimal128("1E+6144"), "é ünïcode \u0000 x",
    ObjectId(), uuid.UUID(int=42), Binary(b"\x00\x01", 0), Binary(b"old-uuid-16bytes", 3),
    Binary(b"\x01", 128), DatetimeMS(-62_135_596_800_001), DatetimeMS(253_402_300_800_000),
    {"a": 1, "b": [Int64(1), 2.0]}, {"$oid": "not an ObjectId"}, {"x": {"$date": 5}}, Timestamp(5, 7),
    True, None, MinKey(), MaxKey(), Code("f()"),
])
def test_bound_text_round_trips_exactly(value):
    text = value_text(value)
    back = parse_value_text(json.loads(json.dumps(text)))
    assert encode_value(back) == encode_value(value)  # same BSON type and bytes: int32 stays int32
    assert value_text(back) == text


def test_bound_of_dollar_document_uses_raw_bson():
    assert value_text({"$oid": "x"}).startswith("bson:")
    assert value_text({"a": 1}) == '{"a": {"$numberInt": "1"}}'


def test_bound_of_another_source_is_a_state_error():
    with pytest.raises(ConfigError, match="not a MongoDB chunk bound"):
        chunk_filter("(0,0)", None)
    with pytest.raises(ConfigError, match="spans two type brackets"):
        chunk_filter(["number", None], ["string", None])


# ----------------------------------------------------------------------------- chunk planning


def test_chunks_cover_mixed_id_types_exactly(mongo_server, mongo_db):
    ids = _mixed_ids(3000)
    with connect(mongo_server.uri) as client:
        client[mongo_db].mixed.insert_many([{"_id": v, "i": n} for n, v in enumerate(ids)])
        coll = client[mongo_db].get_collection("mixed", codec_options=BSON_CODEC_OPTIONS)
        expected = collections.Counter(encode_value(v) for v in ids)
        assert sum(expected.values()) == len(ids) == len(expected)

        plan = plan_chunks(coll, chunk_documents=150)
        assert set(plan.methods) == {"minKey", "null", "number", "string", "object", "binData", "objectId",
                                     "bool", "date", "timestamp", "javascript", "maxKey"}
        if mongo_server.real_mongod:
            assert plan.methods["number"] == "splitVector", plan.methods
        else:  # SecantusDB has no splitVector
            assert plan.methods["number"] == "bucketAuto", plan.methods
        per_bracket = collections.Counter(lo[0] for lo, _ in plan.bounds)
        assert per_bracket["number"] >= 6 and per_bracket["objectId"] >= 2, plan.summary()

        # through a state file: JSON text, schema validation, parse_state
        source = _source(mongo_server, mongo_db, chunk_documents=150)
        stream = _stream(source, "mixed")
        with source.open_session([stream], log=lambda _: None) as session:
            full = session.plan_full_load(stream)
            assert (full.chunk_column, full.source) == ("_id", {"collection_uuid": _collection_uuid(client, mongo_db,
                                                                                                     "mixed")})
            state = State("global", streams=[StreamState(
                "full-load", "mixed", mongo_db, None, [Chunk("pending", lo, hi) for lo, hi in full.bounds],
                chunk_column=full.chunk_column, source=dict(full.source))])
            text = json.dumps(state.to_dict())
            loaded = parse_state(json.loads(text)).find(mongo_db, "mixed")
            assert [c.to_dict() for c in loaded.chunks] == [c.to_dict() for c in state.streams[0].chunks]
            assert session.resume_blocker(stream, loaded) is None

            seen: collections.Counter = collections.Counter()
            for index, chunk in enumerate(loaded.chunks):
                for bound in (chunk.min, chunk.max):
                    bracket, value, is_open = parse_bound(bound, "bound")
                    assert is_open or bracket_of(value) is bracket
                reader = session.chunk_reader(stream, loaded, index)
                seen += _ids_of(coll, reader.filter())
        assert seen == expected  # every document exactly once: none lost, none twice


def _collection_uuid(client, database: str, name: str) -> str:
    """The collection's UUID as listCollections reports it."""
    value = next(client[database].list_collections(filter={"name": name}))["info"]["uuid"]
    return str(value if isinstance(value, uuid.UUID) else uuid.UUID(bytes=bytes(value)))


def test_chunk_bounds_are_exact_at_int64_precision(mongo_server, mongo_db):
    """Cuts between int64 values 1 apart beyond 2^53 (where doubles cannot tell them apart)."""
    ids = [Int64(2**60 + i) for i in range(400)] + [float(2**60 - 256), 2**60 + 4096.0]
    with connect(mongo_server.uri) as client:
        client[mongo_db].big.insert_many([{"_id": v} for v in ids])
        coll = client[mongo_db].get_collection("big", codec_options=BSON_CODEC_OPTIONS)
        plan = plan_chunks(coll, chunk_documents=7)
        bounds = json.loads(json.dumps(plan.bounds))
        assert any(b[1] is not None and "$numberLong" in b[1] for b, _ in bounds)
        seen = sum((_ids_of(coll, chunk_filter(lo, hi)) for lo, hi in bounds), collections.Counter())
    assert seen == collections.Counter(encode_value(v) for v in ids)


def test_empty_collection_gets_one_chunk(mongo_server, mongo_db):
    with connect(mongo_server.uri) as client:
        client[mongo_db].create_collection("empty")
        plan = plan_chunks(client[mongo_db].get_collection("empty", codec_options=BSON_CODEC_OPTIONS), 10)
    assert plan.bounds == [(["minKey", None], ["maxKey", None])]
    assert chunk_filter(*plan.bounds[0]) == {}


class _Commands:
    """The commands a client sent (pymongo's command monitoring), by name and target collection."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, object]] = []

    def started(self, event) -> None:
        self.sent.append((event.command_name, event.command.get(event.command_name)))

    def succeeded(self, event) -> None:
        pass

    def failed(self, event) -> None:
        pass


def _planning_commands(mongo_server, mongo_db: str, name: str, chunk_documents: int):
    from pymongo import MongoClient, monitoring

    class Listener(_Commands, monitoring.CommandListener):
        pass

    listener = Listener()
    with MongoClient(mongo_server.uri, event_listeners=[listener], uuidRepresentation="standard",
                     datetime_conversion="DATETIME_MS") as client:
        plan = plan_chunks(client[mongo_db].get_collection(name, codec_options=BSON_CODEC_OPTIONS), chunk_documents)
    return plan, [(command, target) for command, target in listener.sent if target == name]


def test_planning_reads_the_collection_at_most_once(mongo_server, mongo_db):
    """Whatever the number of type brackets, one aggregation reads the collection (SecantusDB answers
    every other query but an _id lookup by reading it all); the cuts are checked over their values."""
    if mongo_server.real_mongod:
        pytest.skip("a mongod with splitVector plans from its _id index")
    ids = _mixed_ids(600)
    with connect(mongo_server.uri) as client:
        client[mongo_db].brackets.insert_many([{"_id": v} for v in ids])
    plan, commands = _planning_commands(mongo_server, mongo_db, "brackets", chunk_documents=40)
    assert len({lo[0] for lo, _ in plan.bounds}) >= 12 and plan.methods["number"] == "bucketAuto", plan.summary()
    reads = [command for command, _ in commands if command not in ("count", "splitVector")]
    assert reads == ["aggregate"], commands
    assert [command for command, _ in commands].count("count") == 1, commands  # estimatedDocumentCount


def test_a_collection_of_one_chunk_is_planned_without_a_query(mongo_server, mongo_db):
    with connect(mongo_server.uri) as client:
        client[mongo_db].small.insert_many([{"_id": v} for v in _mixed_ids(60)])
    plan, commands = _planning_commands(mongo_server, mongo_db, "small", chunk_documents=1000)
    assert plan.bounds == [(["minKey", None], ["maxKey", None])] and plan.estimate == 70
    assert [command for command, _ in commands] == ["count"]


def test_session_refuses_a_missing_collection(mongo_server, mongo_db):
    with connect(mongo_server.uri) as client:
        client[mongo_db].here.insert_one({"_id": 1})
    source = _source(mongo_server, mongo_db)
    gone = CatalogStream.from_dict({**_stream(source, "here").to_dict(), "name": "gone"})
    with pytest.raises(CatalogError, match=f"'gone' does not exist in database '{mongo_db}'.*discover again"):
        source.open_session([gone], log=lambda _: None)


# ----------------------------------------------------------------------------- chunk reader


def _typed_documents(count: int) -> list[dict]:
    return [{"_id": ObjectId(), "n32": i, "n64": Int64(2**53 + i), "f": i / 4, "s": f"text {i} é",
             "when": DatetimeMS(i * 1_000_003 - 5_000_000_000), "dec": Decimal128(f"{i}.10"), "flag": i % 2 == 0,
             "uid": uuid.UUID(int=i), "sub": {"k": i, "t": "x"}} for i in range(count)]


def test_chunk_reader_pickles_and_yields_the_documents(mongo_server, mongo_db):
    docs = _typed_documents(500)
    with connect(mongo_server.uri) as client:
        client[mongo_db].typed.insert_many(docs)
    source = _source(mongo_server, mongo_db, chunk_documents=120, batch_documents=37)
    stream = _stream(source, "typed")
    types = {k: v["x-olake-type"] for k, v in stream.json_schema["properties"].items()}
    assert types == {"_id": "objectid", "n32": "int32", "n64": "int64", "f": "float64", "s": "string",
                     "when": "datetime_ms", "dec": "decimal128", "flag": "bool", "uid": "uuid", "sub": "document"}
    with source.open_session([stream], log=lambda _: None) as session:
        plan = session.plan_full_load(stream)
        load = StreamState("full-load", "typed", mongo_db, None, [Chunk("pending", lo, hi) for lo, hi in plan.bounds])
        readers = [session.chunk_reader(stream, load, i) for i in range(len(plan.bounds))]
    assert len(readers) >= 4
    batches = []
    for reader in readers:
        copy = pickle.loads(pickle.dumps(reader))
        assert copy == reader
        for batch in copy.read_batches():
            assert batch.num_rows <= 37
            batches.append(batch)
    got = pa.Table.from_batches(batches).sort_by("_id")
    docs.sort(key=lambda d: str(d["_id"]))
    want = pa.Table.from_batches([documents_to_batch(docs, stream.json_schema, stream.label)])
    assert got.equals(want)
    rows = got.to_pylist()
    assert [r["_id"] for r in rows] == [str(d["_id"]) for d in docs]
    assert [r["n64"] for r in rows] == [int(d["n64"]) for d in docs]  # exact beyond 2^53
    assert [r["dec"] for r in rows] == [str(d["dec"]) for d in docs]
    assert got.column("when").cast(pa.int64()).to_pylist() == [int(d["when"]) for d in docs]
    assert [r["sub"] for r in rows] == [d["sub"] for d in docs]


def test_chunk_reader_network_error_is_transient_and_scrubbed(mongo_server):
    secret = "Sup3r-s3cret-pw"
    source = MongoSource(_config(f"mongodb://reader:{secret}@127.0.0.1:{free_port()}/", "db",
                                 connect_timeout=1))
    from olake_cli.sources.mongodb.scan import MongoChunkReader, encode_query

    reader = MongoChunkReader(source.settings, "c", encode_query(chunk_filter(["number", None], ["number", None])),
                              {"type": "object", "properties": {}}, label="db.c")
    with pytest.raises(TransientError) as raised:
        list(pickle.loads(pickle.dumps(reader)).read_batches())
    assert "chunk 0 of db.c" in str(raised.value) and secret not in str(raised.value)
    assert secret not in repr(source.settings)


# ----------------------------------------------------------------------------- discover


def test_discover_lists_collections_with_schema_key_and_modes(mongo_server, mongo_db):
    with connect(mongo_server.uri) as client:
        db = client[mongo_db]
        db.orders.insert_many([{"_id": i, "total": Decimal128(f"{i}.5"), "at": DatetimeMS(i), "tag": "x"}
                               for i in range(50)])
        db.users.insert_many(_typed_documents(20))
        db.command("create", "order_view", viewOn="orders", pipeline=[])
        replica = bool(client.admin.command("hello").get("setName"))
    catalog = _source(mongo_server, mongo_db, sample_size=10).discover()
    parsed = parse_catalog(catalog)  # validates against catalog.schema.json
    assert [s.name for s in parsed.streams] == ["orders", "users"]
    orders = catalog["streams"][0]
    assert orders["namespace"] == mongo_db
    assert orders["source_defined_primary_key"] == [["_id"]]
    assert orders["default_cursor_field"] == []
    assert list(orders["json_schema"]["properties"]) == ["_id", "total", "at", "tag"]
    assert orders["json_schema"]["properties"]["_id"]["x-olake-type"] == "int32"
    assert orders["cursor_candidates"] == ["_id", "total", "at"]
    assert orders["x-olake"]["sampled_documents"] == 10
    assert orders["supported_sync_modes"] == ["full_refresh", "incremental"] + (["cdc"] if replica else [])
    if not mongo_server.real_mongod:
        assert "cdc" in orders["supported_sync_modes"]  # SecantusDB is a one-node replica set
    users = _source(mongo_server, mongo_db, collections=["users"]).discover()["streams"]
    assert [s["name"] for s in users] == ["users"]
    assert users[0]["json_schema"]["properties"]["_id"]["x-olake-type"] == "objectid"


# ----------------------------------------------------------------------------- incremental


def test_incremental_reader_honours_bounds_and_rereads_the_boundary(mongo_server, mongo_db):
    docs = [{"_id": i, "n": Int64(i) if i % 2 else i, "at": DatetimeMS(1_700_000_000_000 + i * 1000),
             "f": float(i)} for i in range(100)]
    docs += [{"_id": 100, "f": math.nan}, {"_id": 101, "f": math.inf}, {"_id": 102}, {"_id": 103, "n": "text"}]
    with connect(mongo_server.uri) as client:
        client[mongo_db].events.insert_many(docs)
    source = _source(mongo_server, mongo_db)

    def ids(reader) -> list:
        return sorted(d["_id"] for d in reader.documents())

    n = _stream(source, "events", sync_mode="incremental", cursor_field=["n"])
    assert n.json_schema["properties"]["n"]["x-olake-type"] == "bson"  # "text" spoils the sample
    n = CatalogStream.from_dict({**n.to_dict(), "json_schema": {"type": "object", "properties": {
        **n.json_schema["properties"], "n": {"type": ["integer", "null"], "x-olake-type": "int64"}}}})
    at = _stream(source, "events", sync_mode="incremental", cursor_field=["at"])
    f = _stream(source, "events", sync_mode="incremental", cursor_field=["f"])
    with source.open_session([n, at, f], log=lambda _: None) as session:
        upto = session.max_cursor(n)
        assert parse_value_text(upto) == 99
        assert ids(session.incremental_reader(n, value_text(40), upto)) == list(range(40, 100))
        assert ids(session.incremental_reader(n, None, value_text(Int64(10)))) == list(range(0, 11))
        assert ids(session.incremental_reader(n, value_text(20), value_text(25))) == list(range(20, 26))

        upto = session.max_cursor(at)
        assert encode_value(parse_value_text(upto)) == encode_value(DatetimeMS(1_700_000_099_000))
        after = value_text(DatetimeMS(1_700_000_090_000))
        assert ids(session.incremental_reader(at, after, upto)) == list(range(90, 100))

        # NaN and infinity cannot be a position: never the max, read by every pass
        assert parse_value_text(session.max_cursor(f)) == 99.0
        assert ids(session.incremental_reader(f, value_text(98.0), value_text(99.0))) == [98, 99, 100, 101]
        assert ids(session.incremental_reader(f, None, None)) == [100, 101]

        lookback = CatalogStream.from_dict({**at.to_dict(), "cursor_lookback": "5 seconds"})
        assert ids(session.incremental_reader(lookback, after, upto)) == list(range(85, 100))


def test_incremental_on_an_unordered_field_is_a_catalog_error(mongo_server, mongo_db):
    with connect(mongo_server.uri) as client:
        client[mongo_db].things.insert_many([{"_id": 1, "s": "a"}, {"_id": 2, "s": "b"}])
    source = _source(mongo_server, mongo_db)
    stream = _stream(source, "things", sync_mode="incremental", cursor_field=["s"])
    with pytest.raises(CatalogError, match="cursor_field 's' has type string"):
        source.open_session([stream], log=lambda _: None)


# ----------------------------------------------------------------------------- the CLI


def _assert_check_failed(result, *needles: str, secrets: tuple[str, ...] = (),
                         failure_type: str = "config_error") -> str:
    line = assert_one_error(result, failure_type, *needles, secrets=secrets)
    out = messages(result.stdout)
    assert [m["type"] for m in out] == ["CONNECTION_STATUS", "TRACE"]
    assert out[0]["connectionStatus"]["status"] == "FAILED"
    return line


def test_cli_check_and_discover_succeed(mongo_server, mongo_db, tmp_path):
    with connect(mongo_server.uri) as client:
        client[mongo_db].a.insert_many(_typed_documents(5))
        client[mongo_db].b.insert_one({"_id": "only"})
    config = write_json(tmp_path / "src.json", _config(mongo_server.uri, mongo_db))
    result = run_olake("check", "--config", config)
    assert result.returncode == 0, result.stderr.decode()
    status = [m for m in messages(result.stdout) if m["type"] == "CONNECTION_STATUS"][0]["connectionStatus"]
    assert status["status"] == "SUCCEEDED"
    assert f"/{mongo_db}" in status["message"] and "2 collection(s)" in status["message"]
    if not mongo_server.real_mongod:
        assert "change streams available" in status["message"]

    result = run_olake("discover", "--config", config)
    assert result.returncode == 0, result.stderr.decode()
    out = messages(result.stdout)
    assert [m["type"] for m in out] == ["CATALOG"]
    catalog_file = write_json(tmp_path / "catalog.json", out[0])
    from olake_cli.core.catalog import load_catalog

    assert [s.name for s in load_catalog(catalog_file).streams] == ["a", "b"]


def test_cli_unreachable_host_fails_fast_with_one_line(tmp_path):
    port, secret = free_port(), "Unre4chable-pw"
    config = write_json(tmp_path / "src.json", _config(f"mongodb://u:{secret}@127.0.0.1:{port}/", "db",
                                                       connect_timeout=2))
    for command in ("check", "discover"):
        started = time.monotonic()
        result = run_olake(command, "--config", config, timeout=120)
        assert time.monotonic() - started < 60
        assert_one_error(result, "transient_error", f"127.0.0.1:{port}", "nothing accepts connections",
                         secrets=(secret,))


def test_cli_wrong_password(mongo_server, tmp_path):
    good, wrong, user = "G00d-pass-word", "Wr0ng-pass-word", f"olake_{uuid.uuid4().hex[:8]}"
    with connect(mongo_server.uri) as client:
        try:
            client.admin.command("createUser", user, pwd=good, roles=["readAnyDatabase"])
        except Exception as exc:  # a server without user management, or without the privilege
            pytest.skip(f"cannot create a user on this server: {exc}")
    host = mongo_server.uri.split("://", 1)[1].split("/", 1)[0].rpartition("@")[2]
    config = {"type": "mongodb", "hosts": host.split(","), "username": user, "password": wrong,
              "database": "db"}
    result = run_olake("check", "--config", write_json(tmp_path / "hosts.json", config))
    _assert_check_failed(result, f"wrong username or password for user '{user}'", "auth_source 'admin'",
                         secrets=(wrong, good))
    uri = f"mongodb://{user}:{wrong}@{host}/?authSource=admin"
    result = run_olake("discover", "--config", write_json(tmp_path / "uri.json", _config(uri, "db")))
    assert_one_error(result, "config_error", "wrong username or password", secrets=(wrong, good))


@pytest.mark.parametrize("password, host, expected", [
    ("o", "127.0.0.1", "nothing accepts connections at 127.0.0.1:"),
    ("x", "nonexistent.invalid", "unknown host in nonexistent.invalid:"),
])
def test_cli_words_that_contain_the_password_print_unchanged(tmp_path, password, host, expected):
    uri = f"mongodb://reader:{password}@{host}:{free_port()}/"
    config = write_json(tmp_path / "src.json", _config(uri, "db", connect_timeout=2))
    result = run_olake("check", "--config", config, timeout=120)
    _assert_check_failed(result, expected, "check 'uri'", secrets=("***",),
                         failure_type="transient_error" if "nothing accepts" in expected else "config_error")


def test_cli_uri_and_hosts_together_is_a_config_error(mongo_server, tmp_path):
    secret = "B0th-given-pw"
    config = {**_config(f"mongodb://u:{secret}@127.0.0.1:1/", "db"), "hosts": ["127.0.0.1:1"],
              "password": secret}
    result = run_olake("check", "--config", write_json(tmp_path / "both.json", config))
    _assert_check_failed(result, "either 'uri'", "not both", secrets=(secret,))
    del config["uri"], config["hosts"]
    result = run_olake("discover", "--config", write_json(tmp_path / "neither.json", config))
    assert_one_error(result, "config_error", "either 'uri'", secrets=(secret,))


def test_cli_unknown_database_and_bad_collections(mongo_server, mongo_db, tmp_path):
    with connect(mongo_server.uri) as client:
        client[mongo_db].present.insert_one({"_id": 1})
    config = write_json(tmp_path / "db.json", _config(mongo_server.uri, f"{mongo_db}_missing"))
    _assert_check_failed(run_olake("check", "--config", config), f"database '{mongo_db}_missing' does not exist",
                         "'database'")
    config = write_json(tmp_path / "coll.json", _config(mongo_server.uri, mongo_db, collections=["present", "nope"]))
    _assert_check_failed(run_olake("check", "--config", config), "collection(s) nope do not exist", "'collections'")


def test_standalone_server_checks_with_a_note_and_offers_no_cdc(tmp_path):
    """A server that is no replica set: check passes with how to enable change streams; no cdc mode."""
    from secantus import SecantusDBServer

    with SecantusDBServer(storage_path=str(tmp_path / "standalone"), replica_set_name=None) as server:
        with connect(server.uri) as client:
            assert not client.admin.command("hello").get("setName")
            client.solo.items.insert_many([{"_id": i, "v": i} for i in range(30)])
        source = MongoSource(_config(server.uri, "solo", chunk_documents=10))
        text = source.check()
        assert "1 collection(s)" in text and "start mongod with --replSet rs0 and run rs.initiate()" in text
        (entry,) = source.discover()["streams"]
        assert entry["supported_sync_modes"] == ["full_refresh", "incremental"]
        assert "replica set" in entry["x-olake"]["cdc_unsupported"]
        stream = CatalogStream.from_dict(entry)
        with source.open_session([stream], log=lambda _: None) as session:
            plan = session.plan_full_load(stream)
            load = StreamState("full-load", "items", "solo", None, [Chunk("pending", lo, hi) for lo, hi in plan.bounds])
            readers = [session.chunk_reader(stream, load, i) for i in range(len(plan.bounds))]
        assert readers[0].after_cluster_time is None  # no operation time to wait for
        rows = sorted(r["_id"] for reader in readers for b in reader.read_batches() for r in b.to_pylist())
        assert rows == list(range(30))
