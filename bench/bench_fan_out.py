"""Fan-out benchmark: one bounded ``olake sync`` of N changes into two destinations at once, against each alone.

    .venv/bin/python bench/bench_fan_out.py --changes 1000000 --rows 100000 --repeat 3

Starts a throwaway source and target PostgreSQL. The source table is bench_cdc.py's (``--rows`` rows),
synced in cdc mode, untimed, by ``--repeat`` x 3 pipelines, each with its own replication slot and its
own output, so that every timed run reads the same changes from the same position:
  (a) ``olake sync --destination pg.json``                           PostgreSQL alone (a target database)
  (b) ``olake sync --destination lake.json``                         Parquet alone (a folder)
  (c) ``olake sync --destination pg.json --destination lake.json``   both at once (one reader, one writer
                                                                      thread per destination)
Then bench_cdc.py's ``--changes`` changes (40% updates, 40% inserts, 20% deletes, 1,000 per transaction)
are made at the source, and the runs are timed in the order a, b, c, a, b, c, ... (bench/measure.py: wall
time, the peak of the process tree's summed RSS, the olake process' own peak). Each PostgreSQL target must
then equal the source (row count and a checksum of every column) and each Parquet folder must hold one
change row per change. Prints a Markdown table of the medians, every run's time, and the ratio
(c) / max(a, b) (the target: at most 1.3). Nothing here is a test: it measures.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_cdc import CHANGES_SQL  # noqa: E402
from bench.measure import Measurement, measured  # noqa: E402
from bench.pg_destination import checksum  # noqa: E402
from tests.support.pgcluster import PgCluster, create_database, start_cluster  # noqa: E402

PUB = "bench_pub"
KINDS = {"a": "PostgreSQL alone", "b": "Parquet alone", "c": "PostgreSQL + Parquet (fan-out)"}
TARGET = 1.3


class Bench:
    """The clusters, the work folder and the olake command line of one benchmark run."""

    def __init__(self, source: PgCluster, target: PgCluster, work: Path, profile: Path | None = None) -> None:
        self.source, self.target, self.work, self.profile = source, target, work, profile
        self.spy_options = "-r 50 --threads"
        self.env = dict(os.environ, PGPASSWORD=source.password, OLAKE_SPARK_MASTER="local[*]")
        self.olake = f"{shlex.quote(sys.executable)} -m olake_cli"

    def write_json(self, name: str, value: object) -> str:
        """Write ``value`` as ``name`` in the work folder; its name."""
        (self.work / name).write_text(json.dumps(value))
        return name

    def sync(self, name: str, timed: bool = False) -> str:
        """The ``olake sync`` command of pipeline ``name`` (a1, c2, ...); a timed one under py-spy with
        ``--profile`` (collapsed stacks of every thread, busy samples only)."""
        dests = {"a": [f"pg-{name}.json"], "b": [f"lake-{name}.json"],
                 "c": [f"pg-{name}.json", f"lake-{name}.json"]}[name[0]]
        spy = (f"py-spy record {self.spy_options} --format raw -o {self.profile / name}.txt -- "
               if timed and self.profile else "")
        return (f"{spy}{self.olake} sync --source src-{name}.json "
                + " ".join(f"--destination {d}" for d in dests)
                + f" --catalog cat.json > /dev/null 2>> {name}.log")


def prepare(b: Bench, rows: int, names: list[str]) -> None:
    """The source table, the catalog, and each pipeline's configs and untimed full load."""
    import psycopg

    create_database(b.source, "bench")
    with psycopg.connect(b.source.dsn("bench"), autocommit=True) as conn:
        conn.execute(f"""CREATE TABLE bench (id bigint PRIMARY KEY, qty int, price numeric(12,2), note text,
                         updated_at timestamptz);
                         INSERT INTO bench SELECT g, g % 100, g / 7.0, 'row ' || g, now()
                         FROM generate_series(1, {rows}) g; ANALYZE bench;""")
    for name in names:
        b.write_json(f"src-{name}.json", b.source.source_config(
            "bench", replication_slot=f"fan_{name}", publication=PUB, create_slot_and_publication=True))
        if name[0] in "ac":
            create_database(b.target, f"t_{name}")
            b.write_json(f"pg-{name}.json", b.target.destination_config(f"t_{name}"))
        if name[0] in "bc":
            b.write_json(f"lake-{name}.json", {"type": "parquet", "path": str(b.work / f"lake_{name}")})
    found = subprocess.run(f"{b.olake} discover --config src-{names[0]}.json", shell=True, cwd=b.work, env=b.env,
                           check=True, capture_output=True).stdout
    catalog = json.loads(found)["catalog"]
    for stream in catalog["streams"]:
        stream["sync_mode"] = "cdc"
    b.write_json("cat.json", catalog)
    for name in names:
        print(f"[fan-out] full load of pipeline {name} ...", file=sys.stderr, flush=True)
        if subprocess.run(["bash", "-o", "pipefail", "-c", b.sync(name)], cwd=b.work, env=b.env).returncode:
            raise SystemExit(f"the full load of {name} failed: {(b.work / f'{name}.log').read_text()[-2000:]}")


def make_changes(b: Bench, changes: int, rows: int) -> None:
    """bench_cdc.py's changes at the source, flushed."""
    import psycopg

    print(f"[fan-out] applying {changes:,} changes ...", file=sys.stderr, flush=True)
    with psycopg.connect(b.source.dsn("bench"), autocommit=True) as conn:
        conn.execute(CHANGES_SQL % {"changes": changes, "rows": rows})
        conn.execute("CHECKPOINT")


def parquet_change_rows(folder: Path) -> int:
    """Change rows (``_olake_op`` c, u or d) of the live load of ``public.bench`` in a Parquet folder."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    total = 0
    for path in (folder / "public" / "bench").glob("*.parquet"):  # the live load (a link to its folder)
        ops = pq.read_table(path, columns=["_olake_op"]).column("_olake_op")
        total += len(ops) - (pc.sum(pc.equal(ops, "r")).as_py() or 0)
    return total


def verify(b: Bench, name: str, expected: tuple[int, str], changes: int) -> str:
    """"ok", or what is wrong with pipeline ``name``'s outputs."""
    problems = []
    if name[0] in "ac" and checksum(b.target, f"t_{name}") != expected:
        problems.append("the PostgreSQL target differs from the source")
    if name[0] in "bc":
        landed = parquet_change_rows(b.work / f"lake_{name}")
        if landed != changes:
            problems.append(f"{landed:,} change rows in Parquet, expected {changes:,}")
    return "; ".join(problems) or "ok"


def capture_report(b: Bench, name: str) -> str:
    """The reader's own last ``change capture:`` line of the run's log."""
    lines = [line for line in (b.work / f"{name}.log").read_text().splitlines() if "change capture:" in line]
    return lines[-1].removeprefix("olake: ") if lines else ""


@dataclass
class Run:
    """One timed run: its measurement and the CPU seconds it cost."""

    m: Measurement
    olake_cpu: float  # user + system of the olake process (and bash, py-spy)
    server_cpu: float  # of the source's and the target's server processes that ended (walsender, backends)


def server_cpu(cluster: PgCluster) -> float:
    """CPU seconds of the ended children of ``cluster``'s postmaster (its walsenders and backends)."""
    pid = Path(cluster.datadir, "postmaster.pid").read_text().split()[0]
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")  # cutime, cstime


def timed_run(b: Bench, name: str) -> Run:
    """Run pipeline ``name``'s sync of the changes, measured."""
    (b.work / f"{name}.log").write_text("")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    servers = server_cpu(b.source) + server_cpu(b.target)
    m = measured(b.sync(name, timed=True), b.work, b.env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if m.returncode != 0:
        raise SystemExit(f"{name}: exit {m.returncode}: {(b.work / f'{name}.log').read_text()[-2000:]}")
    time.sleep(0.5)  # the walsender and the target's backend end after olake disconnects
    return Run(m, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
               server_cpu(b.source) + server_cpu(b.target) - servers)


def time_runs(b: Bench, names: list[str], changes: int) -> dict[str, list[Run]]:
    """Time every pipeline's sync of the changes, in the order given; each output verified."""
    expected = checksum(b.source, "bench")
    results: dict[str, list[Run]] = {kind: [] for kind in KINDS}
    for name in names:
        load = os.getloadavg()[0]
        run = timed_run(b, name)
        status = verify(b, name, expected, changes)
        print(f"[fan-out] {name}: {run.m.wall_s:.2f} s (load {load:.1f}), CPU olake {run.olake_cpu:.1f} s, "
              f"servers {run.server_cpu:.1f} s, tree {run.m.tree_peak_mib:,.0f} MiB, olake "
              f"{run.m.driver_mib or 0:,.0f} MiB, {status}; {capture_report(b, name)}", file=sys.stderr, flush=True)
        if status != "ok":
            raise SystemExit(f"{name}: {status}")
        results[name[0]].append(run)
    return results


def table(results: dict[str, list[Run]], changes: int) -> str:
    """The Markdown table of the medians and every run's wall time, and the ratio line."""
    med = {k: statistics.median(r.m.wall_s for r in runs) for k, runs in results.items()}
    lines = ["| run | wall s (median) | changes/s | every run, s | CPU s, olake + servers (median) | "
             "peak RSS, tree (MiB) | olake process (MiB) |", "|---|---:|---:|---|---:|---:|---:|"]
    for kind, runs in results.items():
        cpu = (statistics.median(r.olake_cpu for r in runs), statistics.median(r.server_cpu for r in runs))
        lines.append(f"| ({kind}) {KINDS[kind]} | {med[kind]:.2f} | {changes / med[kind]:,.0f} | "
                     f"{', '.join(f'{r.m.wall_s:.2f}' for r in runs)} | {cpu[0]:.1f} + {cpu[1]:.1f} | "
                     f"{max(r.m.tree_peak_mib for r in runs):,.0f} | {max(r.m.driver_mib or 0 for r in runs):,.0f} |")
    slower = max(med["a"], med["b"])
    ratio = med["c"] / slower
    lines.append("")
    lines.append(f"(c) / max(a, b) = {med['c']:.2f} / {slower:.2f} = {ratio:.2f} (target at most {TARGET}: "
                 f"{'met' if ratio <= TARGET else 'not met'}); (c) / (a + b) = {med['c'] / (med['a'] + med['b']):.2f}")
    return "\n".join(lines)


def main() -> None:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=1_000_000, help="changes made at the source")
    parser.add_argument("--rows", type=int, default=100_000, help="rows of the table before the changes")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each of (a), (b), (c)")
    parser.add_argument("--profile", type=Path, default=None,
                        help="a folder: each timed run under py-spy (on the PATH), its stacks there (times then skewed)")
    parser.add_argument("--py-spy-options", default="-r 50 --threads",
                        help="py-spy record's options with --profile (--gil: only the thread holding the GIL)")
    parser.add_argument("--keep", action="store_true", help="leave the work folder (its logs and outputs)")
    args = parser.parse_args()
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    names = [f"{kind}{i}" for i in range(1, args.repeat + 1) for kind in KINDS]
    source, target = start_cluster(), start_cluster()
    work = Path(tempfile.mkdtemp(prefix="olake-bench-fan-out-"))
    try:
        b = Bench(source, target, work, args.profile and args.profile.resolve())
        b.spy_options = args.py_spy_options
        prepare(b, args.rows, names)
        make_changes(b, args.changes, args.rows)
        load = os.getloadavg()[0]
        results = time_runs(b, names, -(-args.changes // 1000) * 1000)
        print(f"{args.changes:,} changes over {args.rows:,} rows, {os.cpu_count()} cores, "
              f"load average before the runs {load:.1f}")
        print(table(results, args.changes))
    finally:
        source.stop()
        target.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
