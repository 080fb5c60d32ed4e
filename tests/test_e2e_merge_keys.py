"""Every key type a source can produce works as a merge key, in every destination, with both commands.

PostgreSQL primary keys of every kind (composite, uuid, numeric, text under a nondeterministic
collation, bytea, timestamps, interval, arrays, jsonb, ...) and MongoDB ``_id``\\s of every BSON type
an ``_id`` can have (ObjectId, documents with nested documents and arrays, a mix of types across
documents, Decimal128, binary, uuid, dates, ...) go through a full load, then updates (of the key
too), deletes and inserts by change capture. The current table (Iceberg: the table itself; Parquet:
the README's DuckDB query) must then equal the source value by value.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import psycopg
import pyarrow as pa
import pytest
from bson import Binary, Decimal128, Int64, ObjectId
from bson.datetime_ms import DatetimeMS

from olake_cli.core.path_names import encode_name
from olake_cli.sources.mongodb.bson_types import documents_to_batch
from tests.support.cdc import discover_catalog, sync_once
from tests.support.cli import run_olake, write_json
from tests.support.current_view import current_view, iceberg_rows
from tests.support.matrix import cases
from tests.support.mongo import connect
from tests.support.verify import assert_table_matches

# Iceberg merges in the writer, Parquet in the reader's query: by default each source covers each
# destination through one command (both commands in all, per destination); OLAKE_TEST_ALL_PATHS=1 adds
# Iceberg through the other command.
PG_CASES = cases([("pipe", "iceberg"), ("sync", "iceberg"), ("sync", "parquet")],
                 [("pipe", "iceberg"), ("sync", "parquet")])
MONGO_CASES = cases([("pipe", "iceberg"), ("sync", "iceberg"), ("pipe", "parquet")],
                    [("sync", "iceberg"), ("pipe", "parquet")])

# table -> (key column type, key value as SQL of the integer {g})
PG_KEYS = {
    "k_uuid": ("uuid", "md5({g}::text)::uuid"),
    "k_numeric": ("numeric(12,3)", "{g} * 1.125"),
    "k_numeric_any": ("numeric", "{g}::numeric / 7"),
    "k_text_ci": ("text COLLATE olake_ci", "'Key ' || {g}"),
    "k_bytea": ("bytea", "decode(md5({g}::text), 'hex')"),
    "k_timestamp": ("timestamp", "'2024-02-29 23:59:59.999999'::timestamp + {g} * interval '1 day 1 microsecond'"),
    "k_timestamptz": ("timestamptz", "'0044-03-15 12:00:00+00 BC'::timestamptz + {g} * interval '1 year'"),
    "k_date": ("date", "'2000-01-01'::date + {g}"),
    "k_time": ("time", "'00:00'::time + {g} * interval '1 minute 1 microsecond'"),
    "k_interval": ("interval", "make_interval(months => {g}, days => -{g}, secs => {g} * 1.000001)"),
    "k_int_array": ("int[]", "ARRAY[{g}, -{g}, NULL]"),
    "k_text_array": ("text[]", "ARRAY['a' || {g}, 'ü']"),
    "k_jsonb": ("jsonb", "jsonb_build_object('k', {g}, 'l', jsonb_build_array({g}, 'x'))"),
    "k_float": ("float8", "{g} / 3.0::float8"),
    "k_bigint": ("bigint", "9007199254740993 + {g}"),
    "k_char": ("char(6)", "'c' || {g}"),
    "k_inet": ("inet", "('10.0.0.' || {g})::inet"),
}


def _key(table: str, number: int | str) -> str:
    return PG_KEYS[table][1].replace("{g}", f"({number})")


def _run(mode: str, src: str, catalog: Path, dst: str, state: Path) -> str:
    """One run of ``read | write`` or ``sync``; returns its stderr (both sides')."""
    if mode == "pipe":
        result = sync_once(src, catalog, dst, state)
        return (result.read_stderr + result.write_stderr).decode()
    result = run_olake("sync", "--source", src, "--destination", dst, "--catalog", str(catalog), "--state", str(state))
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    return result.stderr.decode()


def _current(destination: str, root: Path, namespace: str, name: str, columns: list[str], key: list[str]):
    """The stream's current table as a user reads it."""
    if destination == "parquet":
        folder = str(root / encode_name(namespace) / encode_name(name))
        return current_view(folder, columns, key, unchanged=key != ["_id"])  # MongoDB's: no such column
    return iceberg_rows(root, namespace, name).select(columns)


def _pg_source(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE COLLATION olake_ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)")
        conn.execute("CREATE TABLE k_composite (a int, b text, c date, v text, PRIMARY KEY (c, b, a))")
        conn.execute("INSERT INTO k_composite SELECT g % 3, 'b' || g, '2024-01-01'::date + g % 2, 'v' || g "
                     "FROM generate_series(1, 12) g")
        for table, (kind, _) in PG_KEYS.items():
            conn.execute(f"CREATE TABLE {table} (id {kind} PRIMARY KEY, v text)")
            conn.execute(f"INSERT INTO {table} SELECT {_key(table, 'g')}, 'v' || g FROM generate_series(1, 12) g")


def _pg_changes(dsn: str) -> None:
    """Per table: updates (one twice), a key update, a delete, an insert then updated, one TOAST-free."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE k_composite SET v = 'changed' WHERE a = 1")
        conn.execute("UPDATE k_composite SET b = b || 'x', v = 'moved' WHERE a = 2")
        conn.execute("DELETE FROM k_composite WHERE a = 0 AND c = '2024-01-02'")
        for table in PG_KEYS:
            for statement in ("UPDATE {t} SET v = 'changed' WHERE id = {k1}",
                              "UPDATE {t} SET v = 'twice' WHERE id = {k1}",
                              "UPDATE {t} SET id = {k100}, v = 'moved' WHERE id = {k2}",
                              "DELETE FROM {t} WHERE id = {k3}",
                              "INSERT INTO {t} VALUES ({k200}, 'new')",
                              "UPDATE {t} SET v = 'new, updated' WHERE id = {k200}"):
                conn.execute(statement.format(t=table, k1=_key(table, 1), k2=_key(table, 2), k3=_key(table, 3),
                                              k100=_key(table, 100), k200=_key(table, 200)))
        # the case-insensitive key: a change of case is a change of the key's bytes
        conn.execute("UPDATE k_text_ci SET id = 'KEY 4', v = 'upper' WHERE id = 'key 4'")


@pytest.mark.parametrize("mode, destination", PG_CASES)
def test_postgres_keys_of_every_type_merge(pg_cluster, pg_db, tmp_path, mode, destination):
    dsn, root, slot = pg_cluster.dsn(pg_db), tmp_path / "lake", f"keys_{mode}_{destination}"
    _pg_source(dsn)
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot=slot, publication=f"{slot}_pub", create_slot_and_publication=True))
    dst = write_json(tmp_path / "dst.json", {"type": destination, "path": str(root)})
    tables = ["k_composite", *PG_KEYS]
    catalog = discover_catalog(src, tmp_path / "cat.json", {t: "cdc" for t in tables}, only=set(tables))
    state = tmp_path / "st.json"
    _run(mode, src, tmp_path / "cat.json", dst, state)
    _pg_changes(dsn)
    _run(mode, src, tmp_path / "cat.json", dst, state)
    with psycopg.connect(dsn) as conn:
        for stream in (s for s in catalog["streams"] if s["selected"]):
            columns = list(stream["json_schema"]["properties"])
            key = [k[0] for k in stream["source_defined_primary_key"]]
            current = _current(destination, root, "public", stream["name"], columns, key)
            assert_table_matches(conn, "public", stream["name"], stream["json_schema"], current)
        conn.execute(f"SELECT pg_drop_replication_slot('{slot}')")


# collection -> _id of document number i
MONGO_IDS = {
    "objectid": lambda i: ObjectId(f"{i:024x}"),
    "document": lambda i: {"a": i, "b": "x"},
    "nested": lambda i: {"a": {"n": i, "when": DatetimeMS(i * 1000)}, "tags": [i, i + 1], "bin": Binary(b"\x00" * i)},
    "mixed": lambda i: [i, f"s{i}", ObjectId(f"{i:024x}"), {"k": i}, Decimal128(f"{i}.5"), DatetimeMS(i),
                        Binary(bytes([i]) * 3), uuid.UUID(int=i), i + 0.5, Int64(2**60 + i)][i % 10],
    "decimal128": lambda i: Decimal128(f"{i}.10"),
    "binary": lambda i: Binary(bytes([i]) * 5),
    "uuid": lambda i: uuid.UUID(int=i << 64),
    "date": lambda i: DatetimeMS(-62_135_596_800_000 + i * 86_400_000),
    "string": lambda i: f"k{i} é",
    "int64": lambda i: Int64(2**62 + i),
    "double": lambda i: i / 4,
}


def _mongo_changes(coll, make) -> None:
    coll.update_one({"_id": make(1)}, {"$set": {"note": "changed"}})
    coll.update_one({"_id": make(1)}, {"$inc": {"v": 100}})
    coll.replace_one({"_id": make(2)}, {"v": -2, "note": "replaced"})
    coll.delete_one({"_id": make(3)})
    coll.insert_one({"_id": make(50), "v": 50, "note": "new"})
    coll.update_one({"_id": make(50)}, {"$set": {"note": "new, updated"}})
    coll.insert_one({"_id": make(51), "v": 51, "note": "inserted then deleted"})
    coll.delete_one({"_id": make(51)})


def _canon(value):
    """A value compared by what it means: instants as numbers, floats by text, uuids as text."""
    if isinstance(value, dict):
        return {k: _canon(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_canon(v) for v in value]
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if hasattr(value, "timestamp") and hasattr(value, "tzinfo"):
        return value.timestamp()
    return value


def _by_id(table: pa.Table) -> dict:
    rows = [_canon(r) for r in table.to_pylist()]
    return {json.dumps(r["_id"], default=repr, sort_keys=False): r for r in rows}


@pytest.mark.parametrize("mode, destination", MONGO_CASES)
def test_mongodb_ids_of_every_type_merge(mongo_server, mongo_db, tmp_path, mode, destination):
    with connect(mongo_server.uri) as client:
        for name, make in MONGO_IDS.items():
            client[mongo_db][name].insert_many([{"_id": make(i), "v": i, "note": "seed"} for i in range(1, 13)])
    src = write_json(tmp_path / "src.json", {"type": "mongodb", "uri": mongo_server.uri, "database": mongo_db})
    root = tmp_path / "lake"
    dst = write_json(tmp_path / "dst.json", {"type": destination, "path": str(root)})
    catalog = discover_catalog(src, tmp_path / "cat.json", {name: "cdc" for name in MONGO_IDS})
    id_types = {s["name"]: s["json_schema"]["properties"]["_id"]["x-olake-type"] for s in catalog["streams"]}
    assert (id_types["document"], id_types["nested"], id_types["mixed"]) == ("document", "document", "bson")
    state = tmp_path / "st.json"
    logs = _run(mode, src, tmp_path / "cat.json", dst, state)
    with connect(mongo_server.uri) as client:
        for name, make in MONGO_IDS.items():
            _mongo_changes(client[mongo_db][name], make)
    logs += _run(mode, src, tmp_path / "cat.json", dst, state)
    with connect(mongo_server.uri) as client:
        for stream in catalog["streams"]:
            source = list(client[mongo_db][stream["name"]].find())
            columns = list(stream["json_schema"]["properties"])
            expected = documents_to_batch(source, stream["json_schema"], stream["name"]).select(columns)
            actual = _current(destination, root, mongo_db, stream["name"], columns, ["_id"])
            got, want = _by_id(actual), _by_id(expected)
            said = [line for line in logs.splitlines() if f".{stream['name']}" in line]
            assert got.keys() == want.keys(), (stream["name"], "missing", want.keys() - got.keys(), "extra",
                                               got.keys() - want.keys(), said)
            assert got == want, stream["name"]
            assert actual.num_rows == len(source), (stream["name"], actual.num_rows, len(source), said)
