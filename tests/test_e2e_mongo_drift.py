"""MongoDB schema drift end to end: documents whose values the catalog's types cannot hold (types the
discovery sample never saw) widen the stream instead of stopping it, in the full load (a chunk meets
them) and in change capture (a change carries them), through ``read | write`` and ``sync``, into
Parquet and Iceberg, compared value by value with the source documents.

The first test runs the real commands; the others run the same use cases in this process on the
session's Spark (``read`` into a buffer, ``write`` from it; ``sync``), which saves a JVM per run.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

from bson import Decimal128, Int64, json_util

from olake_cli.sources.mongodb.bson_ejson import EJSON_OPTIONS
from tests.support.cdc import discover_catalog
from tests.support.cli import read_into_write, write_json
from tests.support.current_view import iceberg_table
from tests.support.inprocess import read_write, sync
from tests.support.mongo import connect
from tests.support.verify import latest_versions, read_parquet

DOCS = 900  # three chunks of 300
COLUMNS = ("_id", "n", "x", "s", "extra", "note", "sub")


def _config(tmp_path: Path, uri: str, database: str) -> str:
    return write_json(tmp_path / "src.json", {"type": "mongodb", "uri": uri, "database": database,
                                              "chunk_documents": 300})


def _seed(uri: str, database: str, count: int = DOCS) -> None:
    with connect(uri) as client:
        client[database].things.insert_many(
            [{"_id": i, "n": i, "x": i * 2, "s": f"s{i}", "sub": {"a": i}} for i in range(1, count + 1)])


def _source_rows(uri: str, database: str) -> dict:
    with connect(uri) as client:
        return {d["_id"]: d for d in client[database].things.find()}


def _value(value, olake_type: str):
    """A source value as the destination holds it in a column of ``olake_type``, computed independently
    of the code under test (a double in decimal128: the shortest text that reads back as it)."""
    if value is None:
        return None
    if olake_type == "float64":
        return float(value)
    if olake_type == "decimal128":
        return str(Decimal(repr(value))) if isinstance(value, float) else str(value)
    if olake_type == "bson":
        return json_util.dumps(value, json_options=EJSON_OPTIONS)
    return int(value) if olake_type in ("int32", "int64") else value


def _assert_rows(rows: list[dict], source: dict, types: dict[str, str]) -> None:
    """The destination rows equal the source documents value by value; ``types`` gives the columns'
    types after the drift (``sub.a`` the sub-field's), the others keep their discovered ones."""
    types = {"n": "int64", "x": "int32", "s": "string", "extra": "string", "note": "string", "sub.a": "int32",
             **types}
    got = {r["_id"]: {k: r.get(k) for k in COLUMNS} for r in rows}
    assert got.keys() == source.keys()
    for key, doc in source.items():
        sub = doc.get("sub")
        expected = {"_id": key, **{c: _value(doc.get(c), types[c]) for c in COLUMNS if c not in ("_id", "sub")},
                    "sub": None if sub is None else {"a": _value(sub["a"], types["sub.a"])}}
        assert got[key] == expected, key


def _parquet_rows(root: Path, database: str) -> list[dict]:
    return latest_versions(read_parquet(str(root / database / "things")), ["_id"]).to_pylist()


def _iceberg_rows(root: Path, database: str) -> list[dict]:
    return iceberg_table(root, database, "things").scan().to_arrow().to_pylist()


def _drift(state: Path) -> dict[str, str]:
    """Column -> the x-olake-type the state records it drifted to."""
    drift = json.loads(state.read_text())["streams"][0]["stream_state"].get("schema_drift") or {}
    return {name: change["to"]["x-olake-type"] for name, change in drift.items()}


def test_a_full_load_meeting_new_types_widens_instead_of_stopping(mongo_server, mongo_db, tmp_path, spark):
    _seed(mongo_server.uri, mongo_db)
    src = _config(tmp_path, mongo_server.uri, mongo_db)
    catalog = discover_catalog(src, tmp_path / "cat.json", {})
    props = catalog["streams"][0]["json_schema"]["properties"]
    assert [props[c]["x-olake-type"] for c in ("n", "x", "s", "sub")] == ["int32", "int32", "string", "document"]
    with connect(mongo_server.uri) as client:  # values the sample never saw, in every chunk
        coll = client[mongo_db].things
        coll.update_one({"_id": 10}, {"$set": {"n": Int64(2**40)}})  # int32 -> int64: in place
        coll.update_one({"_id": 20}, {"$set": {"extra": "new field"}})  # a new column: in place
        coll.update_one({"_id": 450}, {"$set": {"x": 2.5}})  # int32 -> float64: type replaced
        coll.update_one({"_id": 451}, {"$set": {"x": Int64(2**53 + 1)}})  # not a double: decimal128
        coll.update_one({"_id": 880}, {"$set": {"s": 5, "sub": {"a": Decimal128("1.5")}}})  # -> bson, decimal128
    source = _source_rows(mongo_server.uri, mongo_db)
    drifted = {"x": "decimal128", "s": "bson", "sub.a": "decimal128"}

    lake = write_json(tmp_path / "lake.json", {"type": "parquet", "path": str(tmp_path / "lake")})
    state = tmp_path / "st.json"
    result = read_into_write(["--config", src, "--catalog", str(tmp_path / "cat.json"), "--state", str(state)],
                             ["--config", lake, "--catalog", str(tmp_path / "cat.json"), "--state", str(state)])
    assert (result.read_code, result.write_code) == (0, 0), result.read_stderr.decode()[-3000:] + \
        result.write_stderr.decode()[-3000:]
    _assert_rows(_parquet_rows(tmp_path / "lake", mongo_db), source, drifted)
    files = read_parquet(str(tmp_path / "lake" / mongo_db / "things"))
    assert "_olake_toast_unchanged" not in files.column_names  # PostgreSQL's alone
    log = result.read_stderr.decode()
    assert "schema drift" in log and "loaded anew" in log
    assert _drift(state) == {"n": "int64", "extra": "string", "x": "decimal128", "s": "bson", "sub": "document"}

    iceberg = write_json(tmp_path / "ice.json", {"type": "iceberg", "path": str(tmp_path / "ice")})
    ice_state = tmp_path / "ice-st.json"
    sync(src, tmp_path / "cat.json", iceberg, ice_state)
    _assert_rows(_iceberg_rows(tmp_path / "ice", mongo_db), source, drifted)
    log = sync(src, tmp_path / "cat.json", iceberg, ice_state)  # the drift is kept: no drift, no reload
    assert "schema drift" not in log
    _assert_rows(_iceberg_rows(tmp_path / "ice", mongo_db), source, drifted)


def test_changes_with_new_types_widen_the_stream(mongo_server, mongo_db, tmp_path, spark):
    """In place (a long, a new field): the changes go on under the wider type. A type replaced (a
    double in an int32 column): the stream is loaded anew on the next run, whose load widens it."""
    _seed(mongo_server.uri, mongo_db, 300)
    src = _config(tmp_path, mongo_server.uri, mongo_db)
    discover_catalog(src, tmp_path / "cat.json", {"things": "cdc"})
    lake = write_json(tmp_path / "lake.json", {"type": "parquet", "path": str(tmp_path / "lake")})
    iceberg = write_json(tmp_path / "ice.json", {"type": "iceberg", "path": str(tmp_path / "ice")})
    paths = [(read_write, lake, tmp_path / "st.json", lambda: _parquet_rows(tmp_path / "lake", mongo_db)),
             (sync, iceberg, tmp_path / "ice-st.json", lambda: _iceberg_rows(tmp_path / "ice", mongo_db))]
    for run, dst, state, _ in paths:
        run(src, tmp_path / "cat.json", dst, state)

    with connect(mongo_server.uri) as client:
        coll = client[mongo_db].things
        coll.insert_one({"_id": 1001, "n": Int64(2**40), "x": 1, "s": "late", "sub": {"a": 1}})
        coll.update_one({"_id": 5}, {"$set": {"extra": "new field", "n": Int64(-(2**40))}})
        coll.delete_one({"_id": 6})
    for run, dst, state, rows in paths:
        log = run(src, tmp_path / "cat.json", dst, state)
        assert "schema drift: 'n' int32 -> int64" in log and "'extra' absent -> string" in log
        _assert_rows(rows(), _source_rows(mongo_server.uri, mongo_db), {})
        assert _drift(state) == {"n": "int64", "extra": "string"}

    with connect(mongo_server.uri) as client:
        client[mongo_db].things.update_one({"_id": 7}, {"$set": {"x": 2.5}})
        client[mongo_db].things.update_one({"_id": 8}, {"$set": {"note": "after the drift"}})
    for run, dst, state, rows in paths:
        log = run(src, tmp_path / "cat.json", dst, state)
        assert "'x' int32 -> float64 (a column's type is replaced); the stream is loaded anew" in log
        log = run(src, tmp_path / "cat.json", dst, state)
        assert "'x' int32 -> float64" in log and "the stream is loaded anew with the new type(s)" in log
        _assert_rows(rows(), _source_rows(mongo_server.uri, mongo_db), {"x": "float64"})
        assert _drift(state) == {"n": "int64", "extra": "string", "x": "float64", "note": "string"}


def test_an_incremental_pass_meeting_new_types_reads_again_or_loads_anew(mongo_server, mongo_db, tmp_path, spark):
    _seed(mongo_server.uri, mongo_db, 300)
    src = _config(tmp_path, mongo_server.uri, mongo_db)
    discover_catalog(src, tmp_path / "cat.json", {"things": "incremental"}, cursor={"things": "n"})
    lake = write_json(tmp_path / "lake.json", {"type": "parquet", "path": str(tmp_path / "lake")})
    state = tmp_path / "st.json"
    read_write(src, tmp_path / "cat.json", lake, state)  # the first full load
    with connect(mongo_server.uri) as client:
        client[mongo_db].things.insert_one({"_id": 301, "n": 301, "x": 1, "s": "a", "sub": {"a": 1}, "extra": "e"})
    log = read_write(src, tmp_path / "cat.json", lake, state)
    assert "'extra' absent -> string; 1 chunk(s) are read again" in log
    _assert_rows(_parquet_rows(tmp_path / "lake", mongo_db), _source_rows(mongo_server.uri, mongo_db), {})
    with connect(mongo_server.uri) as client:
        client[mongo_db].things.insert_one({"_id": 302, "n": 302, "x": 1, "s": 5, "sub": {"a": 1}})
    log = read_write(src, tmp_path / "cat.json", lake, state)
    assert "'s' string -> bson; the stream is loaded anew" in log
    _assert_rows(_parquet_rows(tmp_path / "lake", mongo_db), _source_rows(mongo_server.uri, mongo_db), {"s": "bson"})
    assert json.loads(state.read_text())["streams"][0]["sync_type"] == "incremental"
