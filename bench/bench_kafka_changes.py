"""Kafka change benchmarks: changes into Kafka against the same changes into Parquet, and the end-to-end
latency of ``pg -> kafka -> pg`` with two ``olake sync --follow`` processes.

    .venv/bin/python bench/bench_kafka_changes.py changes --changes 1000000 --rows 100000
    .venv/bin/python bench/bench_kafka_changes.py latency --rate 1000 --seconds 60

Both start a throwaway PostgreSQL (``track_commit_timestamp = on``) and a tansu broker (in memory).

``changes``: the table of ``bench_cdc.py`` (``--rows`` rows) is full-loaded in cdc mode by ``olake sync``
twice, into Parquet and into Kafka, each with its own slot on one publication; then ``--changes`` changes
(``bench_cdc.py``'s: 400 updates, 400 inserts, 200 deletes per transaction of 1,000) are applied once, and
each ``olake sync`` reads them from its slot (a bounded pass), timed with peak memory. Every change is
checked to have landed (Parquet change rows; Kafka envelopes with op c, u or d read by a ``read_committed``
consumer). ``--no-deletes`` leaves the deletes out (the Kafka destination builds a batch's envelopes a
column at a time only when it holds no delete); ``--profile DIR`` runs both passes under cProfile.

``latency``: a second PostgreSQL is the target. ``olake sync --follow`` PostgreSQL -> Kafka and
``olake sync --follow`` Kafka -> PostgreSQL run side by side; a writer inserts ``--rate`` rows a second
into ``ev`` (``bench_follow.py``'s writer: 100 transactions a second) for ``--seconds``. Each row's
latency runs from its source commit (``pg_xact_commit_timestamp``) to the commit of the target
transaction that made it visible (the same, on the target; both clusters share this machine's clock).
Prints p50, p99 and max, and the largest latency of the rows committed in each second. Nothing here is
a test: it measures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from bench.bench_cdc import CHANGES_SQL  # noqa: E402
from bench.bench_fan_out import parquet_change_rows  # noqa: E402
from bench.bench_follow import _percentile, _pg_visible, _source_commits, _writer  # noqa: E402
from bench.measure import Measurement, measured  # noqa: E402
from tests.support.kafka_broker import KafkaBroker, start_broker  # noqa: E402
from tests.support.pgcluster import PgCluster, create_database, start_cluster  # noqa: E402

OLAKE = [sys.executable, "-m", "olake_cli"]
PUB = "bench_pub"
DELETES = "    DELETE FROM bench WHERE id IN (SELECT next_id + g * 2 FROM generate_series(0, 199) g);\n"


def _cdc_catalog(work: Path, src: str, out: str, env: dict[str, str]) -> None:
    """``out``: the catalog of source config ``src`` with every stream in cdc mode."""
    discovered = subprocess.run(OLAKE + ["discover", "--config", src], cwd=work, env=env, check=True,
                                capture_output=True).stdout
    catalog = json.loads(discovered)["catalog"]
    for stream in catalog["streams"]:
        stream["sync_mode"] = "cdc"
    (work / out).write_text(json.dumps(catalog))


def _kafka_changes(bootstrap: str, topic: str) -> int:
    """Envelopes of changes (op c, u or d) in ``topic`` as a ``read_committed`` consumer sees them."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-count", "log_level": 0,
                         "isolation.level": "read_committed", "enable.partition.eof": True,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        pending, count = set(partitions), 0
        while pending:
            for message in consumer.consume(10_000, timeout=5):
                if message.error() is not None:
                    assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                    pending.discard(message.partition())
                elif message.value() is not None and json.loads(message.value())["op"] in ("c", "u", "d"):
                    count += 1
        return count
    finally:
        consumer.close()


def _prepare_changes(cluster: PgCluster, broker: KafkaBroker, work: Path, rows: int,
                     env: dict[str, str], profile: Path | None) -> list[str]:
    """The table, both pipelines' configs and their initial full loads; returns their sync commands."""
    create_database(cluster, "bench")
    with psycopg.connect(cluster.dsn("bench"), autocommit=True) as conn:
        conn.execute(f"""CREATE TABLE bench (id bigint PRIMARY KEY, qty int, price numeric(12,2), note text,
                         updated_at timestamptz);
                         INSERT INTO bench SELECT g, g % 100, g / 7.0, 'row ' || g, now()
                         FROM generate_series(1, {rows}) g; ANALYZE bench;
                         CREATE PUBLICATION {PUB} FOR TABLE bench;""")
    (work / "src.json").write_text(json.dumps(cluster.source_config("bench")))
    _cdc_catalog(work, "src.json", "cat.json", env)
    commands = []
    for name, dst in (("parquet", {"type": "parquet", "path": str(work / "out")}),
                      ("kafka", {"type": "kafka", "bootstrap_servers": broker.bootstrap, "topic_prefix": "bench."})):
        (work / f"src-{name}.json").write_text(json.dumps(cluster.source_config(
            "bench", replication_slot=f"bench_{name}", publication=PUB, create_slot_and_publication=True)))
        (work / f"dst-{name}.json").write_text(json.dumps(dst))
        sync = (f"sync --source src-{name}.json --destination dst-{name}.json --catalog cat.json "
                f"--state st-{name}.json > /dev/null 2>>{name}.log")
        print(f"{name}: initial full load of {rows:,} rows ...", file=sys.stderr)
        subprocess.run(["bash", "-o", "pipefail", "-c", f"{' '.join(OLAKE)} {sync}"], cwd=work, env=env, check=True)
        profiler = f" -m cProfile -o {profile.resolve() / name}.prof" if profile else ""
        command = f"{sys.executable}{profiler} -m olake_cli {sync}"
        commands.append(command)
    return commands


def _line(name: str, changes: int, m: Measurement) -> str:
    return (f"| `olake sync` → {name} | {m.wall_s:.2f} | {changes / m.wall_s:,.0f} | "
            f"{m.tree_peak_mib:,.0f} MiB (largest process {m.max_proc_mib or 0:,.0f} MiB) |")


def run_changes(args: argparse.Namespace) -> None:
    """Part (a): ``--changes`` changes by ``olake sync`` into Parquet and into Kafka; prints the table."""
    cluster = start_cluster()
    work = Path(tempfile.mkdtemp(prefix="olake-bench-kchanges-"))
    broker = start_broker(str(work))
    env = dict(os.environ, PGPASSWORD=cluster.password)
    try:
        to_parquet, to_kafka = _prepare_changes(cluster, broker, work, args.rows, env, args.profile)
        print(f"applying {args.changes:,} changes ...", file=sys.stderr)
        assert DELETES in CHANGES_SQL, "bench_cdc.py's changes changed"
        sql = CHANGES_SQL.replace(DELETES, "") if args.no_deletes else CHANGES_SQL
        with psycopg.connect(cluster.dsn("bench"), autocommit=True) as conn:
            conn.execute(sql % {"changes": args.changes, "rows": args.rows})
            conn.execute("CHECKPOINT")
        expected = -(-args.changes // 1000) * (800 if args.no_deletes else 1000)
        runs = {}
        for name, command in (("Parquet", to_parquet), ("Kafka", to_kafka))[::-1 if args.kafka_first else 1]:
            runs[name] = measured(command, work, env)
            assert runs[name].returncode == 0, (work / f"{name.lower()}.log").read_text()[-3000:]
        got = {"Parquet": parquet_change_rows(work / "out"),
               "Kafka": _kafka_changes(broker.bootstrap, "bench.public.bench")}
        assert got == {"Parquet": expected, "Kafka": expected}, f"expected {expected:,} changes in each, got {got}"
        mix = "400 updates, 400 inserts" + ("" if args.no_deletes else ", 200 deletes") + " per transaction"
        print(f"changes: {expected:,} ({mix}) over {args.rows:,} rows ({os.cpu_count()} cores, tansu in memory, "
              f"load average {os.getloadavg()[0]:.1f})")
        print("| path | wall s | changes/s | peak memory |\n|---|---:|---:|---:|")
        for name in ("Parquet", "Kafka"):
            print(_line(name, expected, runs[name]))
        print(f"Kafka / Parquet (changes/s): {runs['Parquet'].wall_s / runs['Kafka'].wall_s:.2f}")
    finally:
        broker.stop()
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


def _start(args: list[str], log: Path) -> subprocess.Popen:
    """An olake process whose stderr goes to ``log``; returns once it follows its change log."""
    proc = subprocess.Popen(OLAKE + args, stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
    while b"following the change log" not in log.read_bytes():
        if proc.poll() is not None:
            raise SystemExit(log.read_text()[-3000:])
        time.sleep(0.2)
    return proc


def _start_pipelines(source: PgCluster, target: PgCluster, broker: KafkaBroker, work: Path,
                     interval: list[str]) -> list[subprocess.Popen]:
    """The capture (PostgreSQL -> Kafka) and the apply (Kafka -> PostgreSQL), both following."""
    files = {"src": source.source_config("lat", replication_slot="lat_slot", publication="lat_pub",
                                         create_slot_and_publication=True),
             "into": {"type": "kafka", "bootstrap_servers": broker.bootstrap, "topic_prefix": "lat."},
             "from": {"type": "kafka", "bootstrap_servers": broker.bootstrap, "topics": ["lat.public.ev"],
                      "topic_prefix": "lat."},
             "dst": target.destination_config("lat")}
    for key, obj in files.items():
        (work / f"{key}.json").write_text(json.dumps(obj))
    _cdc_catalog(work, "src.json", "pg_cat.json", dict(os.environ))
    follow = ["--follow", *interval]
    procs = [_start(["sync", "--source", str(work / "src.json"), "--destination", str(work / "into.json"),
                     "--catalog", str(work / "pg_cat.json"), *follow], work / "capture.log")]
    deadline = time.monotonic() + 60
    while subprocess.run(OLAKE + ["discover", "--config", str(work / "from.json")], capture_output=True).returncode:
        assert time.monotonic() < deadline, "the capture's first commit never reached Kafka"
        time.sleep(0.5)
    _cdc_catalog(work, str(work / "from.json"), "kafka_cat.json", dict(os.environ))
    procs.append(_start(["sync", "--source", str(work / "from.json"), "--destination", str(work / "dst.json"),
                         "--catalog", str(work / "kafka_cat.json"), *follow], work / "apply.log"))
    return procs


def _latencies(src_dsn: str, dst_dsn: str, first_id: int, timeout: float = 180) -> dict[int, tuple[float, float]]:
    """Each written row's (source commit, target commit) once the target holds every row (or on timeout)."""
    commits = {i: at for i, at in _source_commits(src_dsn).items() if i >= first_id}
    deadline, seen = time.monotonic() + timeout, {}
    while time.monotonic() < deadline:
        try:
            seen = _pg_visible(dst_dsn, "public.ev")
        except psycopg.Error:  # the table is not there yet
            seen = {}
        if all(i in seen for i in commits):
            break
        time.sleep(1.0)
    missing = [i for i in commits if i not in seen]
    assert not missing, f"only {len(commits) - len(missing)} of {len(commits)} rows arrived in {timeout:.0f} s"
    return {i: (at, seen[i]) for i, at in commits.items()}


def _report(times: dict[int, tuple[float, float]], rate: int, interval: list[str]) -> None:
    lags = [seen - at for at, seen in times.values()]
    first = min(at for at, _ in times.values())
    by_second: dict[int, float] = {}
    for at, seen in times.values():
        by_second[int(at - first)] = max(by_second.get(int(at - first), 0.0), seen - at)
    print("the largest latency of the rows committed in each second: "
          + " ".join(f"{lag:.1f}" for _, lag in sorted(by_second.items())), file=sys.stderr)
    span = max(seen for _, seen in times.values()) - first
    label = " ".join(interval) or "default commit intervals"
    print(f"{len(lags):,} rows, load average {os.getloadavg()[0]:.1f}")
    print("| path | rows/s written | p50 s | p99 s | max s | sustained rows/s |\n|---|---:|---:|---:|---:|---:|")
    print(f"| pg → kafka → pg, `--follow` ({label}) | {rate:,} | {_percentile(lags, 0.5):.2f} | "
          f"{_percentile(lags, 0.99):.2f} | {max(lags):.2f} | {len(lags) / span:,.0f} |")


def run_latency(args: argparse.Namespace) -> None:
    """Part (b): end-to-end latency of ``pg -> kafka -> pg`` at ``--rate`` rows a second."""
    source = start_cluster({"track_commit_timestamp": "on"})
    target = start_cluster({"track_commit_timestamp": "on"})
    work = Path(tempfile.mkdtemp(prefix="olake-bench-klatency-"))
    broker = start_broker(str(work))
    interval = ["--commit-interval", str(args.commit_interval)] if args.commit_interval else []
    procs: list[subprocess.Popen] = []
    try:
        create_database(source, "lat")
        create_database(target, "lat")
        src_dsn = source.dsn("lat")
        with psycopg.connect(src_dsn, autocommit=True) as conn:  # one row, so the topic exists after the load
            conn.execute("CREATE TABLE ev (id bigserial PRIMARY KEY, payload text); INSERT INTO ev (payload) "
                         "VALUES ('seed')")
        procs = _start_pipelines(source, target, broker, work, interval)
        _writer(src_dsn, args.rate, args.seconds, threading.Event())
        _report(_latencies(src_dsn, target.dsn("lat"), first_id=2), args.rate, interval)
        for proc in procs[::-1]:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        broker.stop()
        source.stop()
        target.stop()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    """Parse the arguments and run one part."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parts = parser.add_subparsers(dest="part", required=True)
    changes = parts.add_parser("changes", help="changes into Kafka against the same changes into Parquet")
    changes.add_argument("--changes", type=int, default=1_000_000)
    changes.add_argument("--rows", type=int, default=100_000)
    changes.add_argument("--kafka-first", action="store_true", help="time the Kafka pass before the Parquet one")
    changes.add_argument("--no-deletes", action="store_true",
                         help="leave out the 200 deletes of each transaction (800 changes per 1,000 asked)")
    changes.add_argument("--profile", type=Path, default=None, metavar="DIR",
                         help="run both change passes under cProfile, into DIR/parquet.prof and DIR/kafka.prof")
    latency = parts.add_parser("latency", help="pg -> kafka -> pg latency with two sync --follow processes")
    latency.add_argument("--rate", type=int, default=1000, help="rows inserted per second")
    latency.add_argument("--seconds", type=float, default=60.0)
    latency.add_argument("--commit-interval", type=float, default=None,
                         help="both processes' --commit-interval (default: each destination's own)")
    args = parser.parse_args()
    (run_changes if args.part == "changes" else run_latency)(args)


if __name__ == "__main__":
    main()
