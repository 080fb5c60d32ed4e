"""End-to-end demo: a throwaway PostgreSQL seeded from fixtures/ and an embedded MongoDB-compatible
server (SecantusDB) seeded with nested documents, each copied into ./demo-output/.

Runs the real commands a user would type, for each source:
    olake discover --config src.json > catalog.json
    olake read --config src.json --catalog catalog.json --state state.json | olake write --config dst.json --state state.json
then prints what landed. PostgreSQL also goes into Iceberg with change capture on shop.orders: a slot
and a publication, a first ``olake sync``, some changes, a second ``olake sync`` that copies just those,
and a query of what changed. Then shop.orders goes through Kafka (a local tansu broker): into a topic
with ``olake sync``, and from the topic into Parquet with ``olake sync`` from the kafka source.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.pgcluster import create_database, start_cluster  # noqa: E402

COMMANDS = [
    "{olake} discover --config src.json > catalog.json",
    "{olake} read --config src.json --catalog catalog.json --state state.json"
    " | {olake} write --config dst.json --state state.json > committed-states.jsonl",
]


def main() -> int:
    """Run the demo; returns the exit code."""
    import psycopg
    import pyarrow.dataset as ds

    out = ROOT / "demo-output"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    print("demo: starting a throwaway PostgreSQL cluster ...", file=sys.stderr)
    cluster = start_cluster()
    try:
        create_database(cluster, "demo")
        with psycopg.connect(cluster.dsn("demo"), autocommit=True) as conn:
            conn.execute((ROOT / "fixtures" / "postgres" / "demo.sql").read_text())
        src = out / "src.json"
        src.write_text(json.dumps(cluster.source_config("demo", schemas=["shop", "public"], chunk_rows=5000,
                                                        replication_slot=SLOT, publication=PUBLICATION), indent=2))
        (out / "dst.json").write_text(json.dumps({"type": "parquet", "path": str(out / "parquet")}, indent=2))
        summarize(out, run_commands(out), ds)
        iceberg_demo(out, cluster.dsn("demo"))
        kafka_demo(out)
    finally:
        cluster.stop()
    mongo_demo(out / "mongodb", ds)
    return 0


def run_commands(folder: Path) -> float:
    """Run discover and read | write in ``folder``; returns the wall seconds."""
    olake = f"{sys.executable} -m olake_cli"
    env = dict(os.environ, OLAKE_SPARK_MASTER=os.environ.get("OLAKE_SPARK_MASTER", "local[*]"))
    started = time.time()
    for command in COMMANDS:
        print(f"demo: $ {command.format(olake='olake')}", file=sys.stderr)
        subprocess.run(["bash", "-o", "pipefail", "-c", command.format(olake=olake)], cwd=folder, env=env,
                       check=True)
    return time.time() - started


SLOT, PUBLICATION = "olake_slot", "olake_publication"
CDC_SETUP = [f"SELECT pg_create_logical_replication_slot('{SLOT}', 'pgoutput')",
             f"CREATE PUBLICATION {PUBLICATION} FOR TABLE shop.orders"]
CHANGES = ["UPDATE shop.orders SET status = 'shipped', updated_at = now() WHERE order_id IN (1, 2, 3)",
           "INSERT INTO shop.orders (status, total_amount, updated_at) VALUES ('paid', 42.50, now()), "
           "('pending', 9.99, now())",
           "DELETE FROM shop.orders WHERE order_id = 19999"]
SYNC = ("{olake} sync --source src.json --destination iceberg.json --catalog cdc-catalog.json "
        "--state iceberg-state.json > /dev/null")


def iceberg_demo(out: Path, dsn: str) -> None:
    """The same source into Iceberg tables on the embedded catalog, shop.orders with change capture:
    a first sync copies everything, a second one after some changes copies just those."""
    import psycopg

    lake = out / "iceberg"
    (out / "iceberg.json").write_text(json.dumps({"type": "iceberg", "path": str(lake)}, indent=2))
    with psycopg.connect(dsn, autocommit=True) as conn:
        run_sql(conn, CDC_SETUP)
        catalog = json.loads((out / "catalog.json").read_text())["catalog"]
        for stream in catalog["streams"]:
            if (stream["namespace"], stream["name"]) == ("shop", "orders"):
                stream["sync_mode"] = "cdc"
        (out / "cdc-catalog.json").write_text(json.dumps(catalog, indent=2))
        print('demo: cdc-catalog.json is catalog.json with "sync_mode": "cdc" for shop.orders', file=sys.stderr)
        run_shell(out, SYNC)
        before = query_orders(lake)
        run_sql(conn, CHANGES)
        run_shell(out, SYNC)
    after = query_orders(lake)
    catalog = iceberg_catalog(lake)
    tables = ", ".join(sorted(".".join(t) for ns in catalog.list_namespaces() for t in catalog.list_tables(ns)))
    print(f"\nIceberg tables in {lake}: {tables}")
    print(f"pyiceberg + DuckDB: shop.orders held {before['rows']} rows after the first sync, {after['rows']} after "
          f"the second;\n  orders 1-3 are now {after['shipped']}; new orders {after['new']}; order 19999 "
          f"{'is gone' if not after['has_19999'] else 'is still there'}")


KAFKA_SYNCS = ["{olake} sync --source src.json --destination kafka.json --catalog orders-catalog.json > /dev/null",
               "{olake} discover --config kafka-src.json > kafka-catalog.json",
               "{olake} sync --source kafka-src.json --destination from-kafka.json --catalog kafka-catalog.json "
               "> /dev/null"]


def kafka_demo(out: Path) -> None:
    """shop.orders into a Kafka topic (olake's envelope, one transaction per commit), then back out of
    the topic into Parquet; prints how many rows came back."""
    import pyarrow.dataset as ds

    from tests.support.kafka_broker import start_broker

    print("\ndemo: starting a local Kafka-compatible broker (tansu) ...", file=sys.stderr)
    broker = start_broker(str(out))
    try:
        (out / "kafka.json").write_text(json.dumps({"type": "kafka", "bootstrap_servers": broker.bootstrap}))
        (out / "kafka-src.json").write_text(json.dumps({"type": "kafka", "bootstrap_servers": broker.bootstrap,
                                                        "topics": ["olake.shop.orders"]}))
        (out / "from-kafka.json").write_text(json.dumps({"type": "parquet", "path": str(out / "from-kafka")}))
        catalog = json.loads((out / "catalog.json").read_text())["catalog"]
        catalog["streams"] = [s for s in catalog["streams"] if (s["namespace"], s["name"]) == ("shop", "orders")]
        (out / "orders-catalog.json").write_text(json.dumps(catalog, indent=2))
        for command in KAFKA_SYNCS:
            run_shell(out, command)
    finally:
        broker.stop()
    rows = ds.dataset(out / "from-kafka" / "shop" / "orders", format="parquet").count_rows()
    print(f"\nKafka: shop.orders went into topic olake.shop.orders and back out into Parquet: {rows} rows in "
          f"{out / 'from-kafka'}")


def run_sql(conn, statements: list[str]) -> None:
    """Run SQL statements, showing them as the psql command a user would type."""
    print(f'\ndemo: $ psql -c "{"; ".join(statements)};"', file=sys.stderr)
    for statement in statements:
        conn.execute(statement)


def run_shell(folder: Path, command: str) -> None:
    """Run an olake command line in ``folder``, showing it; its stderr (progress, summary) shows through."""
    print(f"\ndemo: $ {command.format(olake='olake')}", file=sys.stderr)
    subprocess.run(["bash", "-o", "pipefail", "-c", command.format(olake=f"{sys.executable} -m olake_cli")],
                   cwd=folder, check=True)


def iceberg_catalog(lake: Path):
    """The embedded Iceberg catalog of ``lake``, as pyiceberg opens it."""
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog("olake", uri=f"sqlite:///{lake}/catalog.db", warehouse=f"file://{lake}/warehouse")


def query_orders(lake: Path) -> dict:
    """What shop.orders holds now, queried with DuckDB over the current Iceberg rows."""
    con = iceberg_catalog(lake).load_table("shop.orders").scan().to_duckdb("orders")
    [(rows, has_19999)] = con.sql("SELECT count(*), count(*) FILTER (WHERE order_id = 19999) FROM orders").fetchall()
    shipped = [s for (s,) in con.sql("SELECT status FROM orders WHERE order_id <= 3 ORDER BY order_id").fetchall()]
    new = con.sql("SELECT order_id, status, total_amount FROM orders WHERE order_id > 20000 ORDER BY 1").fetchall()
    return {"rows": rows, "has_19999": bool(has_19999), "shipped": ", ".join(shipped),
            "new": ", ".join(f"{i} ({s}, {t})" for i, s, t in new) or "none"}


def mongo_demo(out: Path, ds) -> None:
    """Seed an embedded MongoDB-compatible server with orders, copy them, print the Parquet schema."""
    import tempfile

    from bson import Decimal128, ObjectId
    from bson.datetime_ms import DatetimeMS
    from secantus import SecantusDBServer

    from tests.support.mongo import connect

    out.mkdir()
    print("\ndemo: starting an embedded MongoDB-compatible server (SecantusDB) ...", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="olake-demo-mongo-") as data, SecantusDBServer(storage_path=data) as server:
        with connect(server.uri) as client:
            client.shop.orders.insert_many([
                {"_id": ObjectId(), "number": i, "total": Decimal128(f"{i * 3}.99"), "placed": DatetimeMS(i * 60_000),
                 "customer": {"name": f"customer {i % 50}", "city": ["Lyon", "Porto", "Oslo"][i % 3]},
                 "items": [f"sku-{i % 7}", f"sku-{i % 11}"], "gift": i % 5 == 0} for i in range(5000)])
        (out / "src.json").write_text(json.dumps({"type": "mongodb", "uri": server.uri, "database": "shop",
                                                  "chunk_documents": 1000}, indent=2))
        (out / "dst.json").write_text(json.dumps({"type": "parquet", "path": str(out / "parquet")}, indent=2))
        summarize(out, run_commands(out), ds)
    schema = ds.dataset(str(out / "parquet" / "shop" / "orders")).schema
    print("MongoDB types kept: " + ", ".join(f"{f.name}: {f.type}" for f in schema if not f.name.startswith("_olake_")))


def summarize(out: Path, elapsed: float, ds) -> None:
    """Print rows and files per stream and the final state."""
    state = json.loads((out / "state.json").read_text())
    print(f"\nCopied in {elapsed:.1f}s into {out / 'parquet'}:")
    for stream in state["streams"]:
        folder = out / "parquet" / stream["stream_namespace"] / stream["stream_name"]
        files = sorted(folder.glob("*.parquet"))
        rows = ds.dataset(str(folder)).count_rows() if files else 0
        chunks = stream["stream_state"].get("chunks")
        status = "done" if not chunks else f"{sum(c['status'] == 'succeed' for c in chunks)}/{len(chunks)} chunks"
        print(f"  {stream['stream_namespace']}.{stream['stream_name']:<14} {rows:>7} rows  {len(files)} file(s)  {status}")
    print(f"State file: {out / 'state.json'} (sync_type per stream: "
          f"{sorted({s['sync_type'] for s in state['streams']})})")
    types = out / "parquet" / "shop" / "all_types"
    if types.is_dir():
        schema = ds.dataset(str(types)).schema
        shown = [f"{f.name}: {f.type}" for f in schema if not f.name.startswith("_olake_")]
        print(f"Exact types kept, e.g. shop.all_types ({len(shown)} columns): " + ", ".join(shown[:14]) + ", ...")


if __name__ == "__main__":
    sys.exit(main())
