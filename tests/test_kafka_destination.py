"""The Kafka destination end to end: ``olake sync`` from PostgreSQL and MongoDB, and ``olake write``, into a
real broker (tansu), the topics read back by a read_committed consumer (tests/support/kafka_broker.py,
confluent-kafka only) and by kcat, reduced to the current table and compared with the source (or
``olake read``'s records) value by value; bad input; the catalog topic."""

from __future__ import annotations

import json
import subprocess

import psycopg
import pytest

from olake_cli.core.codec.decode import decode_rows
from tests.support.cdc import discover_catalog
from tests.support.cli import messages, run_olake, write_json
from tests.support.conformance import body, catalog, change, full_load, state
from tests.support.kafka_broker import kcat, read_topic, replicate
from tests.support.protocol_lines import write
from tests.support.verify import assert_table_matches
from tests.test_e2e_edge_values import EDGE_DDL, EDGE_VALUES, GRID_VALUES
from tests.test_types_codec import create_everything

CHANGES = [
    "INSERT INTO edge SELECT id + 100, d, ts, tz, a_date, a_ts FROM edge",
    "UPDATE edge SET d = '2024-02-29' WHERE id = 1",
    "DELETE FROM edge WHERE id = 2",
    "UPDATE edge SET id = 1000 WHERE id = 3",  # a key move: d of 3, then the row under 1000
    "UPDATE everything SET c_int4 = 7 WHERE id = 3",  # c_text (640 kB) is TOASTed and unchanged
    "UPDATE everything SET c_text = 'short' WHERE id = 2",
]


def sync(src: str, dst: str, catalog, state, *extra: str) -> subprocess.CompletedProcess:
    result = run_olake("sync", "--source", src, "--destination", dst, "--catalog", str(catalog),
                       "--state", str(state), *extra)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    return result


def wire_rows(src: str, catalog: dict, tmp_path, key: str = "id") -> dict[str, dict[str, dict]]:
    """What ``olake read`` gives now for each selected stream (a full load): key text -> RECORD data."""
    full = {"streams": [dict(s, sync_mode="full_refresh") for s in catalog["streams"]]}
    result = run_olake("read", "--config", src, "--catalog", write_json(tmp_path / "full.json", full))
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    found: dict[str, dict[str, dict]] = {}
    for msg in messages(result.stdout):
        if msg["type"] == "RECORD":
            name, data = msg["record"]["stream"], msg["record"]["data"]
            found.setdefault(name, {})[json.dumps({key: data[key]}, sort_keys=True)] = data
    return found


def comparable(entry: dict, rows: dict[str, dict]) -> dict[str, dict]:
    """Rows with a decimal column's NaN as null: a full load the sync tasks send carries the source's
    "NaN", a change (decoded into the decimal type, as every destination does) null."""
    decimals = {c for c, p in entry["json_schema"]["properties"].items() if p["x-olake-type"].startswith("decimal(")}
    return {k: {c: None if c in decimals and v == "NaN" else v for c, v in row.items()} for k, row in rows.items()}


def assert_topics_match(src: str, catalog: dict, broker, prefix: str, tmp_path, fmt: str = "json") -> None:
    """Every selected stream's topic, reduced to its current table, holds exactly the wire values
    ``olake read`` gives for the source table now."""
    expected = wire_rows(src, catalog, tmp_path)
    for entry in catalog["streams"]:
        if entry["selected"]:
            replica = replicate(read_topic(broker.bootstrap, f"{prefix}public.{entry['name']}"), fmt)
            got, want = comparable(entry, replica.rows), comparable(entry, expected.get(entry["name"], {}))
            differ = {(k, c): (row.get(c), want.get(k, {}).get(c)) for k, row in got.items()
                      for c in set(row) | set(want.get(k, {})) if row.get(c) != want.get(k, {}).get(c)}
            assert got.keys() == want.keys() and not differ, (entry["name"], differ)


@pytest.fixture()
def edge_source(pg_cluster, pg_db) -> str:
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
        create_everything(conn)
        conn.execute("UPDATE everything SET c_text = (SELECT string_agg(md5(g::text), '') "
                     "FROM generate_series(1, 20000) g) WHERE id = 3")
        conn.execute(EDGE_DDL)
        conn.execute(f"INSERT INTO edge VALUES {EDGE_VALUES}")
        conn.execute(f"INSERT INTO grid VALUES {GRID_VALUES}")
    return pg_db


def test_every_value_and_change_reaches_the_topic_exactly(pg_cluster, edge_source, kafka_broker, kafka_prefix, tmp_path):
    dsn = pg_cluster.dsn(edge_source)
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        edge_source, replication_slot="k_slot", publication="k_pub", create_slot_and_publication=True))
    catalog = discover_catalog(src, tmp_path / "cat.json", {"edge": "cdc", "everything": "cdc"},
                               only={"edge", "grid", "everything"})
    dst = write_json(tmp_path / "dst.json", kafka_broker.config(topic_prefix=kafka_prefix))
    sync(src, dst, tmp_path / "cat.json", tmp_path / "state.json")
    assert_topics_match(src, catalog, kafka_broker, kafka_prefix, tmp_path)
    out = kcat("-C", "-b", kafka_broker.bootstrap, "-t", f"{kafka_prefix}public.grid", "-e", "-q")
    envelopes = [json.loads(line) for line in out.decode().splitlines()]  # a client none of us wrote
    grid = replicate(read_topic(kafka_broker.bootstrap, f"{kafka_prefix}public.grid")).rows
    assert [e["op"] for e in envelopes] == ["load"] + ["r"] * len(grid)
    assert {json.dumps(e["key"], sort_keys=True): e["after"] for e in envelopes[1:]} == grid
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in CHANGES:
            conn.execute(statement)
    sync(src, dst, tmp_path / "cat.json", tmp_path / "state.json")
    assert_topics_match(src, catalog, kafka_broker, kafka_prefix, tmp_path)
    with psycopg.connect(dsn, autocommit=True) as conn:  # and the values as PostgreSQL compares them
        edge = next(e for e in catalog["streams"] if e["name"] == "edge")
        replica = replicate(read_topic(kafka_broker.bootstrap, f"{kafka_prefix}public.edge"))
        assert_table_matches(conn, "public", "edge", edge["json_schema"],
                             decode_rows(list(replica.rows.values()), edge["json_schema"])[0])
    edge = read_topic(kafka_broker.bootstrap, f"{kafka_prefix}public.edge")
    deletes = [i for i, m in enumerate(edge) if m.value and json.loads(m.value)["op"] == "d"]
    assert [json.loads(edge[i].key) for i in deletes] == [{"id": 2}, {"id": 3}]
    assert all(edge[i + 1].value is None and edge[i + 1].key == edge[i].key for i in deletes)
    toasted = [json.loads(m.value) for m in read_topic(kafka_broker.bootstrap, f"{kafka_prefix}public.everything")
               if m.value and json.loads(m.value)["op"] == "u"]
    assert any(e["toast_unchanged"] == ["c_text"] and "c_text" not in e["after"] for e in toasted if e["key"]["id"] == 3)


def test_msgpack_carries_every_change_kind(kafka_broker, kafka_prefix, tmp_path):
    from tests.test_destination_conformance import AFTER_CHANGES, CHANGES, LOAD

    dst = write_json(tmp_path / "dst.json", kafka_broker.config(topic_prefix=kafka_prefix, format="msgpack"))
    result = write(dst, [catalog(), *full_load("L1", LOAD), *CHANGES, state("L1", None, "0/20")])
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    replica = replicate(read_topic(kafka_broker.bootstrap, f"{kafka_prefix}public.docs"), "msgpack")
    assert {r["id"]: (r["v"], r["n"], r["body"]) for r in replica.rows.values()} == AFTER_CHANGES


def test_bad_destination_input_is_one_line_fast_and_never_shows_a_secret(kafka_broker, kafka_prefix, tmp_path):
    from tests.support.pgcluster import free_port

    secrets = {"sasl_password": "hunter2-secret", "producer": {"ssl.key.password": "pw-xyz-secret"}}
    unreachable = write_json(tmp_path / "bad.json", {"type": "kafka", "bootstrap_servers": f"127.0.0.1:{free_port()}",
                                                     "timeout_s": 2, **secrets})
    result = run_olake("check", "--destination", unreachable)
    err = result.stderr.decode()
    assert result.returncode != 0 and err.count("\n") == 1 and "cannot reach the broker" in err, err
    assert "hunter2" not in err + result.stdout.decode() and "pw-xyz" not in err + result.stdout.decode()

    blocked = tmp_path / "no-client" / "confluent_kafka"  # an install without the kafka extra
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text("raise ImportError('No module named confluent_kafka')\n")
    result = run_olake("check", "--destination", unreachable, env={"PYTHONPATH": str(blocked.parent)})
    assert result.returncode != 0 and result.stderr.decode() == (
        "olake: error: kafka: the Kafka client is not installed; run: pip install 'olake-cli[kafka]'\n")

    good = write_json(tmp_path / "good.json", kafka_broker.config(topic_prefix=f"{kafka_prefix}check."))
    result = run_olake("check", "--destination", good)
    assert result.returncode == 0 and b'"status":"SUCCEEDED"' in result.stdout, result.stderr.decode()
    assert "an empty transaction committed" in result.stderr.decode()

    missing = write_json(tmp_path / "missing.json", kafka_broker.config(topic_prefix=kafka_prefix, create_topics=False))
    result = write(missing, [catalog(), *full_load("L1", [{1: ("v", 1, "b")}])])
    err = result.stderr.decode().strip().splitlines()
    assert result.returncode != 0 and "does not exist and create_topics is false" in err[-1], err
    assert f"'{kafka_prefix}_catalog'" in err[-1]


def test_a_mongodb_collection_of_every_bson_type_reaches_the_topic_exactly(mongo_server, mongo_db, kafka_broker,
                                                                         kafka_prefix, tmp_path):
    from tests.support.mongo import connect
    from tests.test_e2e_mongo import _mixed_documents

    with connect(mongo_server.uri) as client:
        client[mongo_db]["mixed"].insert_many(_mixed_documents(80))
    src = write_json(tmp_path / "src.json", {"type": "mongodb", "uri": mongo_server.uri, "database": mongo_db,
                                             "chunk_documents": 30})
    catalog = discover_catalog(src, tmp_path / "cat.json", {})
    dst = write_json(tmp_path / "dst.json", kafka_broker.config(topic_prefix=kafka_prefix))
    sync(src, dst, tmp_path / "cat.json", tmp_path / "state.json")
    expected = wire_rows(src, catalog, tmp_path, key="_id")["mixed"]
    replica = replicate(read_topic(kafka_broker.bootstrap, f"{kafka_prefix}{mongo_db}.mixed"))
    differ = {(k, c) for k, row in replica.rows.items() for c in row if row[c] != expected.get(k, {}).get(c)}
    assert replica.rows.keys() == expected.keys() and not differ, sorted(differ)[:5]


def test_the_catalog_topic_holds_each_stream_and_its_widened_schema(kafka_broker, kafka_prefix, tmp_path):
    dst = write_json(tmp_path / "dst.json", kafka_broker.config(topic_prefix=kafka_prefix))
    load = [{1: ("v1", 1, body(1))}]
    result = write(dst, [catalog(), *full_load("L1", load), catalog("int64"),
                         change("u", 32, 1, id=1, v="wide", n=2**40, body=body(1)), state("L1", None, "0/20")])
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    entries = [(m.key, json.loads(m.value)["stream"]) for m in read_topic(kafka_broker.bootstrap, f"{kafka_prefix}_catalog")]
    assert [key for key, _ in entries] == [b"public.docs", b"public.docs"]
    assert [e["json_schema"]["properties"]["n"]["x-olake-type"] for _, e in entries] == ["int32", "int64"]
    assert entries[-1][1]["source_defined_primary_key"] == [["id"]] and entries[-1][1]["namespace"] == "public"
