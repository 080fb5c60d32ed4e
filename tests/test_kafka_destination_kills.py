"""``olake sync --follow`` into Kafka killed while a writer changes the source, then restarted: a
read_committed consumer ends with the source's table and sees every change once.

The kills: at the destination's crash points (a full-load chunk a task sent, before and after its own
commit; a commit's data acknowledged but the state not sent; the state sent but the transaction not
committed; two of them by default, all with OLAKE_TEST_ALL_PATHS=1), then SIGKILL at a seeded moment. tansu shows the messages of an aborted
transaction to read_committed consumers (tests/support/kafka_broker.py), so the consumer also applies the
envelope's op-id rule: a change whose op id is not above the last one applied is a replay; and a consumer
that applies only the messages the state topic's offsets cover sees the same table with no replay at all.
"""

from __future__ import annotations

import subprocess

import psycopg

from tests.support.cdc import discover_catalog
from tests.support.cli import write_json
from tests.support.follow import Incrementer, create_counted_table, kill_and_restart, start_olake, stop, wait_until
from tests.support.matrix import cases
from tests.support.kafka_broker import covered_offsets, read_topic, replicate
from tests.support.pg_compare import table_texts


def test_kills_while_following_into_kafka_lose_and_repeat_no_change(pg_cluster, pg_db, kafka_broker, kafka_prefix,
                                                                     tmp_path, monkeypatch):
    dsn = pg_cluster.dsn(pg_db)
    create_counted_table(dsn)
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot="kk_slot", publication="kk_pub", create_slot_and_publication=True))
    discover_catalog(src, tmp_path / "cat.json", {"t": "cdc"}, only={"t"})
    dst = write_json(tmp_path / "dst.json", kafka_broker.config(topic_prefix=kafka_prefix))
    args = ["sync", "--source", src, "--destination", dst, "--catalog", str(tmp_path / "cat.json"), "--follow"]
    log, topic = tmp_path / "run.log", f"{kafka_prefix}public.t"
    writer = Incrementer(dsn, seed=5)
    writer.start()
    every = [("kafka-chunk-sent", "0"), ("kafka-chunk-committed", "0"), ("kafka-data-sent", "2"),
             ("kafka-state-sent", "3")]
    for step, after in cases(every, [("kafka-chunk-committed", "0"), ("kafka-data-sent", "2")]):
        monkeypatch.setenv("OLAKE_TEST_CRASH_AT", step)
        monkeypatch.setenv("OLAKE_TEST_CRASH_AFTER", after)
        run = start_olake(args, log, stdout=subprocess.DEVNULL)
        assert run.wait(timeout=180) == -9, log.read_text()[-3000:]  # it killed itself at the step
    monkeypatch.delenv("OLAKE_TEST_CRASH_AT")
    runs = log.read_text().count("following the change log")
    run = start_olake(args, log, stdout=subprocess.DEVNULL)
    wait_until(lambda: log.read_text().count("following the change log") > runs, "the rerun follows", run=run)
    run = kill_and_restart(run, args, log, seed=11)
    writer.stop()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE t SET note = 'last' WHERE id = 1")

    def replica_rows():
        rows = replicate(read_topic(kafka_broker.bootstrap, topic)).rows.values()
        return sorted((str(r["id"]), str(r["v"]), r["note"]) for r in rows)

    wait_until(lambda: replica_rows() == table_texts(dsn, "public", "t", ["id", "v", "note"]),
               "the topic holds the source's table", run=run)
    stop(run)
    replica = replicate(read_topic(kafka_broker.bootstrap, topic))
    op_ids = [op_id for _, op_id in replica.applied]
    assert op_ids and op_ids == sorted(set(op_ids))  # each change once, in order
    loads = log.read_text().count(": full load in ")  # the loads the runs began (not the resumed ones)
    assert [m["reason"] for m in replica.markers] == ["load"] * loads  # one marker per load
    # the messages the state topic's offsets cover: the same table, and no change twice even without the rule
    exact = replicate(read_topic(kafka_broker.bootstrap, topic),
                      covered=covered_offsets(kafka_broker.bootstrap, kafka_prefix, "public.t"))
    assert exact.rows == replica.rows and exact.replays == 0 and exact.applied == replica.applied
