"""Two PostgreSQL databases kept in step both ways through Kafka, each direction two following processes:
``A -> kafka`` and ``kafka -> B``, ``B -> kafka`` and ``kafka -> A`` (four ``olake sync --follow``).

Loop prevention is the direct two-way mode's: each PostgreSQL destination writes under a replication
origin (``node_a`` on B, ``node_b`` on A) and each PostgreSQL source skips the other's origin, so a
change applied from Kafka is never captured again; conflicts are decided by the source commit times the
envelopes carry. B receives A's copy through Kafka, then writers change both nodes (their own keys and
shared ones, with two deliberate conflicts); both nodes end equal, the later commit winning each
conflict, and a change made once travels once: each topic holds only its own node's changes. Each apply
process announces its commits on a processing topic.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time

import psycopg

from tests.support.cdc import discover_catalog
from tests.support.cli import run_olake, write_json
from tests.support.follow import start_olake, wait_until
from tests.support.kafka_broker import envelope_of, read_topic
from tests.support.pg_compare import assert_same_rows, table_texts
from tests.test_pg_two_way import Writer

COLUMNS = ["id", "v", "note"]


def test_two_databases_in_step_both_ways_through_kafka(pg_cluster, pg_db, pg_target, target_db, kafka_broker,
                                                       kafka_prefix, tmp_path):
    a, b = pg_cluster.dsn(pg_db), pg_target.dsn(target_db)
    with psycopg.connect(a, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL, note text)")
        conn.execute("INSERT INTO t SELECT g, 0, 'seed' FROM generate_series(1, 600) g")
    topics = {"a": f"{kafka_prefix}a.", "b": f"{kafka_prefix}b."}
    src_a = write_json(tmp_path / "src_a.json", pg_cluster.source_config(
        pg_db, replication_slot="kafka_a", publication="pub_a", create_slot_and_publication=True,
        skip_origins=["node_b"]))
    src_b = write_json(tmp_path / "src_b.json", pg_target.source_config(
        target_db, replication_slot="kafka_b", publication="pub_b", create_slot_and_publication=True,
        skip_origins=["node_a"]))
    into = {n: write_json(tmp_path / f"into_{n}.json", kafka_broker.config(topic_prefix=p)) for n, p in topics.items()}
    out_of = {n: write_json(tmp_path / f"from_{n}.json", kafka_broker.config(
        topic_prefix=p, topics=[f"{p}public.t"], processing_topic=f"{p}applied")) for n, p in topics.items()}
    dst_b = write_json(tmp_path / "dst_b.json", pg_target.destination_config(target_db, origin="node_a",
                                                                             local_origin="node_b"))
    dst_a = write_json(tmp_path / "dst_a.json", pg_cluster.destination_config(pg_db, origin="node_b",
                                                                              local_origin="node_a"))
    follow = ["--follow", "--commit-interval", "0.2"]
    runs: list[subprocess.Popen] = []

    def start(name: str, source: str, destination: str, catalog) -> None:
        runs.append(start_olake(["sync", "--source", source, "--destination", destination, "--catalog", str(catalog),
                                 *follow], tmp_path / f"{name}.log", stdout=subprocess.DEVNULL))

    try:
        discover_catalog(src_a, tmp_path / "a_cat.json", {"t": "cdc"})
        start("a_into_kafka", src_a, into["a"], tmp_path / "a_cat.json")
        _discover_envelope_stream(out_of["a"], tmp_path / "from_a_cat.json", runs[-1])
        start("kafka_into_b", out_of["a"], dst_b, tmp_path / "from_a_cat.json")
        wait_until(lambda: _rows(b) == _rows(a), "B holds A's copy", run=runs[-1])

        catalog = discover_catalog(src_b, tmp_path / "b_cat.json", {"t": "cdc"})
        catalog["streams"][0]["skip_initial_load"] = True  # B holds the copy already: its changes from now on
        (tmp_path / "b_cat.json").write_text(json.dumps(catalog))
        start("b_into_kafka", src_b, into["b"], tmp_path / "b_cat.json")
        wait_until(lambda: "following the change log" in (tmp_path / "b_into_kafka.log").read_text(),
                   "B's capture follows", run=runs[-1])
        with psycopg.connect(b, autocommit=True) as conn:
            conn.execute("UPDATE t SET note = 'first from B' WHERE id = 5")  # B's topic gets its first change
        _discover_envelope_stream(out_of["b"], tmp_path / "from_b_cat.json", runs[-1], skip_initial_load=True)
        start("kafka_into_a", out_of["b"], dst_a, tmp_path / "from_b_cat.json")

        with psycopg.connect(a, autocommit=True) as conn_a, psycopg.connect(b, autocommit=True) as conn_b:
            conn_a.execute("UPDATE t SET note = 'A, earlier' WHERE id = 1")
            conn_b.execute("UPDATE t SET note = 'B, later' WHERE id = 1")  # the later commit wins on both nodes
            conn_b.execute("UPDATE t SET note = 'B, earlier' WHERE id = 2")
            conn_a.execute("UPDATE t SET note = 'A, later' WHERE id = 2")
        writers = [Writer(a, range(10, 200), range(550, 600), range(10_000, 20_000), 1),
                   Writer(b, range(300, 500), range(550, 600), range(20_000, 30_000), 2)]
        for writer in writers:
            writer.start()
        time.sleep(2)  # both nodes change while all four runs follow
        for writer in writers:
            writer.stop()
        wait_until(lambda: _rows(a) == _rows(b), "both nodes are equal", timeout=120,
                   run=next((r for r in runs if r.poll() is not None), None))
        assert_same_rows(a, ("public", "t"), b, ("public", "t"), COLUMNS)
        notes = {int(k): n for k, _, n in table_texts(a, "public", "t", COLUMNS) if k in ("1", "2", "5")}
        assert notes == {1: "B, later", 2: "A, later", 5: "first from B"}

        counts = _changes_in(kafka_broker.bootstrap, topics)
        for step, (node, dsn) in enumerate([("a", a), ("b", b), ("a", a)]):
            other = b if node == "a" else a
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("UPDATE t SET note = %s WHERE id = 600", (f"marker {step} from {node}",))
            wanted = f"marker {step} from {node}"
            wait_until(lambda dsn=other, wanted=wanted: _note(dsn) == wanted, f"{wanted} reaches the other node")
        grown = {n: c - counts[n] for n, c in _changes_in(kafka_broker.bootstrap, topics).items()}
        assert grown == {"a": 2, "b": 1}, "each change travels once: nothing applied from Kafka comes back"
    finally:
        for run in runs:
            if run.poll() is None:
                run.send_signal(signal.SIGTERM)
        codes = [run.wait(timeout=60) for run in runs]
    assert codes == [0, 0, 0, 0], [(tmp_path / f"{n}.log").read_text()[-2000:] for n in
                                   ("a_into_kafka", "kafka_into_b", "b_into_kafka", "kafka_into_a")]
    for prefix in topics.values():  # each apply process announced its commits on its processing topic
        applied = [json.loads(m.value) for m in read_topic(kafka_broker.bootstrap, f"{prefix}applied")]
        assert applied and {a["topic"] for a in applied} == {f"{prefix}public.t"}
        assert [a["op_id"] for a in applied] == sorted({a["op_id"] for a in applied}), "in commit order, once each"
        assert [a["offsets"]["0"] for a in applied] == sorted(a["offsets"]["0"] for a in applied)
    for dsn, slot in ((a, "kafka_a"), (b, "kafka_b")):
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))


def _discover_envelope_stream(config: str, path, writer: subprocess.Popen, skip_initial_load: bool = False) -> None:
    """``discover`` into ``path`` once the topic and its catalog entry exist (the capture's first commit);
    ``skip_initial_load`` when the destination holds the stream already (else the stream's empty load
    replaces its contents)."""

    def described() -> bool:
        found = run_olake("discover", "--config", config)
        if found.returncode != 0:
            return False
        catalog = json.loads(found.stdout)["catalog"]
        if catalog["streams"][0]["x-olake"].get("kafka_kind") != "envelope":
            return False
        catalog["streams"][0]["skip_initial_load"] = skip_initial_load
        path.write_text(json.dumps(catalog))
        return True

    wait_until(described, "the capture's first commit into Kafka", run=writer)


def _rows(dsn: str) -> list[tuple] | None:
    try:
        return table_texts(dsn, "public", "t", COLUMNS)
    except psycopg.Error:
        return None


def _note(dsn: str) -> str | None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT note FROM t WHERE id = 600").fetchone()[0]


def _changes_in(bootstrap: str, topics: dict[str, str]) -> dict[str, int]:
    """Per node, how many changes (c, u, d envelopes) its topic holds."""
    return {node: sum(1 for m in read_topic(bootstrap, f"{prefix}public.t")
                      if (e := envelope_of(m.value)) is not None and e["op"] in ("c", "u", "d"))
            for node, prefix in topics.items()}
