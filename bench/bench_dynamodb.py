"""DynamoDB full-load benchmark: a raw boto3 parallel scan versus ``olake sync`` to Parquet, same endpoint.

    .venv/bin/python bench/bench_dynamodb.py --items 200000 --segments 4

Starts moto's server (``moto_server``, DynamoDB over HTTP) in its own process, or uses ``--endpoint``
(DynamoDB Local, LocalStack, ...; the table is deleted and created again). moto 5.2, which the tests
need, takes tens of milliseconds per scanned item; the README's figures come from moto 5.1.22's server
(``--endpoint``; see the README's Performance section for the commands). Fills a table with
``--items`` orders of a realistic shape (string and number keys, decimals, a nested address map, a list
of order-line maps, a string set, a boolean, an attribute present on some items only), then times, in
the same run:
  1. a raw parallel scan with boto3: ``--segments`` threads, one per ``Segment``/``TotalSegments``,
     every page read and dropped;
  2. ``olake sync`` to Parquet (a ``full_refresh`` catalog; INIT_SYNC in ``--segments`` chunks, each a
     Spark task writing its own Parquet file).
Checks that olake landed every item, and prints wall time, items/s and the ratio of olake's rate to
the raw scan's (the issue's target: at least 0.7). Nothing here is a test: it measures.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import timed  # noqa: E402

TABLE, NAMESPACE, REGION = "bench_orders", "dynamodb", "us-east-1"
CREDENTIALS = {"aws_access_key_id": "bench", "aws_secret_access_key": "bench-secret"}
CITIES = ["Lisbon", "Porto", "Madrid", "Paris", "Berlin", "Rome", "Vienna", "Prague", "Oslo", "Dublin"]
STATUSES = ["new", "paid", "shipped", "delivered", "returned"]
TAGS = ["vip", "promo", "repeat", "gift", "wholesale", "mobile", "web"]


def item(i: int) -> dict:
    """Order ``i``: deterministic values, about 450 bytes."""
    lines = [{"M": {"sku": {"S": f"SKU-{(i * 7 + k) % 5000:05d}"}, "qty": {"N": str(1 + (i + k) % 5)},
                    "price": {"N": f"{(i * 13 + k) % 10000 / 100:.2f}"}}} for k in range(1 + i % 3)]
    order = {
        "customer": {"S": f"customer#{i % 20_000:05d}"}, "placed_at": {"N": str(1_700_000_000_000 + i * 1000)},
        "order_no": {"S": f"ORD-{i:09d}"}, "status": {"S": STATUSES[i % len(STATUSES)]},
        "total": {"N": f"{i % 10_000_000 / 100:.2f}"}, "currency": {"S": "EUR"},
        "address": {"M": {"street": {"S": f"{i % 997} Main Street"}, "city": {"S": CITIES[i % len(CITIES)]},
                          "zip": {"S": f"{10000 + i % 89_999}"}}},
        "lines": {"L": lines}, "tags": {"SS": sorted({TAGS[i % 7], TAGS[(i // 7) % 7]})},
        "express": {"BOOL": i % 4 == 0},
    }
    if i % 5 == 0:
        order["coupon"] = {"S": f"C{i % 100:02d}"}
    return order


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_moto(directory: Path) -> tuple[subprocess.Popen, str]:
    """``moto_server`` in a child process on a free port; waits until it answers."""
    port = free_port()
    log = open(directory / "moto.log", "wb")
    proc = subprocess.Popen([str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, f"http://127.0.0.1:{port}"
        except OSError as exc:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise SystemExit(f"moto_server did not start; see {directory / 'moto.log'}") from exc
            time.sleep(0.2)


def client(endpoint: str):
    """A boto3 DynamoDB client of the endpoint."""
    import boto3
    from botocore.config import Config

    return boto3.client("dynamodb", endpoint_url=endpoint, region_name=REGION,
                        config=Config(max_pool_connections=32, retries={"mode": "standard"}), **CREDENTIALS)


def generate(endpoint: str, items: int, writers: int = 4) -> float:
    """Create the table and fill it with ``items`` orders (BatchWriteItem, ``writers`` threads); seconds."""
    dynamo = client(endpoint)
    if TABLE in dynamo.list_tables()["TableNames"]:
        dynamo.delete_table(TableName=TABLE)
    dynamo.create_table(TableName=TABLE, BillingMode="PAY_PER_REQUEST",
                        KeySchema=[{"AttributeName": "customer", "KeyType": "HASH"},
                                   {"AttributeName": "placed_at", "KeyType": "RANGE"}],
                        AttributeDefinitions=[{"AttributeName": "customer", "AttributeType": "S"},
                                              {"AttributeName": "placed_at", "AttributeType": "N"}])
    started = time.perf_counter()

    def write(first: int) -> None:
        mine = client(endpoint)
        for start in range(first * 25, items, 25 * writers):
            batch = [{"PutRequest": {"Item": item(i)}} for i in range(start, min(start + 25, items))]
            request = {TABLE: batch}
            while request:
                request = mine.batch_write_item(RequestItems=request).get("UnprocessedItems") or None

    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def raw_scan(endpoint: str, segments: int) -> tuple[float, int]:
    """Seconds and items of a parallel scan, one thread (and client) per segment, items dropped."""
    counts = [0] * segments
    clients = [client(endpoint) for _ in range(segments)]

    def scan(segment: int) -> None:
        request = {"TableName": TABLE, "Segment": segment, "TotalSegments": segments}
        while True:
            page = clients[segment].scan(**request)
            counts[segment] += len(page["Items"])
            if "LastEvaluatedKey" not in page:
                return
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    started = time.perf_counter()
    threads = [threading.Thread(target=scan, args=(s,)) for s in range(segments)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started, sum(counts)


def main() -> None:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200_000)
    parser.add_argument("--segments", type=int, default=4, help="scan segments, raw and olake alike")
    parser.add_argument("--endpoint", help="use this endpoint instead of starting moto_server")
    parser.add_argument("--spark-master", default="local[*]")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, Parquet)")
    args = parser.parse_args()
    command = shlex.join([os.path.relpath(sys.executable, Path.cwd()), *sys.argv])
    work = Path(tempfile.mkdtemp(prefix="olake-bench-dynamodb-"))
    server = None
    try:
        if args.endpoint:
            endpoint, server_name = args.endpoint, args.endpoint
        else:
            server, endpoint = start_moto(work)
            server_name = "moto_server (own process)"
        print(f"generating {args.items:,} items in {TABLE} ...", file=sys.stderr)
        generate_s = generate(endpoint, args.items)

        src = {"type": "dynamodb", "region": REGION, "endpoint_url": endpoint, "tables": [TABLE],
               "access_key_id": CREDENTIALS["aws_access_key_id"],
               "secret_access_key": CREDENTIALS["aws_secret_access_key"], "segments": args.segments,
               "checkpoint_items": args.items, "sample_size": 1000}
        (work / "src.json").write_text(json.dumps(src))
        (work / "dst.json").write_text(json.dumps({"type": "parquet", "path": str(work / "out")}))
        env = dict(os.environ, OLAKE_SPARK_MASTER=args.spark_master)
        olake = f"{shlex.quote(sys.executable)} -m olake_cli"
        subprocess.run(f"{olake} discover --config src.json > cat.json 2>discover.log", shell=True, cwd=work,
                       env=env, check=True)
        catalog = json.loads((work / "cat.json").read_text())
        for stream in catalog["catalog"]["streams"]:
            stream["sync_mode"] = "full_refresh"
        (work / "cat.json").write_text(json.dumps(catalog))

        print("raw parallel scan ...", file=sys.stderr)
        raw_s, scanned = raw_scan(endpoint, args.segments)
        if scanned != args.items:
            raise SystemExit(f"the raw scan read {scanned:,} items, expected {args.items:,}")
        print("olake sync ...", file=sys.stderr)
        sync_s = timed(f"{olake} sync --source src.json --destination dst.json --catalog cat.json"
                       f" --state st.json > /dev/null 2>sync.log", work, env)
        import pyarrow.dataset as ds

        landed = ds.dataset(str(work / "out" / NAMESPACE / TABLE), format="parquet").count_rows()
        assert landed == args.items, f"{landed:,} rows landed, expected {args.items:,}"

        raw_rate, sync_rate = args.items / raw_s, args.items / sync_s
        print(f"command: {command}")
        print(f"items: {args.items:,} in {TABLE} on {server_name}; generated in {generate_s:.1f} s; "
              f"{args.segments} segments; spark {args.spark_master}; {os.cpu_count()} cores")
        print(f"{'path':<40} {'wall s':>8} {'items/s':>12} {'rate / raw':>11}")
        print(f"{'raw boto3 parallel scan':<40} {raw_s:8.2f} {raw_rate:12,.0f} {1:11.2f}")
        print(f"{'olake sync (tasks write parquet)':<40} {sync_s:8.2f} {sync_rate:12,.0f} {sync_rate / raw_rate:11.2f}")
        print(f"target: olake sync rate / raw rate >= 0.70 -> {'met' if sync_rate / raw_rate >= 0.7 else 'not met'}")
        lines = [line.removeprefix("olake: ") for line in (work / "sync.log").read_text().splitlines()
                 if line.startswith("olake: ") and "chunk(s) in" in line]
        if lines:
            print(f"(sync.log: {'; '.join(lines)})")
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        if args.keep:
            print(f"work directory kept: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
