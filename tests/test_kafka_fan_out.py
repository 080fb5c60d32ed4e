"""Fan-out through Kafka: one ``sync --follow`` from PostgreSQL into Kafka, and two independent ``sync
--follow`` consumers of its topic (``kafka -> postgres`` and ``kafka -> iceberg``), each with its own
position in its own destination, while a writer changes the source. The Iceberg consumer is SIGKILLed
mid-way and started again (no ``--state``: it resumes from what its table committed); each consumer's
copy equals the source value by value, and the PostgreSQL consumer never notices.
"""

from __future__ import annotations

import signal
import subprocess

import psycopg

from tests.support.cdc import discover_catalog
from tests.support.cli import messages, run_olake, write_json
from tests.support.follow import Incrementer, create_counted_table, iceberg_equals_source, kill_and_restart, \
    start_olake, stop, wait_until
from tests.support.pg_compare import table_texts

FOLLOW = ["--follow", "--commit-interval", "0.5"]


def test_one_capture_into_kafka_two_consumers_each_exact(pg_cluster, pg_db, pg_target, target_db, kafka_broker,
                                                         kafka_prefix, tmp_path):
    source, target = pg_cluster.dsn(pg_db), pg_target.dsn(target_db)
    create_counted_table(source)
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot="slot_kfan", publication="pub_kfan", create_slot_and_publication=True))
    discover_catalog(src, tmp_path / "pg_cat.json", {"t": "cdc"})
    into_kafka = write_json(tmp_path / "into_kafka.json", kafka_broker.config(topic_prefix=kafka_prefix))
    from_kafka = write_json(tmp_path / "from_kafka.json", kafka_broker.config(
        topics=[f"{kafka_prefix}public.t"], topic_prefix=kafka_prefix))
    dst_pg = write_json(tmp_path / "pg.json", pg_target.destination_config(target_db))
    ice = tmp_path / "ice"
    dst_ice = write_json(tmp_path / "ice.json", {"type": "iceberg", "path": str(ice)})
    kafka_cat = tmp_path / "kafka_cat.json"
    to_pg = ["sync", "--source", from_kafka, "--destination", dst_pg, "--catalog", str(kafka_cat), *FOLLOW]
    to_ice = ["sync", "--source", from_kafka, "--destination", dst_ice, "--catalog", str(kafka_cat), *FOLLOW]
    logs = {name: tmp_path / f"{name}.log" for name in ("capture", "pg", "ice")}
    runs = {"capture": start_olake(["sync", "--source", src, "--destination", into_kafka, "--catalog",
                                    str(tmp_path / "pg_cat.json"), *FOLLOW], logs["capture"], stdout=subprocess.DEVNULL)}
    writer = Incrementer(source, seed=33, pause=0.01)
    try:
        wait_until(lambda: run_olake("discover", "--config", from_kafka).returncode == 0,
                   "the capture's first commit into Kafka", run=runs["capture"])
        discover_catalog(from_kafka, kafka_cat, {"t": "cdc"})
        runs["pg"] = start_olake(to_pg, logs["pg"], stdout=subprocess.DEVNULL)
        runs["ice"] = start_olake(to_ice, logs["ice"], stdout=subprocess.DEVNULL)
        writer.start()
        for name in ("pg", "ice"):
            wait_until(lambda n=name: "following the change log" in logs[n].read_text(), f"the {name} consumer follows",
                       run=runs[name])
        pg_run = runs["pg"]
        runs["ice"] = kill_and_restart(runs["ice"], to_ice, logs["ice"], seed=33, low=0.5, high=2.0)
        wait_until(lambda: writer.transactions > 150, "the writer has gone on", run=runs["ice"])
        writer.stop()
        wait_until(lambda: _texts(target) == table_texts(source, "public", "t", ["id", "v", "note"]),
                   "the PostgreSQL consumer equals the source", timeout=120, run=runs["pg"])
        wait_until(lambda: iceberg_equals_source(ice, source), "the Iceberg consumer equals the source", timeout=120,
                   run=runs["ice"])
        for name in ("ice", "pg", "capture"):
            assert stop(runs[name]) < 30 and runs[name].returncode == 0, logs[name].read_text()[-3000:]
    finally:
        writer.stop_event.set()
        for run in runs.values():
            if run.poll() is None:
                run.send_signal(signal.SIGKILL)
                run.wait(timeout=30)
    pg_log = logs["pg"].read_text()
    assert runs["pg"] is pg_run and pg_log.count("following the change log") == 1, "the other consumer went on"
    assert "the run failed" not in pg_log and "Traceback" not in pg_log, pg_log[-3000:]
    assert _texts(target) == table_texts(source, "public", "t", ["id", "v", "note"])
    assert iceberg_equals_source(ice, source)
    positions = [_committed_offsets(dst, kafka_cat) for dst in (dst_pg, dst_ice)]
    assert positions[0] and positions[0] == positions[1], "each consumer's own position is at the topic's end"
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot('slot_kfan')")


def _texts(dsn: str) -> list[tuple] | None:
    try:
        return table_texts(dsn, "public", "t", ["id", "v", "note"])
    except psycopg.Error:
        return None


def _committed_offsets(dst: str, catalog) -> dict:
    """The topic offsets a consumer's destination committed (``olake state recover``)."""
    result = run_olake("state", "recover", "--config", dst, "--catalog", str(catalog))
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    [state] = [m["state"] for m in messages(result.stdout) if m["type"] == "STATE"]
    [stream] = state["streams"]
    return stream["stream_state"]["offsets"]
