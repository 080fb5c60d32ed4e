"""The Kafka source when its broker fails: unreachable when a bounded ``sync`` starts (one line, a non-zero
exit, within ``timeout_s``), unreachable when a ``--follow`` run starts (backoff lines, the run goes on, a
SIGTERM ends it with 0), and lost in the middle of a following ``kafka -> postgres`` run (a second tansu of
this test, SIGKILLed just after a burst of changes, then started again on its port with its in-memory
topics gone): the run keeps running, the target holds exactly the changes its committed position covers
(nothing acknowledged that was not durable, nothing of the empty broker's applied), and a SIGTERM ends it
with 0. ``OLAKE_TEST_KILL_SEED`` moves the moment of the loss.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

import orjson
import psycopg

from tests.support.cli import messages, run_olake, write_json
from tests.support.follow import start_olake, stop, wait_until
from tests.support.kafka_broker import tansu_binary
from tests.support.pgcluster import free_port
from tests.test_kafka_source import CATALOG_ENTRY, create_topic, discover, envelope, marker, produce, row

QUERY = "SELECT id, label, body, price::text FROM public.items ORDER BY id"
CHANGES = 150  # updates sent just before the broker is lost
KILL_SEED = int(os.environ.get("OLAKE_TEST_KILL_SEED", "7"))  # when the broker is lost
LOADED = 4  # messages of items_topic besides its rows: the marker, an update, a delete, its tombstone


def items_topic(bootstrap: str, prefix: str, rows: int) -> str:
    """``{prefix}public.items`` as olake's destination writes it (catalog entry, a load of ``rows`` rows,
    then an update and a delete); returns the topic."""
    topic = f"{prefix}public.items"
    create_topic(bootstrap, topic)
    create_topic(bootstrap, f"{prefix}_catalog")
    produce(bootstrap, f"{prefix}_catalog", [(0, b"public.items", orjson.dumps(CATALOG_ENTRY))])
    load = [marker("L1", 10)] + [envelope("r", row(i, f"r{i}"), i, 10, "L1") for i in range(1, rows + 1)]
    changes = [envelope("u", row(2, "two", price="2.25"), 2, 11), envelope("d", None, 3, 12),
               (orjson.dumps({"id": 3}), None)]
    produce(bootstrap, topic, [(0, k, v) for k, v in load + changes])
    return topic


def expected_items(rows: int) -> list[tuple]:
    """The table :func:`items_topic` describes."""
    table = {i: (i, f"r{i}", "b", "1.50") for i in range(1, rows + 1)}
    table[2] = (2, "two", "b", "2.25")
    del table[3]
    return sorted(table.values())


def start_tansu(port: int, log: Path) -> subprocess.Popen:
    """tansu on ``port`` (in-memory storage), once it accepts connections."""
    import socket

    url = f"tcp://127.0.0.1:{port}"
    with open(log, "ab") as out:
        process = subprocess.Popen([tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
                                    "--storage-engine", "memory://tansu/"], stdout=out, stderr=subprocess.STDOUT)

    def answers() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False

    wait_until(answers, "tansu accepts connections", timeout=30, run=process)
    return process


def test_a_broker_unreachable_at_the_start(kafka_broker, kafka_prefix, tmp_path):
    """Bounded: one line naming the broker, a non-zero exit. ``--follow``: retries with backoff lines,
    still running, SIGTERM ends it with 0."""
    topic = items_topic(kafka_broker.bootstrap, kafka_prefix, 3)
    src = write_json(tmp_path / "src.json", kafka_broker.config(topics=[topic], topic_prefix=kafka_prefix))
    discover(src, tmp_path / "cat.json")
    gone = f"127.0.0.1:{free_port()}"
    dead = write_json(tmp_path / "dead.json", {**kafka_broker.config(topics=[topic], topic_prefix=kafka_prefix),
                                               "bootstrap_servers": gone, "timeout_s": 2})
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "lake")})
    args = ["sync", "--source", dead, "--destination", dst, "--catalog", str(tmp_path / "cat.json")]
    began = time.monotonic()
    result = run_olake(*args, timeout=60)
    took = time.monotonic() - began
    err = result.stderr.decode()
    lines = [line for line in err.splitlines() if "cannot reach the broker" in line]
    assert result.returncode != 0 and len(lines) == 1 and f"kafka at {gone}" in lines[0], err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    print(f"bounded sync, broker unreachable: exit {result.returncode} after {took:.1f}s")

    log = tmp_path / "follow.log"
    run = start_olake([*args, "--follow", "--commit-interval", "0.5"], log, stdout=subprocess.DEVNULL)
    try:
        wait_until(lambda: log.read_text().count("cannot reach the broker") >= 2
                   and "(--follow keeps running)" in log.read_text(), "two failed attempts, with backoff", run=run)
    finally:
        took = stop(run)
    text = log.read_text()
    assert run.returncode == 0, text[-3000:]
    assert "Traceback" not in text and f"kafka at {gone}" in text, text[-3000:]
    print(f"following sync, broker unreachable: stopped by SIGTERM in {took:.1f}s")


def test_a_broker_lost_while_following_into_postgres(pg_target, target_db, tmp_path):
    """A second tansu (this test's), SIGKILLed while ``kafka -> postgres --follow`` runs, then started again
    empty: the run keeps running, the target keeps what it committed and matches its committed position,
    SIGTERM ends it with 0."""
    port, broker_log = free_port(), tmp_path / "tansu.log"
    bootstrap, prefix, rows = f"127.0.0.1:{port}", "lost.", 40
    broker = start_tansu(port, broker_log)
    run = None
    try:
        topic = items_topic(bootstrap, prefix, rows)
        src = write_json(tmp_path / "src.json", {"type": "kafka", "bootstrap_servers": bootstrap, "topics": [topic],
                                                 "topic_prefix": prefix, "timeout_s": 3})
        discover(src, tmp_path / "cat.json")
        dst = write_json(tmp_path / "dst.json", pg_target.destination_config(target_db))
        dsn, log = pg_target.dsn(target_db), tmp_path / "apply.log"
        run = start_olake(["sync", "--source", src, "--destination", dst, "--catalog", str(tmp_path / "cat.json"),
                           "--follow", "--commit-interval", "0.5"], log, stdout=subprocess.DEVNULL)
        wait_until(lambda: _rows(dsn) == expected_items(rows), "the target holds the topic's table", run=run)
        changes = [envelope("u", row(i % rows + 1, f"c{i}"), i % rows + 1, 100 + i) for i in range(CHANGES)]
        produce(bootstrap, topic, [(0, k, v) for k, v in changes[:50]])  # one at a time: offsets 44, 45, ...
        wait_until(lambda: _rows(dsn) == _after_changes(rows, 50), "the target has the first changes", run=run)
        produce(bootstrap, topic, [(0, k, v) for k, v in changes[50:]])
        time.sleep(random.Random(KILL_SEED).uniform(0.0, 0.8))
        broker.send_signal(signal.SIGKILL)  # the run may still be reading them
        broker.wait(timeout=30)
        time.sleep(5)  # longer than timeout_s: whatever the run does about the lost broker, it has done it
        assert run.poll() is None, log.read_text()[-3000:]
        said = [line for line in log.read_text().splitlines() if "the client connects again by itself" in line]
        assert len(said) == 1 and bootstrap in said[0], log.read_text()[-3000:]  # one line per outage
        held = _rows(dsn)
        broker = start_tansu(port, broker_log)  # its topics are gone
        time.sleep(5)
        assert run.poll() is None, log.read_text()[-3000:]
        assert _rows(dsn) == held, "nothing of the empty broker's is applied"
        took = stop(run)
        text = log.read_text()
        assert run.returncode == 0 and "Traceback" not in text, text[-3000:]
        assert _rows(dsn) == held
        [offset] = _committed_offsets(dst, tmp_path / "cat.json").values()
        applied = offset - LOADED - rows
        assert 50 <= applied <= CHANGES and held == _after_changes(rows, applied), \
            f"the target holds exactly the {applied} change(s) its committed position covers"
        _a_new_topic_is_a_lost_position(src, dst, tmp_path / "cat.json", bootstrap, prefix, dsn)
        print(f"broker lost while following: {applied} change(s) committed; stopped by SIGTERM in {took:.1f}s")
    finally:
        if run is not None and run.poll() is None:
            run.kill()
            run.wait()
        broker.kill()
        broker.wait()


def test_a_position_at_the_end_of_a_batch_resumes(kafka_broker, kafka_prefix, tmp_path):
    """A partition whose last batch holds several messages (tansu lists its end as one offset after the
    batch's first): a stored position at its true end is not taken for one past the end."""
    from confluent_kafka import Producer

    topic = f"{kafka_prefix}batched"
    create_topic(kafka_broker.bootstrap, topic)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, "linger.ms": 200, "enable.idempotence": True})
    for batch in range(2):
        for i in range(10):
            producer.produce(topic, key=f"k{batch}.{i}".encode(), value=f"v{batch}.{i}".encode())
        producer.flush()  # one batch
        if batch == 0:
            src = write_json(tmp_path / "src.json", kafka_broker.config(topics=[topic]))
            discover(src, tmp_path / "cat.json")
        dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "lake")})
        result = run_olake("sync", "--source", src, "--destination", dst, "--catalog", str(tmp_path / "cat.json"),
                           timeout=120)
        assert result.returncode == 0, result.stderr.decode()[-3000:]
        assert "10 inserted" in result.stderr.decode(), result.stderr.decode()[-3000:]


def _a_new_topic_is_a_lost_position(src: str, dst: str, catalog: Path, bootstrap: str, prefix: str, dsn: str) -> None:
    """The topic written anew on the empty broker, shorter than the committed position: a bounded ``sync``
    says the position is lost (one line, a non-zero exit); with ``on_position_lost: resync`` it copies the
    new topic."""
    topic = items_topic(bootstrap, prefix, 5)
    args = ["sync", "--source", src, "--destination", dst, "--catalog", str(catalog)]
    result = run_olake(*args, timeout=60)
    err = result.stderr.decode()
    assert result.returncode != 0 and f"topic '{topic}' partition 0" in err and "beyond" in err, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    resync = write_json(Path(src).with_name("resync.json"), {**orjson.loads(Path(src).read_text()),
                                                             "on_position_lost": "resync"})
    result = run_olake("sync", "--source", resync, *args[3:], timeout=120)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    assert _rows(dsn) == expected_items(5)


def _after_changes(rows: int, applied: int) -> list[tuple]:
    """The target after the first ``applied`` of the CHANGES updates."""
    table = {r[0]: r for r in expected_items(rows)}
    for i in range(applied):
        table[i % rows + 1] = (i % rows + 1, f"c{i}", "b", "1.50")
    return sorted(table.values())


def _committed_offsets(dst: str, catalog: Path) -> dict:
    """The topic offsets the destination committed (``olake state recover``)."""
    result = run_olake("state", "recover", "--config", dst, "--catalog", str(catalog))
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    [state] = [m["state"] for m in messages(result.stdout) if m["type"] == "STATE"]
    return state["streams"][0]["stream_state"]["offsets"]


def _rows(dsn: str) -> list[tuple] | None:
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            return conn.execute(QUERY).fetchall()
    except psycopg.Error:
        return None
