"""Kafka destination benchmark: a full load of N rows from PostgreSQL into Kafka by ``olake sync``, against
a raw confluent-kafka producer sending the same messages (the limit), on the same broker.

    .venv/bin/python bench/bench_kafka.py --rows 1000000

Starts a throwaway PostgreSQL and a tansu broker (in memory), generates the full-load table of
``bench_full_load.py``, runs ``olake sync`` into Kafka (every row checked to have landed), then reads
the messages olake wrote and sends them again with a bare idempotent, transactional producer (one
transaction per 250,000 messages, as olake commits a chunk), and prints wall time, rows/s and peak
memory of both. Nothing here is a test: it measures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_full_load import CREATE  # noqa: E402
from bench.measure import measured  # noqa: E402
from tests.support.kafka_broker import start_broker  # noqa: E402
from tests.support.pgcluster import create_database, start_cluster  # noqa: E402

RAW = r'''
import sys, time, confluent_kafka as ck
bootstrap, source, target, batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "raw", "enable.partition.eof": True,
                 "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
c.assign([ck.TopicPartition(source, 0, 0)])
messages = []
while True:
    m = c.poll(5)
    if m is None or m.error() is not None:
        break
    messages.append((m.key(), m.value()))
c.close()
print(f"{len(messages)} messages read", file=sys.stderr)
p = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": "raw-bench", "enable.idempotence": True,
                 "acks": "all", "linger.ms": 20, "batch.size": 1000000, "queue.buffering.max.kbytes": 262144})
p.init_transactions(30)
started = time.perf_counter()
for first in range(0, len(messages), batch):
    p.begin_transaction()
    for key, value in messages[first:first + batch]:
        while True:
            try:
                p.produce(target, value, key)
                break
            except BufferError:
                p.poll(0.05)
    p.flush(60)
    p.commit_transaction(60)
print(f"produce {time.perf_counter() - started:.2f}", file=sys.stderr)
'''


def main() -> None:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--chunk-rows", type=int, default=250_000)
    args = parser.parse_args()
    import psycopg

    cluster = start_cluster()
    work = Path(tempfile.mkdtemp(prefix="olake-bench-kafka-"))
    broker = start_broker(str(work))
    try:
        create_database(cluster, "bench")
        with psycopg.connect(cluster.dsn("bench"), autocommit=True) as conn:
            print(f"generating {args.rows:,} rows ...", file=sys.stderr)
            conn.execute(CREATE.replace("%(rows)s", str(args.rows)))
        env = dict(os.environ)
        (work / "src.json").write_text(json.dumps(cluster.source_config("bench", chunk_rows=args.chunk_rows)))
        (work / "dst.json").write_text(json.dumps({"type": "kafka", "bootstrap_servers": broker.bootstrap,
                                                   "topic_prefix": "bench."}))
        (work / "raw.py").write_text(RAW)
        olake = f"{sys.executable} -m olake_cli"
        subprocess.run(f"{olake} discover --config src.json > cat.json", shell=True, cwd=work, env=env, check=True)
        sync = measured(f"{olake} sync --source src.json --destination dst.json --catalog cat.json"
                        f" > /dev/null 2>sync.log", work, env)
        assert sync.returncode == 0, (work / "sync.log").read_text()[-3000:]
        raw = measured(f"{sys.executable} raw.py {broker.bootstrap} bench.public.bench raw.bench {args.chunk_rows}"
                       f" 2>raw.log", work, env)
        assert raw.returncode == 0, (work / "raw.log").read_text()[-3000:]
        log = (work / "raw.log").read_text()
        read_count = int(log.split(" messages read")[0].split()[-1])
        assert read_count == args.rows + 1, f"{read_count} messages in olake's topic, expected {args.rows} + a marker"
        produce_s = float(log.split("produce ")[-1].split()[0])
        print(f"rows: {args.rows:,}  (chunk_rows {args.chunk_rows:,}, {os.cpu_count()} cores, tansu in memory)")
        print(f"olake sync -> kafka          : {sync.wall_s:7.2f} s  {args.rows / sync.wall_s:10,.0f} rows/s  "
              f"peak {sync.tree_peak_mib:,.0f} MiB (largest process {sync.max_proc_mib or 0:,.0f} MiB)")
        print(f"raw producer, same messages  : {produce_s:7.2f} s  {args.rows / produce_s:10,.0f} rows/s  "
              f"peak {raw.max_proc_mib or 0:,.0f} MiB (holding every message in memory)")
        print(f"ratio olake / raw (rows/s)   : {produce_s / sync.wall_s:7.2f}")
    finally:
        broker.stop()
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
