"""End-to-end demo: throwaway PostgreSQL seeded from fixtures/, copied into ./demo-output/parquet.

Runs the real commands a user would type:
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
        olake = f"{sys.executable} -m olake_cli"
        env = dict(os.environ, OLAKE_SPARK_MASTER=os.environ.get("OLAKE_SPARK_MASTER", "local[*]"))
        commands = [
            f"{olake} discover --config src.json > catalog.json",
            f"{olake} read --config src.json --catalog catalog.json --state state.json"
            f" | {olake} write --config dst.json --state state.json > committed-states.jsonl",
        ]
        started = time.time()
        for command in commands:
            print(f"demo: $ {command.replace(sys.executable + ' -m olake_cli', 'olake')}", file=sys.stderr)
            subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=out, env=env, check=True)
        elapsed = time.time() - started
        summarize(out, elapsed, ds)
    finally:
        cluster.stop()
    return 0


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
