"""MongoDB schema drift end to end: documents whose values the catalog's types cannot hold (types the
discovery sample never saw) widen the stream instead of stopping it, in the full load (a chunk meets
them) and in change capture (a change carries them), through ``read | write`` and ``sync``, into
Parquet and Iceberg, compared value by value with the source documents.
"""

from __future__ import annotations

import json
from pathlib import Path

from bson import Decimal128, Int64, Timestamp, json_util

from olake_cli.sources.mongodb.bson_types import EJSON_OPTIONS
from tests.support.cdc import discover_catalog
from tests.support.cli import messages, read_into_write, run_olake, write_json
from tests.support.current_view import iceberg_table
from tests.support.mongo import connect
from tests.support.verify import latest_versions, read_parquet

DOCS = 900  # three chunks of 300


def _config(tmp_path: Path, uri: str, database: str) -> str:
    return write_json(tmp_path / "src.json", {"type": "mongodb", "uri": uri, "database": database,
                                              "chunk_documents": 300})


def _seed(uri: str, database: str) -> None:
    with connect(uri) as client:
        client[database].things.insert_many(
            [{"_id": i, "n": i, "x": i * 2, "s": f"s{i}", "sub": {"a": i}} for i in range(1, DOCS + 1)])


def _drift_in_place_and_retyped(uri: str, database: str) -> None:
    """Values discovery never saw, in each chunk: a long in an int32 column (in place), a new field
    (in place), a double in an int32 column, an int in a string column and a Decimal128 in a
    document's int32 sub-field (types replaced)."""
    with connect(uri) as client:
        coll = client[database].things
        coll.update_one({"_id": 10}, {"$set": {"n": Int64(2**40)}})
        coll.update_one({"_id": 20}, {"$set": {"extra": "new field"}})
        coll.update_one({"_id": 450}, {"$set": {"x": 2.5}})
        coll.update_one({"_id": 880}, {"$set": {"s": 5, "sub": {"a": Decimal128("1.5")}}})


def _source_rows(uri: str, database: str) -> dict:
    with connect(uri) as client:
        return {d["_id"]: d for d in client[database].things.find()}


def _expected(doc: dict) -> dict:
    """A source document as its destination row under the drifted types, computed independently."""
    s = doc["s"]
    return {"_id": doc["_id"], "n": int(doc["n"]), "x": float(doc["x"]),
            "s": None if s is None else json_util.dumps(s, json_options=EJSON_OPTIONS),
            "extra": doc.get("extra"),
            "sub": {"a": str(doc["sub"]["a"])}}


def _assert_rows(rows: list[dict], source: dict) -> None:
    got = {r["_id"]: {k: r[k] for k in ("_id", "n", "x", "s", "extra", "sub")} for r in rows}
    assert got.keys() == source.keys()
    for key, doc in source.items():
        assert got[key] == _expected(doc), key


def _parquet_rows(root: Path, database: str) -> list[dict]:
    return latest_versions(read_parquet(str(root / database / "things")), ["_id"]).to_pylist()


def _iceberg_rows(root: Path, database: str) -> list[dict]:
    return iceberg_table(root, database, "things").scan().to_arrow().to_pylist()


def test_a_full_load_meeting_new_types_widens_instead_of_stopping(mongo_server, mongo_db, tmp_path):
    _seed(mongo_server.uri, mongo_db)
    src = _config(tmp_path, mongo_server.uri, mongo_db)
    catalog = discover_catalog(src, tmp_path / "cat.json", {})
    props = catalog["streams"][0]["json_schema"]["properties"]
    assert (props["n"]["x-olake-type"], props["x"]["x-olake-type"], props["s"]["x-olake-type"]) == \
        ("int32", "int32", "string")
    _drift_in_place_and_retyped(mongo_server.uri, mongo_db)
    source = _source_rows(mongo_server.uri, mongo_db)

    lake = write_json(tmp_path / "lake.json", {"type": "parquet", "path": str(tmp_path / "lake")})
    state = tmp_path / "st.json"
    result = read_into_write(["--config", src, "--catalog", str(tmp_path / "cat.json"), "--state", str(state)],
                             ["--config", lake, "--catalog", str(tmp_path / "cat.json"), "--state", str(state)])
    assert (result.read_code, result.write_code) == (0, 0), result.read_stderr.decode()[-3000:] + \
        result.write_stderr.decode()[-3000:]
    _assert_rows(_parquet_rows(tmp_path / "lake", mongo_db), source)
    log = result.read_stderr.decode()
    assert "schema drift" in log and "loaded anew" in log
    drift = json.loads(state.read_text())["streams"][0]["stream_state"]["schema_drift"]
    assert {name: change["to"]["x-olake-type"] for name, change in drift.items()} == {
        "n": "int64", "extra": "string", "x": "float64", "s": "bson", "sub": "document"}
    assert drift["sub"]["to"]["properties"]["a"]["x-olake-type"] == "decimal128"

    iceberg = write_json(tmp_path / "ice.json", {"type": "iceberg", "path": str(tmp_path / "ice")})
    synced = run_olake("sync", "--source", src, "--destination", iceberg, "--catalog", str(tmp_path / "cat.json"),
                       "--state", str(tmp_path / "ice-st.json"))
    assert synced.returncode == 0, synced.stderr.decode()[-3000:]
    _assert_rows(_iceberg_rows(tmp_path / "ice", mongo_db), source)

    again = run_olake("sync", "--source", src, "--destination", iceberg, "--catalog", str(tmp_path / "cat.json"),
                      "--state", str(tmp_path / "ice-st.json"))  # the drift is kept: no drift, no reload
    assert again.returncode == 0, again.stderr.decode()[-3000:]
    assert "schema drift" not in again.stderr.decode()
    _assert_rows(_iceberg_rows(tmp_path / "ice", mongo_db), source)
