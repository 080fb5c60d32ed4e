"""MongoDB full-load benchmark: a raw pymongo cursor scan versus ``olake read | olake write`` and ``olake sync``.

    .venv/bin/python bench/bench_mongo.py --docs 1000000

Starts a SecantusDB server (MongoDB wire protocol over WiredTiger, a one-node replica set) in its own
process, so it does not share the benchmark's GIL, or uses the server of ``--uri`` (e.g. a real
mongod replica set). Generates a collection of ``--docs`` documents of a realistic shape (ObjectId
``_id``, strings, int32, int64, double, Decimal128, dates, a nested address document, an array of
strings, a boolean), then times, on the same server in the same run:
  1. a raw single-cursor scan with pymongo (``RawBSONDocument``, ``--batch-size`` documents per
     batch), every document read and discarded;
  2. ``olake read | olake write`` to Parquet (after ``olake discover``);
  3. ``olake sync`` to Parquet (the in-process path whose Spark tasks write the Parquet files).
Checks that every olake run landed ``--docs`` rows, and prints wall time, documents/s and the ratio
of each olake rate to the raw scan rate (the issue's target: ``sync`` at least 0.7). Nothing here is
a test: it measures.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import timed  # noqa: E402

DATABASE, COLLECTION = "bench", "orders"
CITIES = ["Lisbon", "Porto", "Madrid", "Paris", "Berlin", "Rome", "Vienna", "Prague", "Oslo", "Dublin"]
TAGS = ["new", "vip", "promo", "repeat", "gift", "wholesale", "mobile", "web"]
_START = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def document(i: int) -> dict:
    """Document ``i`` of the collection: deterministic values, about 400 bytes of BSON."""
    from bson import Decimal128, Int64, ObjectId

    created = _START + dt.timedelta(seconds=i * 7)
    return {
        "_id": ObjectId(),
        "order_no": f"ORD-{i:09d}",
        "customer": f"customer-{i % 50_000}",
        "email": f"user{i % 50_000}@example.com",
        "qty": i % 1000,  # int32
        "seq": Int64(i * 1_000_003),  # int64
        "price": (i % 100_000) / 7.0,  # double
        "total": Decimal128(Decimal(i % 10_000_000) / 100),  # decimal128, 2 places
        "created_at": created,
        "shipped_at": created + dt.timedelta(hours=i % 72),
        "address": {"street": f"{i % 997} Main Street", "city": CITIES[i % len(CITIES)],
                    "zip": f"{10000 + i % 89_999}"},
        "tags": [TAGS[(i + k) % len(TAGS)] for k in range(i % 4)],  # 0 to 3 strings
        "active": i % 3 != 0,
    }


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_secantus(directory: Path) -> tuple[subprocess.Popen, str]:
    """SecantusDB in a child process (``python -m secantus``) on a free port; waits until it answers."""
    from pymongo import MongoClient

    port = free_port()
    config = directory / "secantusd.toml"
    config.write_text("")  # an explicit (empty) config: no secantusd.toml of the user's is picked up
    log = open(directory / "secantus.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "secantus", "--config", str(config), "--host", "127.0.0.1",
         "--port", str(port), "--storage-path", str(directory / "data"), "--log-level", "WARNING"],
        stdout=log, stderr=subprocess.STDOUT, cwd=directory)
    uri = f"mongodb://127.0.0.1:{port}/"
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"secantus exited with {proc.returncode}; see {directory / 'secantus.log'}")
        try:
            with MongoClient(uri, serverSelectionTimeoutMS=500) as client:
                client.admin.command("ping")
            return proc, uri
        except Exception as exc:
            if time.monotonic() > deadline:
                proc.terminate()
                raise SystemExit(f"secantus did not answer on {uri} within 60 s") from exc
            time.sleep(0.2)


def stop_process(proc: subprocess.Popen) -> None:
    """SIGTERM (SecantusDB stops cleanly on it), then SIGKILL if it lingers."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def generate(uri: str, docs: int, batch: int) -> float:
    """Drop and fill the collection with ``docs`` documents (insert_many of ``batch``); seconds taken."""
    from pymongo import MongoClient

    started = time.perf_counter()
    with MongoClient(uri) as client:
        coll = client[DATABASE][COLLECTION]
        coll.drop()
        done, last_report = 0, started
        while done < docs:
            n = min(batch, docs - done)
            coll.insert_many([document(i) for i in range(done, done + n)], ordered=False)
            done += n
            now = time.perf_counter()
            if now - last_report >= 5 or done == docs:
                print(f"  inserted {done:,} / {docs:,} ({done / (now - started):,.0f} docs/s)", file=sys.stderr)
                last_report = now
        count = coll.estimated_document_count()
    if count != docs:
        raise SystemExit(f"{DATABASE}.{COLLECTION} has {count:,} documents after generation, expected {docs:,}")
    return time.perf_counter() - started


def raw_scan(uri: str, batch_size: int) -> tuple[float, int]:
    """Seconds and documents of one cursor over the whole collection, each document read and dropped."""
    from bson.raw_bson import RawBSONDocument
    from pymongo import MongoClient

    with MongoClient(uri, document_class=RawBSONDocument) as client:
        coll = client[DATABASE][COLLECTION]
        coll.find_one()  # connection and server selection outside the timing
        started = time.perf_counter()
        count = 0
        for _ in coll.find({}, batch_size=batch_size):
            count += 1
        return time.perf_counter() - started, count


def planning_seconds(uri: str, catalog: dict, chunk_documents: int) -> tuple[float, str]:
    """Seconds olake's read session takes to plan the full load of the collection (in process, the
    code ``sync`` and ``read`` run), and the plan's summary."""
    from olake_cli.core.catalog import CatalogStream
    from olake_cli.sources.mongodb.source import MongoSource

    source = MongoSource({"type": "mongodb", "uri": uri, "database": DATABASE, "chunk_documents": chunk_documents})
    stream = CatalogStream.from_dict(next(s for s in catalog["streams"] if s["name"] == COLLECTION))
    notes: list[str] = []
    with source.open_session([stream], log=notes.append) as session:
        started = time.perf_counter()
        plan = session.plan_full_load(stream)
        seconds = time.perf_counter() - started
    summary = next((n.split("chunks by type: ", 1)[1] for n in notes if "chunks by type" in n), "?")
    return seconds, f"{len(plan.bounds)} chunk(s): {summary}"


def landed_rows(folder: Path) -> int:
    """Rows of the Parquet dataset of the collection under a destination path."""
    import pyarrow.dataset as ds

    return ds.dataset(str(folder / DATABASE / COLLECTION), format="parquet").count_rows()


def main() -> None:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--uri", help="use this server (e.g. a real mongod replica set) instead of starting "
                                      "SecantusDB; the collection bench.orders is dropped and refilled")
    parser.add_argument("--chunk-documents", type=int, default=250_000, help="olake's chunk_documents")
    parser.add_argument("--batch-documents", type=int, default=10_000, help="olake's batch_documents")
    parser.add_argument("--batch-size", type=int, default=10_000, help="cursor batch size of the raw scan")
    parser.add_argument("--insert-batch", type=int, default=5_000, help="documents per insert_many")
    parser.add_argument("--spark-master", default="local[*]")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, Parquet)")
    args = parser.parse_args()
    command = shlex.join([os.path.relpath(sys.executable, Path.cwd()), *sys.argv])

    work = Path(tempfile.mkdtemp(prefix="olake-bench-mongo-"))
    server = None
    try:
        if args.uri:
            uri, server_name = args.uri, "--uri server"
        else:
            server, uri = start_secantus(work)
            server_name = "SecantusDB (own process)"
        print(f"generating {args.docs:,} documents in {DATABASE}.{COLLECTION} ...", file=sys.stderr)
        generate_s = generate(uri, args.docs, args.insert_batch)

        src = {"type": "mongodb", "uri": uri, "database": DATABASE, "collections": [COLLECTION],
               "chunk_documents": args.chunk_documents, "batch_documents": args.batch_documents}
        (work / "src.json").write_text(json.dumps(src))
        (work / "dst.json").write_text(json.dumps({"type": "parquet", "path": str(work / "out")}))
        (work / "dst-sync.json").write_text(json.dumps({"type": "parquet", "path": str(work / "out-sync")}))
        env = dict(os.environ, OLAKE_SPARK_MASTER=args.spark_master)
        olake = f"{shlex.quote(sys.executable)} -m olake_cli"
        subprocess.run(f"{olake} discover --config src.json > cat.json", shell=True, cwd=work, env=env, check=True)

        print("raw scan ...", file=sys.stderr)
        raw_s, scanned = raw_scan(uri, args.batch_size)
        if scanned != args.docs:
            raise SystemExit(f"the raw scan read {scanned:,} documents, expected {args.docs:,}")
        print("olake read | olake write ...", file=sys.stderr)
        pipe_s = timed(f"{olake} read --config src.json --catalog cat.json --state st.json 2>read.log"
                       f" | {olake} write --config dst.json --state st.json > /dev/null 2>write.log", work, env)
        print("olake sync ...", file=sys.stderr)
        sync_s = timed(f"{olake} sync --source src.json --destination dst-sync.json --catalog cat.json"
                       f" --state st-sync.json > /dev/null 2>sync.log", work, env)
        for folder in ("out", "out-sync"):
            landed = landed_rows(work / folder)
            assert landed == args.docs, f"{landed:,} rows landed in {folder}, expected {args.docs:,}"

        raw_rate = args.docs / raw_s
        print(f"command: {command}")
        print(f"documents: {args.docs:,} in {DATABASE}.{COLLECTION} on {server_name}; generated in "
              f"{generate_s:.1f} s; chunk_documents {args.chunk_documents:,}, batch_documents "
              f"{args.batch_documents:,}, raw batch_size {args.batch_size:,}; spark {args.spark_master}; "
              f"{os.cpu_count()} cores")
        print(f"{'path':<40} {'wall s':>8} {'docs/s':>12} {'rate / raw':>11}")
        for name, seconds in (("raw pymongo scan (RawBSONDocument)", raw_s),
                              ("olake read | olake write parquet", pipe_s),
                              ("olake sync (tasks write parquet)", sync_s)):
            rate = args.docs / seconds
            print(f"{name:<40} {seconds:8.2f} {rate:12,.0f} {rate / raw_rate:11.2f}")
        print(f"target: olake sync rate / raw rate >= 0.70 -> {'met' if raw_s / sync_s >= 0.7 else 'not met'}")
        for log in ("read.log", "sync.log"):  # olake's own account: chunk plan and time inside the read
            lines = [line.removeprefix("olake: ") for line in (work / log).read_text().splitlines()
                     if line.startswith("olake: ") and ("chunk(s)" in line or "chunks by type" in line)]
            if lines:
                print(f"({log}: {'; '.join(lines)})")
    finally:
        if server is not None:
            stop_process(server)
        if args.keep:
            print(f"work directory kept: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
