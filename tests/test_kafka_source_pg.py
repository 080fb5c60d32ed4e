"""PostgreSQL -> Kafka -> PostgreSQL, value by value: ``olake sync`` from PostgreSQL into the Kafka destination,
then ``olake sync`` from the Kafka source into a second PostgreSQL, over every type of the PostgreSQL
destination's suite (the calendar edges, arrays of every shape, a 1 MB TOASTed value), then every change
kind (updates, one leaving the TOASTed value unsent, key updates, deletes, a TRUNCATE) carried the same
way; each target table equals its source table. Then a following ``kafka -> postgres`` run is SIGKILLed
while changes flow, and its restart converges on the source.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time

import psycopg

from tests.support.cdc import discover_catalog
from tests.support.cli import run_olake, write_json
from tests.support.follow import kill_and_restart, start_olake, wait_until
from tests.test_pg_destination import (
    TABLES, assert_copied, catalog_for, cdc_source, change_source, make_source, without_nan_decimal,
)
from tests.support.pg_compare import assert_same_rows, columns_of, table_texts
from tests.support.writer_thread import WriterThread


def synced(src: str, dst: str, catalog, state) -> None:
    """One ``olake sync`` run that succeeds."""
    result = run_olake("sync", "--source", src, "--destination", dst, "--catalog", str(catalog), "--state", str(state))
    assert result.returncode == 0, result.stderr.decode()[-3000:]


def test_postgres_through_kafka_into_postgres_is_exact(pg_cluster, pg_db, pg_target, target_db, kafka_broker,
                                                       kafka_prefix, tmp_path):
    source = pg_cluster.dsn(pg_db)
    make_source(source)
    without_nan_decimal(source)
    src = write_json(tmp_path / "src.json", cdc_source(pg_cluster, pg_db, "slot_kafka"))
    into_kafka = write_json(tmp_path / "kafka_dst.json", kafka_broker.config(  # the 1 MB value and its envelope
        topic_prefix=kafka_prefix, producer={"message.max.bytes": 8_000_000}))
    pg_catalog = tmp_path / "pg_cat.json"
    catalog_for(src, pg_catalog)
    from_kafka = write_json(tmp_path / "kafka_src.json", kafka_broker.config(
        topic_pattern=re.escape(kafka_prefix) + r"(shop|public)\..*", topic_prefix=kafka_prefix))
    dst = write_json(tmp_path / "dst.json", pg_target.destination_config(target_db))
    kafka_catalog = tmp_path / "kafka_cat.json"
    target = pg_target.dsn(target_db)

    synced(src, into_kafka, pg_catalog, tmp_path / "pg_state.json")
    catalog = discover_catalog(from_kafka, kafka_catalog, {})
    assert sorted((s["namespace"], s["name"]) for s in catalog["streams"]) == sorted(TABLES)
    for entry in catalog["streams"]:
        entry["sync_mode"] = "cdc"
    kafka_catalog.write_text(json.dumps(catalog))
    synced(from_kafka, dst, kafka_catalog, tmp_path / "kafka_state.json")
    assert_copied(source, target)
    for schema, table in TABLES:
        assert columns_of(target, schema, table) == columns_of(source, schema, table), "columns in their order"

    change_source(source)
    synced(src, into_kafka, pg_catalog, tmp_path / "pg_state.json")
    synced(from_kafka, dst, kafka_catalog, tmp_path / "kafka_state.json")
    assert_copied(source, target)
    with psycopg.connect(target, autocommit=True) as conn:
        bodies = conn.execute("SELECT id, length(body) FROM docs ORDER BY id").fetchall()
    assert bodies == [(1, 1_000_000), (2, 1_000_000), (4, 5), (7, 4096 * 32), (30, 1_000_000)], \
        "unsent TOAST values are kept"
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot('slot_kafka')")


class AcctWriter(WriterThread):
    """Updates, deletes and key moves on ``acct`` (one transaction each) until stopped."""

    def __init__(self, dsn: str) -> None:
        super().__init__(seed=40)
        self.dsn = dsn

    def write(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop_event.is_set() and self.transactions < 300:
                step, row = self.transactions, self.rng.randrange(1, 400)
                with conn.transaction():
                    conn.execute("UPDATE acct SET v = v + 1, note = %s WHERE id = %s", (f"s{step}", row))
                    if step % 3 == 0:
                        conn.execute("DELETE FROM acct WHERE id = %s", (self.rng.randrange(1, 400),))
                    if step % 5 == 0:
                        conn.execute("UPDATE acct SET id = id + 1000 WHERE id = %s", (row,))
                self.transactions += 1
                time.sleep(0.01)


def test_a_following_run_from_kafka_killed_mid_stream_converges(pg_cluster, pg_db, pg_target, target_db,
                                                                  kafka_broker, kafka_prefix, tmp_path):
    """``kafka -> postgres --follow`` SIGKILLed while ``postgres -> kafka --follow`` carries changes; the
    restarted run (no ``--state``: it resumes from what the target committed) converges on the source."""
    source = pg_cluster.dsn(pg_db)
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("CREATE TABLE acct (id int PRIMARY KEY, v int, note text)")
        conn.execute("INSERT INTO acct SELECT g, g, 'n' || g FROM generate_series(1, 400) g")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot="slot_kf", publication="pub_kf", create_slot_and_publication=True))
    into_kafka = write_json(tmp_path / "kafka_dst.json", kafka_broker.config(topic_prefix=kafka_prefix))
    pg_catalog = tmp_path / "pg_cat.json"
    discover_catalog(src, pg_catalog, {"acct": "cdc"})
    from_kafka = write_json(tmp_path / "kafka_src.json", kafka_broker.config(
        topics=[f"{kafka_prefix}public.acct"], topic_prefix=kafka_prefix))
    dst = write_json(tmp_path / "dst.json", pg_target.destination_config(target_db))
    target, log = pg_target.dsn(target_db), tmp_path / "apply.log"
    follow = ["--follow", "--commit-interval", "0.2"]
    capture = start_olake(["sync", "--source", src, "--destination", into_kafka, "--catalog", str(pg_catalog),
                           *follow], tmp_path / "capture.log", stdout=subprocess.DEVNULL)
    apply_args = ["sync", "--source", from_kafka, "--destination", dst, "--catalog", str(tmp_path / "kafka_cat.json"),
                  *follow]
    runs, writer = [capture], AcctWriter(source)
    try:
        wait_until(lambda: _topic_exists(from_kafka), "the capture's first commit into Kafka", run=capture)
        discover_catalog(from_kafka, tmp_path / "kafka_cat.json", {"acct": "cdc"})
        runs.append(start_olake(apply_args, log, stdout=subprocess.DEVNULL))
        writer.start()
        wait_until(lambda: "following the change log" in log.read_text(), "the apply run follows", run=runs[-1])
        runs.append(kill_and_restart(runs[-1], apply_args, log, seed=40, low=0.5, high=2.0))
        writer.join(timeout=120)
        writer.stop()
        assert writer.transactions == 300
        wait_until(lambda: _texts(target) == table_texts(source, "public", "acct", ["id", "v", "note"]),
                   "the target equals the source after the restart", timeout=120, run=runs[-1])
        assert_same_rows(source, ("public", "acct"), target, ("public", "acct"), ["id", "v", "note"])
    finally:
        writer.stop_event.set()
        for proc in runs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=60)
    assert runs[-1].returncode == 0, log.read_text()[-3000:]
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot('slot_kf')")


def _topic_exists(config: str) -> bool:
    return run_olake("discover", "--config", config).returncode == 0


def _texts(dsn: str) -> list[tuple] | None:
    try:
        return table_texts(dsn, "public", "acct", ["id", "v", "note"])
    except psycopg.Error:
        return None
