"""The Spark path against the threads: one table's full load scanned on threads of the ``olake`` process
and as Spark tasks (``"in_process_rows": 0``), side by side at several sizes, and Spark's fixed cost.

    .venv/bin/python bench/bench_spark_path.py --rows 1000,1000000,5000000,10000000
    .venv/bin/python bench/bench_spark_path.py --rows 1000 --repeat 5 --warm
    .venv/bin/python bench/bench_spark_path.py --rows 0 --breakdown 5      # only the start-up, step by step

Starts a throwaway PostgreSQL, fills one table per size (bench_full_load's 10 columns), and times cold
``olake sync`` processes into Parquet, the two paths in turn (in process, with ``in_process_rows`` above
any estimate; then Spark) for every repeat;
each run's Parquet row count is checked. ``--warm`` adds a third path: the chunks as tasks of the warm
engine (``olake spark-server start``, started once before anything is timed, stopped at the end).
``--olake-tree DIR`` runs the olake of another checkout (for before-and-after figures: its folder goes
first on PYTHONPATH, which Spark's local Python workers inherit).

*Time to the first chunk* is when the first chunk began scanning, from the process's start: the moment
its progress line was printed less the seconds the line says it took. In process it is the driver's own
start-up and planning; Spark's *fixed cost* is what the Spark path adds to it (JVM, session, the first
job, its Python worker). Medians over the repeats; a Markdown table on stdout, logs in the work folder.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_full_load import CREATE  # noqa: E402
from bench.run import parquet_rows  # noqa: E402
from tests.support.pgcluster import create_database, free_port, start_cluster  # noqa: E402

CHUNK_LINE = re.compile(r": chunk \d+/\d+: \d+ rows in ([\d.]+)s")
TARGET_RATIO, TARGET_FIXED_S = 1.25, 3.0
IN_PROCESS_ALWAYS = 10**15  # the in-process path's in_process_rows: whatever the planners estimate


@dataclass
class LoadPath:
    """One way of running the load, and what its runs measured."""

    name: str
    source: str  # source config file name
    extra: list[str] = field(default_factory=list)  # further olake arguments
    walls: list[float] = field(default_factory=list)
    firsts: list[float] = field(default_factory=list)


def timed_sync(work: Path, path: LoadPath, catalog: str, name: str, env: dict[str, str]) -> tuple[float, float]:
    """One cold ``olake sync``: its wall seconds and when its first chunk began scanning."""
    out = work / f"out-{name}"
    shutil.rmtree(out, ignore_errors=True)
    dst = work / f"dst-{name}.json"
    dst.write_text(json.dumps({"type": "parquet", "path": str(out)}))
    argv = [str(ROOT / ".venv" / "bin" / "olake"), "sync", "--source", path.source, "--catalog", catalog,
            "--destination", str(dst), "--state", str(work / f"st-{name}.json"), *path.extra]
    for stale in work.glob(f"st-{name}.json*"):
        stale.unlink()
    first = None
    started = time.perf_counter()
    with open(work / f"{name}.log", "w") as log:
        process = subprocess.Popen(argv, cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for line in process.stderr:
            log.write(line)
            match = CHUNK_LINE.search(line)
            if first is None and match:
                first = time.perf_counter() - started - float(match.group(1))
        process.wait()
    wall = time.perf_counter() - started
    if process.returncode != 0:
        raise SystemExit(f"{name} failed ({process.returncode}); see {work / (name + '.log')}")
    return wall, first if first is not None else float("nan")


def fill(cluster, rows: int) -> str:
    """A new database holding ``rows`` rows in its table ``bench``; its name."""
    import psycopg

    database = f"rows_{rows}"
    create_database(cluster, database)
    with psycopg.connect(cluster.dsn(database), autocommit=True) as conn:
        conn.execute(CREATE.replace("%(rows)s", str(rows)))
        conn.execute("VACUUM (FREEZE, ANALYZE) bench")
    return database


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1000,1000000,5000000", help="comma-separated table sizes")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each path per size (median shown)")
    parser.add_argument("--spark-master", default=None, help="the Spark path's master (default: olake's)")
    parser.add_argument("--warm", action="store_true", help="also run the chunks on a warm engine (spark-server)")
    parser.add_argument("--olake-tree", default=None, metavar="DIR", help="run the olake of this checkout")
    parser.add_argument("--breakdown", type=int, default=0, metavar="N",
                        help="also time the cold Spark start step by step (bench/spark_start.py), N times")
    args = parser.parse_args()
    if args.breakdown:
        print(breakdown(args.breakdown, args.spark_master or "local[2]") + "\n")
    sizes = [int(n) for n in args.rows.split(",") if int(n)]
    if not sizes:
        return
    work = Path(tempfile.mkdtemp(prefix="olake-bench-spark-path-"))
    env = dict(os.environ, XDG_STATE_HOME=str(work / "state"))  # the warm engine's record and the logs
    if args.olake_tree:
        env["PYTHONPATH"] = os.path.abspath(args.olake_tree)
    olake = str(ROOT / ".venv" / "bin" / "olake")
    if args.warm:
        port = free_port()
        subprocess.run([olake, "spark-server", "start", "--port", str(port)], env=env, check=True)
        args.remote = f"sc://127.0.0.1:{port}"
    cluster = start_cluster()
    table = ["| rows | path | wall s | rows/s | time to the first chunk, s | × in process |",
             "|---:|---|---:|---:|---:|---:|"]
    verdicts = []
    try:
        for rows in sizes:
            paths = measure_size(cluster, work, env, rows, args)
            base = statistics.median(paths[0].walls)
            base_first = statistics.median(paths[0].firsts)
            for path in paths:
                wall, first = statistics.median(path.walls), statistics.median(path.firsts)
                table.append(f"| {rows:,} | {path.name} | {wall:.2f} | {rows / wall:,.0f} | {first:.2f} | "
                             f"{wall / base:.2f} |")
                if path is not paths[0]:
                    fixed = first - base_first
                    verdicts.append(f"- {rows:,} rows, {path.name}: {wall / base:.2f}× the in-process wall time "
                                    f"(target ≤ {TARGET_RATIO}× at 5M and 10M); fixed cost {fixed:.2f} s "
                                    f"(target ≤ {TARGET_FIXED_S:.0f} s)")
    finally:
        cluster.stop()
        if args.warm:
            subprocess.run([olake, "spark-server", "stop"], env=env, check=False)
    load = os.getloadavg()
    print(f"`bench/bench_spark_path.py {' '.join(sys.argv[1:])}` ({os.cpu_count()} cores, load average "
          f"{load[0]:.1f} at the end; {args.repeat} run(s) of each path, medians):\n")
    print("\n".join(table) + "\n\n" + "\n".join(verdicts))
    print(f"[bench] logs in {work}", file=sys.stderr)


def breakdown(runs: int, master: str) -> str:
    """A Markdown table: each step of a cold Spark start (bench/spark_start.py), medians of ``runs``."""
    results = []
    for _ in range(runs):
        done = subprocess.run([sys.executable, str(ROOT / "bench" / "spark_start.py"), master], capture_output=True,
                              text=True, check=True)
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    lines = [f"Cold Spark start on {master}, step by step (`bench/spark_start.py`, median of {runs}):\n",
             "| step | seconds |", "|---|---:|"]
    lines += [f"| {name} | {statistics.median(r[name] for r in results):.2f} |" for name in results[0]]
    return "\n".join(lines)


def measure_size(cluster, work: Path, env: dict[str, str], rows: int, args) -> list[LoadPath]:
    """Every path's runs on a table of ``rows`` rows, the paths in turn on each repeat."""
    database = fill(cluster, rows)
    src = cluster.source_config(database)
    (work / f"src-{rows}.json").write_text(json.dumps({**src, "in_process_rows": IN_PROCESS_ALWAYS}))
    (work / f"src-{rows}-spark.json").write_text(json.dumps({**src, "in_process_rows": 0}))
    catalog = f"cat-{rows}.json"
    subprocess.run(f"{ROOT}/.venv/bin/olake discover --config src-{rows}.json > {catalog} 2> discover.log",
                   shell=True, cwd=work, env=env, check=True)
    master = ["--spark-master", args.spark_master] if args.spark_master else []
    paths = [LoadPath("in process", f"src-{rows}.json"),
             LoadPath(f"Spark tasks ({args.spark_master or 'local[*]'})", f"src-{rows}-spark.json", master)]
    if args.warm:
        paths.append(LoadPath("Spark tasks (warm engine)", f"src-{rows}-spark.json", ["--spark-remote", args.remote]))
    for attempt in range(args.repeat):
        for index, path in enumerate(paths):
            name = f"{rows}-{index}-{attempt}"
            wall, first = timed_sync(work, path, catalog, name, env)
            counted = parquet_rows(work / f"out-{name}" / "public" / "bench")
            if counted != rows:
                raise SystemExit(f"{name}: {counted} rows in Parquet, expected {rows}")
            shutil.rmtree(work / f"out-{name}")
            path.walls.append(wall)
            path.firsts.append(first)
            print(f"[bench] {rows:,} rows, {path.name}: {wall:.2f} s, first chunk at {first:.2f} s",
                  file=sys.stderr)
    return paths


if __name__ == "__main__":
    main()
