"""End-to-end demo: a throwaway PostgreSQL seeded from fixtures/ and an embedded MongoDB-compatible
server (SecantusDB) seeded with nested documents, each copied into ./demo-output/.

Runs the real commands a user would type, for each source:
    olake discover --config src.json > catalog.json
    olake read --config src.json --catalog catalog.json --state state.json | olake write --config dst.json --state state.json
then prints what landed.
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
        src.write_text(json.dumps(cluster.source_config("demo", schemas=["shop", "public"], chunk_rows=5000), indent=2))
        (out / "dst.json").write_text(json.dumps({"type": "parquet", "path": str(out / "parquet")}, indent=2))
        summarize(out, run_commands(out), ds)
        iceberg_demo(out)
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


def iceberg_demo(out: Path) -> None:
    """The same source into Iceberg tables on the embedded catalog, then a query through pyiceberg."""
    from pyiceberg.catalog.sql import SqlCatalog

    lake = out / "iceberg"
    (out / "iceberg.json").write_text(json.dumps({"type": "iceberg", "path": str(lake)}, indent=2))
    command = ("{olake} sync --source src.json --destination iceberg.json --catalog catalog.json "
               "--state iceberg-state.json > /dev/null")
    print(f"\ndemo: $ {command.format(olake='olake')}", file=sys.stderr)
    subprocess.run(["bash", "-o", "pipefail", "-c", command.format(olake=f"{sys.executable} -m olake_cli")],
                   cwd=out, check=True)
    catalog = SqlCatalog("olake", uri=f"sqlite:///{lake}/catalog.db", warehouse=f"file://{lake}/warehouse")
    tables = sorted(".".join(t) for ns in catalog.list_namespaces() for t in catalog.list_tables(ns))
    orders = catalog.load_table("shop.orders").scan().to_arrow()
    print(f"Iceberg tables in {lake}: {', '.join(tables)}")
    print(f"pyiceberg: shop.orders has {orders.num_rows} rows; columns {', '.join(orders.schema.names[:6])}, ...")


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
