"""The Kafka source end to end against a real broker (tansu) and a real PostgreSQL target.

A topic olake did not write is read as its messages (partition, offset, timestamp, key, value, headers)
and compared with what an independent consumer reads; olake's envelope on a two-partition topic (load
markers in both partitions, rows, an update leaving a TOASTed value unsent, a delete and its tombstone,
a key move, a transaction written twice after a kill, a second load replacing the first) becomes the
current table; bad input (a wrong bootstrap address, a missing topic, a value that is not the envelope,
a message that is not UTF-8) is one line naming what is wrong, a non-zero exit and nothing committed
past it.
"""

from __future__ import annotations

import base64
import json

import msgpack
import orjson
import psycopg
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.cli import messages, run_olake, write_json
from tests.support.kafka_broker import read_topic
from tests.support.pgcluster import free_port


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    """Create ``topic`` with confluent-kafka's admin client."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result()


def produce(bootstrap: str, topic: str, batch: list[tuple[int, bytes | None, bytes | None]],
            headers: list | None = None) -> None:
    """Produce ``(partition, key, value)`` messages with confluent-kafka, one at a time, in order."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for partition, key, value in batch:
        producer.produce(topic, key=key, value=value, partition=partition, headers=headers)
        producer.flush()


def sync(src: str, dst: str, catalog, state) -> object:
    """One ``olake sync`` run."""
    return run_olake("sync", "--source", src, "--destination", dst, "--catalog", str(catalog), "--state", str(state))


def discover(src: str, path) -> dict:
    """``olake discover`` into ``path``."""
    found = run_olake("discover", "--config", src)
    assert found.returncode == 0, found.stderr.decode()[-2000:]
    catalog = json.loads(found.stdout)["catalog"]
    path.write_text(json.dumps(catalog))
    return catalog


def target_rows(dsn: str, query: str) -> list[tuple]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(query).fetchall()


def test_a_topic_olake_did_not_write_is_read_as_its_messages(kafka_broker, kafka_prefix, pg_target, target_db,
                                                              tmp_path):
    topic = f"{kafka_prefix}clicks"
    create_topic(kafka_broker.bootstrap, topic, partitions=2)
    first = [(0, b"k1", b'{"a": 1}'), (1, None, "naïve 😀".encode()), (0, b"k1", None), (1, b"k3", b"")]
    produce(kafka_broker.bootstrap, topic, first, headers=[("h", b"v1"), ("n", None)])
    src = write_json(tmp_path / "src.json", kafka_broker.config(topics=[topic]))
    dst = write_json(tmp_path / "dst.json", pg_target.destination_config(target_db))
    catalog = discover(src, tmp_path / "cat.json")
    (stream,) = catalog["streams"]
    assert (stream["namespace"], stream["name"], stream["source_defined_primary_key"]) == \
        ("kafka", topic, [["partition"], ["offset"]])
    state = tmp_path / "state.json"
    for batch in ([], [(1, b"k4", b"later"), (0, b"k5", b"x" * 3000)]):
        produce(kafka_broker.bootstrap, topic, batch)
        result = sync(src, dst, tmp_path / "cat.json", state)
        assert result.returncode == 0, result.stderr.decode()[-3000:]
        expected = sorted((m.partition, m.offset, None if m.key is None else m.key.decode(),
                           None if m.value is None else m.value.decode(),
                           [[k, None if v is None else v.decode()] for k, v in m.headers.items()])
                          for m in read_topic(kafka_broker.bootstrap, topic))
        found = target_rows(pg_target.dsn(target_db), f'SELECT "partition", "offset", key, value, headers::text '
                                                      f'FROM kafka."{topic}" ORDER BY 1, 2')
        assert [(p, o, k, v, json.loads(h)) for p, o, k, v, h in found] == expected
    assert len(expected) == 6
    offsets = json.loads(state.read_text())["streams"][0]["stream_state"]["offsets"]
    assert {int(p): o for p, o in offsets.items()} == {0: 3, 1: 3}
    for start, count in (("latest", 0), ("earliest", 6)):  # (tansu's offsets by time are all 0: not tested)
        started = write_json(tmp_path / "start.json", kafka_broker.config(topics=[topic], start_from=start))
        read = run_olake("read", "--config", started, "--catalog", str(tmp_path / "cat.json"))
        assert read.returncode == 0, read.stderr.decode()[-2000:]
        assert len([m for m in messages(read.stdout) if m["type"] == "RECORD"]) == count, start


CATALOG_ENTRY = {"stream": {
    "name": "items", "namespace": "public",
    "json_schema": {"type": "object", "properties": {
        "id": {"type": "integer", "x-olake-type": "int32"},
        "label": {"type": ["string", "null"], "x-olake-type": "string"},
        "body": {"type": ["string", "null"], "x-olake-type": "string"},
        "price": {"type": ["string", "null"], "x-olake-type": "decimal(10,2)"}}},
    "supported_sync_modes": ["full_refresh", "cdc"], "source_defined_primary_key": [["id"]],
    "sync_mode": "cdc"}}


def envelope(op: str, row: dict | None, key: int, op_id: int | None, load_id: str | None = None,
             toast: list[str] | None = None) -> tuple[bytes, bytes]:
    """One of olake's envelope messages for ``public.items`` (key, value)."""
    value = {"v": 1, "op": op, "after": row, "key": {"id": key}, "op_id": None if op_id is None else f"{op_id:032X}",
             "commit_ts": None if op == "r" else "2026-01-02T03:04:05.123456+00:00",
             "load_id": load_id, "stream": {"namespace": "public", "name": "items"}}
    if toast:
        value["toast_unchanged"] = toast
    return orjson.dumps({"id": key}), orjson.dumps(value)


def marker(load_id: str, op_id: int) -> tuple[bytes, bytes]:
    """A load marker of ``public.items``."""
    return orjson.dumps({"_olake": "load"}), orjson.dumps({
        "v": 1, "op": "load", "after": None, "key": None, "op_id": f"{op_id:032X}", "commit_ts": None,
        "load_id": load_id, "reason": "load", "stream": {"namespace": "public", "name": "items"}})


def row(key: int, label: str, body: str | None = "b", price: str | None = "1.50") -> dict:
    return {"id": key, "label": label, "body": body, "price": price}


def test_olakes_envelope_is_applied_as_changes(kafka_broker, kafka_prefix, pg_target, target_db, tmp_path):
    """Two partitions (keys 1, 3 in partition 0; 2, 4 in partition 1), each starting with the load's marker."""
    bootstrap, topic = kafka_broker.bootstrap, f"{kafka_prefix}public.items"
    create_topic(bootstrap, topic, partitions=2)
    create_topic(bootstrap, f"{kafka_prefix}_catalog")
    produce(bootstrap, f"{kafka_prefix}_catalog", [(0, b"public.items", orjson.dumps(CATALOG_ENTRY))])
    part = {1: 0, 3: 0, 2: 1, 4: 1, 5: 1}
    first_load = [marker("L1", 10), envelope("r", row(1, "one"), 1, 10, "L1"), envelope("r", row(2, "two"), 2, 10, "L1"),
                  envelope("r", row(3, "three", "big"), 3, 10, "L1")]
    changes = [envelope("u", {"id": 3, "label": "three!", "price": "3.00"}, 3, 11, toast=["body"]),
               envelope("d", None, 1, 12), (orjson.dumps({"id": 1}), None),
               envelope("d", None, 2, 13), (orjson.dumps({"id": 2}), None), envelope("c", row(4, "moved"), 4, 13 + 1),
               envelope("u", {"id": 3, "label": "replayed", "price": "9.00"}, 3, 11)]  # a replay: skipped
    sent = [(0, *first_load[0]), (1, *first_load[0])] + [(part[json.loads(k)["id"]], k, v)
                                                         for k, v in first_load[1:] + changes]
    produce(bootstrap, topic, sent)
    src = write_json(tmp_path / "src.json", kafka_broker.config(topics=[topic], topic_prefix=kafka_prefix))
    dst = write_json(tmp_path / "dst.json", pg_target.destination_config(target_db))
    catalog = discover(src, tmp_path / "cat.json")
    assert catalog["streams"][0]["json_schema"]["properties"]["price"]["x-olake-type"] == "decimal(10,2)"
    assert (catalog["streams"][0]["namespace"], catalog["streams"][0]["name"]) == ("public", "items")
    state = tmp_path / "state.json"
    result = sync(src, dst, tmp_path / "cat.json", state)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    dsn = pg_target.dsn(target_db)
    query = "SELECT id, label, body, price::text FROM public.items ORDER BY id"
    assert target_rows(dsn, query) == [(3, "three!", "big", "3.00"), (4, "moved", "b", "1.50")]
    # a new load: its marker in partition 1 first; partition 0's change before its own marker is older
    produce(bootstrap, topic, [(1, *marker("L2", 20)), (1, *envelope("r", row(5, "five"), 5, 20, "L2")),
                               (0, *envelope("u", row(3, "stale"), 3, 15)), (0, *marker("L2", 20)),
                               (0, *envelope("r", row(3, "again"), 3, 20, "L2")),
                               (0, *envelope("u", row(3, "after"), 3, 21))])
    result = sync(src, dst, tmp_path / "cat.json", state)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    assert target_rows(dsn, query) == [(3, "after", "b", "1.50"), (5, "five", "b", "1.50")]
    again = run_olake("sync", "--source", src, "--destination", dst, "--catalog", str(tmp_path / "cat.json"),
                      "--state", str(state), "--full-refresh", "public.items")  # the whole topic read again
    assert again.returncode == 0, again.stderr.decode()[-3000:]
    assert target_rows(dsn, query) == [(3, "after", "b", "1.50"), (5, "five", "b", "1.50")]
    after_13 = write_json(tmp_path / "after13.json", kafka_broker.config(
        topics=[topic], topic_prefix=kafka_prefix, start_from={"op_id": f"{13:032X}"}))
    read = run_olake("read", "--config", after_13, "--catalog", str(tmp_path / "cat.json"))
    assert read.returncode == 0, read.stderr.decode()[-2000:]
    records = [m["record"]["data"] for m in messages(read.stdout) if m["type"] == "RECORD"]
    assert not [r for r in records if r["_olake_op"] == "d" or r.get("label") == "three!"], "changes up to 13 skipped"
    assert [r["label"] for r in records if r.get("id") == 3][-1] == "after", "later changes are read"


def test_bad_input_is_one_line_and_commits_nothing_past_it(kafka_broker, kafka_prefix, pg_target, target_db, tmp_path):
    nowhere = write_json(tmp_path / "nowhere.json", {"type": "kafka", "bootstrap_servers": f"127.0.0.1:{free_port()}",
                                                     "topics": ["t"], "timeout_s": 2})
    result = run_olake("check", "--config", nowhere)
    assert result.returncode != 0 and b"cannot reach the broker" in result.stderr, result.stderr.decode()
    missing = write_json(tmp_path / "missing.json", kafka_broker.config(topics=[f"{kafka_prefix}nope"]))
    result = run_olake("discover", "--config", missing)
    assert result.returncode != 0
    assert f"topic(s) {kafka_prefix}nope do not exist".encode() in result.stderr, result.stderr.decode()
    bootstrap, topic = kafka_broker.bootstrap, f"{kafka_prefix}public.items"
    create_topic(bootstrap, topic)
    create_topic(bootstrap, f"{kafka_prefix}_catalog")
    produce(bootstrap, f"{kafka_prefix}_catalog", [(0, b"public.items", orjson.dumps(CATALOG_ENTRY))])
    produce(bootstrap, topic, [(0, *marker("L1", 10)), (0, *envelope("r", row(1, "one"), 1, 10, "L1")),
                               (0, b"k", b"not the envelope")])
    src = write_json(tmp_path / "src.json", kafka_broker.config(topics=[topic], topic_prefix=kafka_prefix))
    dst = write_json(tmp_path / "dst.json", pg_target.destination_config(target_db))
    discover(src, tmp_path / "cat.json")
    state = tmp_path / "state.json"
    result = sync(src, dst, tmp_path / "cat.json", state)
    assert result.returncode != 0
    assert f"topic '{topic}' partition 0 offset 2: the value is not MSGPACK".encode() in result.stderr, \
        result.stderr.decode()[-3000:]
    held = json.loads(state.read_text())["streams"][0]["stream_state"] if state.exists() else {"offsets": {"0": 0}}
    assert held["offsets"]["0"] <= 2, "nothing is committed past the bad message"
    text_topic = f"{kafka_prefix}raw"
    create_topic(bootstrap, text_topic)
    produce(bootstrap, text_topic, [(0, b"k", b"\xff\xfe")])
    raw = write_json(tmp_path / "raw.json", kafka_broker.config(topics=[text_topic]))
    discover(raw, tmp_path / "raw_cat.json")
    result = run_olake("read", "--config", raw, "--catalog", str(tmp_path / "raw_cat.json"))
    assert result.returncode != 0
    assert f"topic '{text_topic}' partition 0 offset 0: the value is not UTF-8 text".encode() in result.stderr
    as_bytes = write_json(tmp_path / "bytes.json", kafka_broker.config(topics=[text_topic], message_values="bytes"))
    discover(as_bytes, tmp_path / "bytes_cat.json")
    result = run_olake("read", "--config", as_bytes, "--catalog", str(tmp_path / "bytes_cat.json"))
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    [record] = [m["record"]["data"] for m in messages(result.stdout) if m["type"] == "RECORD"]
    assert (record["key"], record["value"]) == (base64.b64encode(b"k").decode(), base64.b64encode(b"\xff\xfe").decode())


def test_msgpack_envelopes_are_read_as_json_ones(kafka_broker, kafka_prefix, tmp_path):
    prefix = f"{kafka_prefix}mp."
    bootstrap, topic = kafka_broker.bootstrap, f"{prefix}public.items"
    create_topic(bootstrap, topic)
    create_topic(bootstrap, f"{prefix}_catalog")
    produce(bootstrap, f"{prefix}_catalog", [(0, b"public.items", orjson.dumps(CATALOG_ENTRY))])
    packed = [(msgpack.packb(orjson.loads(k)), msgpack.packb(orjson.loads(v))) for k, v in
              (marker("L1", 10), envelope("r", row(1, "one"), 1, 10, "L1"), envelope("u", row(1, "uno"), 1, 11))]
    produce(bootstrap, topic, [(0, k, v) for k, v in packed])
    src = write_json(tmp_path / "src.json", kafka_broker.config(topics=[topic], topic_prefix=prefix))
    discover(src, tmp_path / "cat.json")
    result = run_olake("read", "--config", src, "--catalog", str(tmp_path / "cat.json"))
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    records = [m["record"]["data"] for m in messages(result.stdout) if m["type"] == "RECORD"]
    assert [(r["_olake_op"], r.get("label")) for r in records] == [("t", None), ("c", "one"), ("u", "uno")]
