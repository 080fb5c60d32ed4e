"""MongoDB -> Kafka -> Parquet: every BSON type of the MongoDB suite (mixed ``_id`` types, NaN and signed
zeros, Decimal128 extremes, datetimes at the calendar's ends, binaries, regexes, min/max keys, nested
documents) through olake's envelope and back, value by value; then inserts, updates and deletes, the
lake's current documents equal to the collection's."""

from __future__ import annotations

import re

from tests.support.cdc import discover_catalog
from tests.support.cli import run_olake, write_json
from tests.support.mongo import assert_lake_equals_collection, connect, seed_documents
from tests.test_e2e_mongo import _assert_matches_source, _config, _dest, _mixed_documents


def synced(src: str, dst: str, catalog, state) -> None:
    """One ``olake sync`` run that succeeds."""
    result = run_olake("sync", "--source", src, "--destination", dst, "--catalog", str(catalog), "--state", str(state))
    assert result.returncode == 0, result.stderr.decode()[-3000:]


def test_mongodb_through_kafka_into_parquet_is_exact(mongo_server, mongo_db, kafka_broker, kafka_prefix, tmp_path):
    uri = mongo_server.uri
    with connect(uri) as client:
        client[mongo_db].things.insert_many(_mixed_documents(240))
        source_docs = list(client[mongo_db].things.find())
    seed_documents(uri, mongo_db, "counted", 50)
    src = _config(tmp_path, uri, mongo_db)
    mongo_catalog = discover_catalog(src, tmp_path / "mongo_cat.json", {"things": "cdc", "counted": "cdc"})
    into_kafka = write_json(tmp_path / "into_kafka.json", kafka_broker.config(topic_prefix=kafka_prefix))
    from_kafka = write_json(tmp_path / "from_kafka.json", kafka_broker.config(
        topic_prefix=kafka_prefix, topic_pattern=re.escape(f"{kafka_prefix}{mongo_db}.") + ".*"))
    lake, root = _dest(tmp_path)

    synced(src, into_kafka, tmp_path / "mongo_cat.json", tmp_path / "mongo_state.json")
    catalog = discover_catalog(from_kafka, tmp_path / "kafka_cat.json", {"things": "cdc", "counted": "cdc"})
    by_name = {s["name"]: s for s in catalog["streams"]}
    things = next(s for s in mongo_catalog["streams"] if s["name"] == "things")
    assert by_name["things"]["json_schema"] == things["json_schema"], "the original types come back"
    synced(from_kafka, lake, tmp_path / "kafka_cat.json", tmp_path / "kafka_state.json")
    _assert_matches_source(root / mongo_db / "things", source_docs, things)

    with connect(uri) as client:
        counted = client[mongo_db].counted
        counted.update_many({"_id": {"$lte": 10}}, {"$set": {"note": "changed"}, "$inc": {"v": 100}})
        counted.delete_many({"_id": {"$gt": 40}})
        counted.insert_many([{"_id": i, "v": -i, "note": "new"} for i in range(100, 105)])
        counted.replace_one({"_id": 20}, {"v": 0, "note": "replaced"})
    synced(src, into_kafka, tmp_path / "mongo_cat.json", tmp_path / "mongo_state.json")
    synced(from_kafka, lake, tmp_path / "kafka_cat.json", tmp_path / "kafka_state.json")
    assert_lake_equals_collection(uri, mongo_db, "counted", root / mongo_db / "counted")
