"""One benchmark run: olake against raw PostgreSQL reads and its peers, full load and change capture.

    .venv/bin/python bench/run.py                                   # 10M rows, 1M changes (long)
    .venv/bin/python bench/run.py --rows 200000 --changes 100000    # a quick run
    .venv/bin/python bench/run.py --rows 200000 --skip-peers --only sync-parquet,pipe-parquet

Starts one throwaway PostgreSQL (tests/support/pgcluster.py) and, in one run:

1. Full load. Generates ``--rows`` rows (bench_full_load.py's table: bigint, int, numeric, text,
   timestamptz, date, boolean, double, uuid, jsonb; then VACUUM FREEZE so no reader pays for hint
   bits) and times each path (``--only`` picks some; the raw COPY baseline always runs):
     copy            psql ``COPY bench TO STDOUT (FORMAT binary)`` > /dev/null (the baseline)
     sync-parquet    ``olake sync`` to Parquet (up to the source's ``in_process_rows``, without Spark)
     sync-parquet-spark  the same with ``"in_process_rows": 0``: the chunks as Spark tasks
     sync-iceberg    ``olake sync`` to Iceberg (``{"type": "iceberg", "path": DIR}``); "not available"
                     with the reason when ``olake spec --destination iceberg`` fails
     pipe-parquet    ``olake read | olake write`` to Parquet
     dlt-connectorx  dlt ``sql_table(backend="connectorx")`` to Parquet (filesystem destination)
     dlt-pyarrow     dlt ``sql_table(backend="pyarrow")`` to Parquet
     spark-jdbc      Spark's JDBC reader, ``numPartitions`` = cores over min/max(id), to Parquet
   dlt runs from ``bench/.venv-peers`` (created and filled from bench/requirements-peers.txt on first
   use); the JDBC driver jar comes from the Debian package libpostgresql-jdbc-java (apt-get installs
   it when missing and running as root). ``--skip-peers`` leaves out dlt and Spark JDBC.
   Every olake and peer output is counted afterwards; a count other than ``--rows`` marks it FAILED.

2. Change capture, in database ``benchcdc`` of the same server: bench_cdc.py's table of
   ``--cdc-rows`` rows, full-loaded in cdc mode twice (one slot for ``read | write``, one for
   ``sync``, so both consume the same changes), then bench_cdc.py's ``--changes`` changes (40%
   updates, 40% inserts, 20% deletes, 1,000 per transaction), then timed:
     cdc-raw         psql ``COPY (SELECT data FROM pg_logical_slot_peek_binary_changes(...)) TO STDOUT
                     (FORMAT binary)`` > /dev/null on a third slot (the baseline)
     (reference)     bench_cdc.py's raw read: ``SELECT count(*) ... FROM pg_logical_slot_peek_binary_changes``
     cdc-pipe        ``olake read | olake write`` to Parquet
     cdc-sync        ``olake sync`` to Parquet
   Each olake output must hold exactly as many change rows (``_olake_op`` c/u/d) as the slot has.

3. MongoDB full load (``--mongo-docs``, 0 skips it), on SecantusDB in its own process (bench_mongo.py:
   its collection of ``--mongo-docs`` documents, its server), each timed ``--mongo-repeat`` times
   (the table shows the median, and every run's wall time):
     mongo-raw       one pymongo cursor over the collection (``RawBSONDocument``), timed in process
                     after connecting (the baseline)
     mongo-plan      olake's chunk planning alone (``plan_full_load`` in process)
     mongo-sync      ``olake sync`` to Parquet
     mongo-pipe      ``olake read | olake write`` to Parquet
   Each olake output must hold ``--mongo-docs`` rows.

4. The PostgreSQL destination's paths (bench/pg_destination.py), into a second throwaway cluster.

5. Prints (stdout) Markdown for the README: the command, the machine, one table of every path that ran
   (each part's rows with their time per item against the part's limit: raw COPY, raw slot read, raw
   MongoDB scan, the binary COPY pipe; for the PostgreSQL destination's change apply, PostgreSQL's own
   subscription as the reference), and the targets of issues [F6] and [F8] with met / not met.
   Progress and the tools' logs go to stderr and to log files.

Fairness: every path is one cold process tree timed end to end (interpreter and JVM start included),
each with its tool's defaults except where a default would not finish at 10M rows: Spark's JDBC
reader gets ``fetchsize`` 10000 (the PostgreSQL driver's default 0 buffers a whole partition).
dlt's connectorx backend keeps its default of reading the table into one Arrow table.

Memory (bench/measure.py): "peak RSS, tree" is the peak of the summed RSS of the measured process
tree, sampled from /proc every 0.2 s; "largest process" is the largest single-process peak, the larger
of ``ru_maxrss`` from ``/usr/bin/time -v`` and each process's VmHWM (``/usr/bin/time`` alone misses
the JVM, which pyspark never waits for). The PostgreSQL server's own memory is in neither.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import peers  # noqa: E402
from bench import pg_destination as pgd  # noqa: E402
from bench.bench_cdc import CHANGES_SQL  # noqa: E402
from bench.bench_full_load import CREATE  # noqa: E402
from bench.measure import Measurement, measured  # noqa: E402
from tests.support.pgcluster import PgCluster, create_database, start_cluster  # noqa: E402

FULL_PATHS = {
    "copy": "raw `COPY bench TO STDOUT (FORMAT binary)` > /dev/null",
    "sync-parquet": "`olake sync` → Parquet",
    "sync-parquet-spark": "`olake sync` → Parquet, chunks as Spark tasks (`in_process_rows` 0)",
    "sync-iceberg": "`olake sync` → Iceberg",
    "pipe-parquet": "`olake read \\| olake write` → Parquet",
    "dlt-connectorx": "dlt `sql_table` (connectorx) → Parquet",
    "dlt-pyarrow": "dlt `sql_table` (pyarrow) → Parquet",
    "spark-jdbc": "Spark JDBC reader ({n} partitions, fetchsize 10000) → Parquet",
}
CDC_PATHS = {
    "cdc-raw": "raw `pg_logical_slot_peek_binary_changes` > /dev/null",
    "cdc-raw-count": "raw slot read, server-side count (bench_cdc.py)",
    "cdc-pipe": "`olake read \\| olake write` → Parquet",
    "cdc-sync": "`olake sync` → Parquet",
}
MONGO_PATHS = {
    "mongo-raw": "raw pymongo scan (`RawBSONDocument`), in process",
    "mongo-plan": "olake chunk planning alone (`plan_full_load`, in process)",
    "mongo-sync": "`olake sync` → Parquet",
    "mongo-pipe": "`olake read \\| olake write` → Parquet",
}
PEER_PATHS = {"dlt-connectorx", "dlt-pyarrow", "spark-jdbc", "dlt-postgres"}
BASELINES = {"copy", "cdc-raw", "cdc-raw-count", "mongo-raw", "pg-copy-pipe"}
SLOT_PIPE, SLOT_SYNC, SLOT_RAW, CDC_PUB = "bench_slot_pipe", "bench_slot_sync", "bench_slot_raw", "bench_pub"


@dataclass
class Row:
    """One line of a result table."""

    key: str
    label: str
    m: Measurement | None = None
    status: str = "ok"  # "ok", "FAILED: ...", "not available: ...", "skipped"
    count: int | None = None  # rows (or changes) the run moved
    runs: list[float] = field(default_factory=list)  # wall seconds of each run, when repeated

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.m is not None


KEEP = False  # --keep: leave every output in the work folder


def drop(path: Path, ignore_errors: bool = True) -> None:
    """Delete a run's output once it is counted (large at 10M rows), unless --keep."""
    if not KEEP:
        shutil.rmtree(path, ignore_errors=ignore_errors)


def say(text: str) -> None:
    print(f"[bench] {text}", file=sys.stderr, flush=True)


def last_error_line(log: Path) -> str:
    """The most telling line of a tool's stderr log: its ``error`` line, else the last line."""
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "(no log)"
    for line in reversed(lines):
        if "error:" in line.lower() or line.startswith(("Traceback", "Exception", "ERROR")):
            return line[:300]
    return lines[-1][:300] if lines else "(empty log)"


def parquet_files(folder: Path) -> list[Path]:
    """The data files of a Parquet folder (names starting with ``_`` or ``.`` are not data)."""
    found = []
    for top, dirs, files in os.walk(folder, followlinks=True):  # a stream's name links to its live load
        dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
        found += [Path(top) / f for f in files if f.endswith(".parquet") and not f.startswith(("_", "."))]
    return sorted(found)


def parquet_rows(folder: Path) -> int:
    import pyarrow.parquet as pq

    if not folder.exists():
        raise FileNotFoundError(f"{folder} does not exist")
    return sum(pq.ParquetFile(f).metadata.num_rows for f in parquet_files(folder))


def parquet_change_rows(folder: Path) -> int:
    """Rows of a Parquet folder that are changes (``_olake_op`` c, u or d), not full-load rows."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    total = 0
    for f in parquet_files(folder):
        ops = pq.read_table(f, columns=["_olake_op"]).column("_olake_op")
        total += len(ops) - pc.sum(pc.equal(ops, "r")).as_py() if len(ops) else 0
    return total


def iceberg_rows(path: Path, identifier: tuple[str, str]) -> int:
    """Rows of the table in olake's embedded Iceberg catalog at ``path`` (DIR/catalog.db, DIR/warehouse)."""
    import sqlite3

    from pyiceberg.catalog.sql import SqlCatalog

    with sqlite3.connect(path / "catalog.db") as db:  # the catalog's name (olake's default: "olake")
        found = db.execute("SELECT catalog_name FROM iceberg_tables WHERE table_namespace = ? AND table_name = ?",
                           identifier).fetchone()
    catalog = SqlCatalog(found[0] if found else "olake", uri=f"sqlite:///{path / 'catalog.db'}",
                         warehouse=(path / "warehouse").as_uri())
    scan = catalog.load_table(identifier).scan()
    try:
        return scan.count()
    except AttributeError:  # older pyiceberg
        return sum(batch.num_rows for batch in scan.to_arrow_batch_reader())


def machine() -> dict[str, str]:
    mem_kib = 0
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {"cores": str(os.cpu_count()), "memory": f"{mem_kib / 1024 / 1024:.1f} GiB", "cpu": cpu,
            "load": " ".join(f"{x:.2f}" for x in os.getloadavg())}


class Bench:
    """Holds the cluster, the work folder and the environment every timed command runs in."""

    def __init__(self, args: argparse.Namespace, cluster: PgCluster, work: Path,
                 target: PgCluster | None = None) -> None:
        self.args, self.cluster, self.work, self.target = args, cluster, work, target  # target: PostgreSQL paths
        self.env = dict(os.environ, PGPASSWORD=cluster.password, OLAKE_SPARK_MASTER=args.spark_master)
        self.olake = f"{shlex.quote(sys.executable)} -m olake_cli"
        self.psql = (f"{shlex.quote(os.path.join(cluster.bin_dir, 'psql'))} -X -q -h {cluster.host} "
                     f"-p {cluster.port} -U {cluster.superuser}")

    def write_json(self, name: str, value: object) -> str:
        (self.work / name).write_text(json.dumps(value))
        return name

    def sh(self, command: str) -> None:
        """Run an untimed set-up command in the work folder (a failure stops the benchmark)."""
        subprocess.run(command, shell=True, cwd=self.work, env=self.env, check=True)

    def run(self, row: Row, command: str, log: str) -> Measurement | None:
        """Time ``command`` (its stderr already sent to ``log``); on failure mark ``row`` FAILED."""
        say(f"{row.key}: running ...")
        m = measured(command, self.work, self.env)
        row.m = m
        if m.returncode != 0:
            row.status = f"FAILED: exit {m.returncode}: {last_error_line(self.work / log)}"
            say(f"{row.key}: {row.status}")
            return None
        say(f"{row.key}: {m.wall_s:.2f} s")
        return m

    def verify(self, row: Row, expected: int, counter) -> None:
        """Count the output with ``counter()``; a different count marks the row FAILED."""
        if not row.ok:
            return
        try:
            landed = counter()
        except Exception as exc:  # noqa: BLE001 - any failure to read the output is the verdict
            row.status = f"FAILED: output unreadable: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            return
        if landed != expected:
            row.status = f"FAILED: {landed:,} rows landed, expected {expected:,}"
        say(f"{row.key}: {landed:,} rows landed ({row.status})")


# --- full load --------------------------------------------------------------------------------


def full_load(b: Bench, selected: set[str]) -> tuple[list[Row], dict]:
    args, work, n = b.args, b.work, b.args.rows
    import psycopg

    create_database(b.cluster, "bench")
    say(f"generating {n:,} rows ...")
    started = time.perf_counter()
    with psycopg.connect(b.cluster.dsn("bench"), autocommit=True) as conn:
        conn.execute(CREATE.replace("%(rows)s", str(n)))
        conn.execute("VACUUM (FREEZE, ANALYZE) bench")
        size = conn.execute("SELECT pg_size_pretty(pg_table_size('bench'))").fetchone()[0]
        server = conn.execute("SHOW server_version").fetchone()[0]
    say(f"generated in {time.perf_counter() - started:.1f} s ({size})")
    info = {"table_size": size, "server_version": server}

    src = b.cluster.source_config("bench")
    if args.chunk_rows:
        src["chunk_rows"] = args.chunk_rows
    b.write_json("src.json", src)
    subprocess.run(f"{b.olake} discover --config src.json > cat.json 2> discover.log", shell=True,
                   cwd=work, env=b.env, check=True)
    cores = os.cpu_count() or 1
    rows = []

    def row(key: str) -> Row:
        r = Row(key, FULL_PATHS[key].format(n=cores), count=n)
        rows.append(r)
        return r

    # the baseline
    r = row("copy")
    b.run(r, f"{b.psql} -d bench -c \"COPY bench TO STDOUT (FORMAT binary)\" > /dev/null 2> copy.log", "copy.log")

    def table(folder: str) -> Path:
        return work / folder / "public" / "bench"

    for key, source in (("sync-parquet", "src.json"), ("sync-parquet-spark", "src-spark.json")):
        if key not in selected:
            continue
        r = row(key)
        b.write_json("src-spark.json", {**src, "in_process_rows": 0})
        b.write_json(f"dst-{key}.json", {"type": "parquet", "path": str(work / f"out-{key}")})
        b.run(r, f"{b.olake} sync --source {source} --destination dst-{key}.json --catalog cat.json "
                 f"--state st-{key}.json > /dev/null 2> {key}.log", f"{key}.log")
        b.verify(r, n, lambda key=key: parquet_rows(table(f"out-{key}")))
        drop(work / f"out-{key}", ignore_errors=True)

    if "sync-iceberg" in selected:
        r = row("sync-iceberg")
        spec = subprocess.run(f"{b.olake} spec --destination iceberg", shell=True, cwd=work, env=b.env,
                              capture_output=True, text=True)
        if spec.returncode != 0:
            lines = [x for x in (spec.stderr or spec.stdout).splitlines() if x.strip()]
            r.status = f"not available: `olake spec --destination iceberg` failed: {(lines or ['?'])[-1][:200]}"
            say(f"sync-iceberg: {r.status}")
        else:
            b.write_json("dst-sync-iceberg.json", {"type": "iceberg", "path": str(work / "out-sync-iceberg")})
            if not b.run(r, f"{b.olake} sync --source src.json --destination dst-sync-iceberg.json "
                            f"--catalog cat.json --state st-sync-iceberg.json > /dev/null 2> sync-iceberg.log",
                         "sync-iceberg.log"):
                r.status = r.status.replace("FAILED:", "not available (run failed):", 1)
            b.verify(r, n, lambda: iceberg_rows(work / "out-sync-iceberg", ("public", "bench")))
        drop(work / "out-sync-iceberg", ignore_errors=True)

    if "pipe-parquet" in selected:
        r = row("pipe-parquet")
        b.write_json("dst-pipe-parquet.json", {"type": "parquet", "path": str(work / "out-pipe-parquet")})
        b.run(r, f"{b.olake} read --config src.json --catalog cat.json --state st-pipe-parquet.json "
                 f"2> pipe-parquet.log | {b.olake} write --config dst-pipe-parquet.json "
                 f"--state st-pipe-parquet.json > /dev/null 2>> pipe-parquet.log", "pipe-parquet.log")
        b.verify(r, n, lambda: parquet_rows(table("out-pipe-parquet")))
        drop(work / "out-pipe-parquet", ignore_errors=True)

    dlt_keys = [k for k in ("dlt-connectorx", "dlt-pyarrow") if k in selected]
    if dlt_keys:
        python, reason = None, ""
        try:
            python = peers.ensure_peers_venv()
        except peers.Unavailable as exc:
            reason = str(exc)
        for key in dlt_keys:
            r = row(key)
            backend = key.split("-", 1)[1]
            if python is None:
                r.status = f"not available: {reason}"
                continue
            out = work / f"out-{key}"
            b.run(r, f"{shlex.quote(str(python))} {shlex.quote(str(ROOT / 'bench' / 'peers.py'))} dlt "
                     f"--backend {backend} --uri {shlex.quote(b.cluster.uri('bench').replace('postgresql://', 'postgresql+psycopg2://', 1))} --table bench "
                     f"--out {out} --pipelines-dir {work / f'pipelines-{key}'} > /dev/null 2> {key}.log",
                  f"{key}.log")
            b.verify(r, n, lambda out=out: parquet_rows(out / "bench" / "bench"))
            drop(out, ignore_errors=True)

    if "spark-jdbc" in selected:
        r = row("spark-jdbc")
        try:
            jar = peers.ensure_jdbc_jar()
        except peers.Unavailable as exc:
            r.status = f"not available: {exc}"
        else:
            out = work / "out-spark-jdbc"
            b.run(r, f"{shlex.quote(sys.executable)} {shlex.quote(str(ROOT / 'bench' / 'peers.py'))} spark-jdbc "
                     f"--jdbc-url jdbc:postgresql://{b.cluster.host}:{b.cluster.port}/bench "
                     f"--user {b.cluster.superuser} --password {shlex.quote(b.cluster.password)} "
                     f"--table public.bench --key id --out {out} --jar {jar} --master {shlex.quote(args.spark_master)} "
                     f"--partitions {cores} > /dev/null 2> spark-jdbc.log", "spark-jdbc.log")
            b.verify(r, n, lambda: parquet_rows(out))
            drop(out, ignore_errors=True)
    if b.target is not None:
        info["pg_full"] = pgd.full_load(b, selected, make_row)
    return rows, info


def make_row(key: str, label: str, count: int | None) -> Row:
    """A result line for bench/pg_destination.py."""
    return Row(key, label, count=count)


# --- change capture ---------------------------------------------------------------------------


def change_capture(b: Bench, selected: set[str]) -> tuple[list[Row], dict]:
    args, work = b.args, b.work
    import psycopg

    create_database(b.cluster, "benchcdc")
    dsn = b.cluster.dsn("benchcdc")
    with psycopg.connect(dsn, autocommit=True) as conn:  # bench_cdc.py's table
        conn.execute(f"""CREATE TABLE bench (id bigint PRIMARY KEY, qty int, price numeric(12,2), note text,
                         updated_at timestamptz);
                         INSERT INTO bench SELECT g, g % 100, g / 7.0, 'row ' || g, now()
                         FROM generate_series(1, {args.cdc_rows}) g; ANALYZE bench;
                         CREATE PUBLICATION {CDC_PUB} FOR TABLE bench;""")
    rows: list[Row] = []
    info: dict = {}
    paths = {"cdc-pipe": SLOT_PIPE, "cdc-sync": SLOT_SYNC}
    for key, slot in paths.items():
        if key not in selected:
            continue
        r = Row(key, CDC_PATHS[key])
        rows.append(r)
        b.write_json(f"src-{key}.json", b.cluster.source_config("benchcdc", replication_slot=slot,
                                                               publication=CDC_PUB,
                                                               create_slot_and_publication=True))
        b.write_json(f"dst-{key}.json", {"type": "parquet", "path": str(work / f"out-{key}")})
        cdc_catalog(b)
        # the initial full load (not timed): leaves the stream in cdc at its slot's position
        say(f"{key}: initial full load of {args.cdc_rows:,} rows ...")
        done = measured(command_for(b, key), work, b.env)
        if done.returncode != 0:
            r.status = f"FAILED: initial full load: exit {done.returncode}: {last_error_line(work / f'{key}.log')}"
            say(f"{key}: {r.status}")

    if b.target is not None:
        cdc_catalog(b)
        pgd.before_changes(b, selected, "cat-cdc.json")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (SLOT_RAW,))
        say(f"applying {args.changes:,} changes ...")
        started = time.perf_counter()
        conn.execute(CHANGES_SQL % {"changes": args.changes, "rows": args.cdc_rows})
        conn.execute("CHECKPOINT")  # the raw read decodes only flushed WAL
        info["apply_s"] = time.perf_counter() - started

    peek = (f"pg_logical_slot_peek_binary_changes('{SLOT_RAW}', NULL, NULL, 'proto_version', '1', "
            f"'publication_names', '{CDC_PUB}')")
    raw = Row("cdc-raw", CDC_PATHS["cdc-raw"])
    count_row = Row("cdc-raw-count", CDC_PATHS["cdc-raw-count"])
    rows[:0] = [raw, count_row]
    b.run(count_row, f"{b.psql} -d benchcdc -At -c \"SELECT count(*) FILTER (WHERE get_byte(data, 0) IN "
                     f"(73, 85, 68)) FROM {peek}\" > raw-count.txt 2> cdc-raw-count.log", "cdc-raw-count.log")
    changes = int((work / "raw-count.txt").read_text().strip() or 0) if count_row.ok else None
    b.run(raw, f"{b.psql} -d benchcdc -c \"COPY (SELECT data FROM {peek}) TO STDOUT (FORMAT binary)\" "
               f"> /dev/null 2> cdc-raw.log", "cdc-raw.log")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (SLOT_RAW,))
    info["changes"] = changes
    for r in rows:
        r.count = changes
    if changes is None:
        raw.status = raw.status if not raw.ok else "FAILED: the change count could not be read"

    for r in rows[2:]:
        if r.status != "ok":
            continue
        if b.run(r, command_for(b, r.key), f"{r.key}.log") and changes is not None:
            b.verify(r, changes, lambda key=r.key: parquet_change_rows(work / f"out-{key}" / "public" / "bench"))
        drop(work / f"out-{r.key}", ignore_errors=True)
    if b.target is not None:
        info["pg_cdc"] = pgd.after_changes(b, selected, "cat-cdc.json", changes, make_row)
    return rows, info


def cdc_catalog(b: Bench) -> None:
    """``cat-cdc.json``: the change-capture table's catalog in cdc mode (made once)."""
    if (b.work / "cat-cdc.json").exists():
        return
    b.write_json("src-catalog.json", b.cluster.source_config("benchcdc"))
    b.sh(f"{b.olake} discover --config src-catalog.json > disc-cdc.json 2> discover-cdc.log")
    catalog = json.loads((b.work / "disc-cdc.json").read_text())["catalog"]
    for stream in catalog["streams"]:
        stream["sync_mode"] = "cdc"
    b.write_json("cat-cdc.json", catalog)


def command_for(b: Bench, key: str) -> str:
    """The olake command of change-capture path ``key`` (the same for its full load and its timed run)."""
    if key == "cdc-pipe":
        return (f"{b.olake} read --config src-{key}.json --catalog cat-cdc.json --state st-{key}.json "
                f"2>> {key}.log | {b.olake} write --config dst-{key}.json --state st-{key}.json "
                f"> /dev/null 2>> {key}.log")
    return (f"{b.olake} sync --source src-{key}.json --destination dst-{key}.json --catalog cat-cdc.json "
            f"--state st-{key}.json > /dev/null 2>> {key}.log")


# --- MongoDB full load ------------------------------------------------------------------------


def mongo_full_load(b: Bench, selected: set[str]) -> tuple[list[Row], dict]:
    """The MongoDB paths on one generated collection, each run ``--mongo-repeat`` times (median)."""
    import statistics

    from bench import bench_mongo

    args, work, n = b.args, b.work / "mongo", b.args.mongo_docs
    work.mkdir()
    server, uri = bench_mongo.start_secantus(work)
    try:
        say(f"generating {n:,} MongoDB documents ...")
        info = {"mongo_generate_s": bench_mongo.generate(uri, n, 5_000)}
        src = {"type": "mongodb", "uri": uri, "database": bench_mongo.DATABASE,
               "collections": [bench_mongo.COLLECTION], "chunk_documents": args.mongo_chunk_documents}
        (work / "src.json").write_text(json.dumps(src))
        subprocess.run(f"{b.olake} discover --config src.json > cat.json 2> discover.log", shell=True, cwd=work,
                       env=b.env, check=True)
        catalog = json.loads((work / "cat.json").read_text())["catalog"]
        rows = {key: Row(key, MONGO_PATHS[key], count=n) for key in MONGO_PATHS
                if key in selected or key == "mongo-raw"}
        runs: dict[str, list[Measurement]] = {key: [] for key in rows}
        for attempt in range(args.mongo_repeat):
            load = os.getloadavg()[0]
            info["mongo_load"] = f"{info['mongo_load']}, {load:.1f}" if "mongo_load" in info else f"{load:.1f}"
            say(f"MongoDB run {attempt + 1} of {args.mongo_repeat} (load average {load:.1f}) ...")
            seconds, scanned = bench_mongo.raw_scan(uri, 10_000)
            runs["mongo-raw"].append(_in_process(seconds, 0 if scanned == n else 1))
            if "mongo-plan" in rows:
                seconds, info["mongo_plan"] = bench_mongo.planning_seconds(uri, catalog, args.mongo_chunk_documents)
                runs["mongo-plan"].append(_in_process(seconds, 0))
            for key in ("mongo-sync", "mongo-pipe"):
                if key in rows:
                    runs[key].append(_mongo_run(b, work, key, attempt, n, rows[key]))
        for key, row in rows.items():
            done = sorted((m for m in runs[key] if m is not None and m.returncode == 0), key=lambda m: m.wall_s)
            if len(done) < len(runs[key]) and row.status == "ok":
                row.status = "FAILED: a run failed or moved another number of documents"
            if done:
                row.m = done[(len(done) - 1) // 2]
                row.m.wall_s = statistics.median(m.wall_s for m in done)
                row.runs = [m.wall_s for m in runs[key] if m is not None]
        return list(rows.values()), info
    finally:
        bench_mongo.stop_process(server)


def _in_process(seconds: float, returncode: int) -> Measurement:
    return Measurement(wall_s=seconds, returncode=returncode, tree_peak_mib=0.0, max_proc_mib=None, driver_mib=None)


def _mongo_run(b: Bench, work: Path, key: str, attempt: int, n: int, row: Row) -> Measurement | None:
    """One timed olake run of the collection into a fresh Parquet folder, its rows counted."""
    out, state = work / f"out-{key}-{attempt}", f"st-{key}-{attempt}.json"
    (work / f"dst-{key}-{attempt}.json").write_text(json.dumps({"type": "parquet", "path": str(out)}))
    if key == "mongo-sync":
        command = (f"{b.olake} sync --source src.json --destination dst-{key}-{attempt}.json --catalog cat.json "
                   f"--state {state} > /dev/null 2>> {key}.log")
    else:
        command = (f"{b.olake} read --config src.json --catalog cat.json --state {state} 2>> {key}.log | "
                   f"{b.olake} write --config dst-{key}-{attempt}.json --state {state} > /dev/null 2>> {key}.log")
    say(f"{key}: running ...")
    m = measured(command, work, b.env)
    if m.returncode != 0:
        row.status = f"FAILED: exit {m.returncode}: {last_error_line(work / f'{key}.log')}"
        return None
    from bench.bench_mongo import COLLECTION, DATABASE

    landed = parquet_rows(out / DATABASE / COLLECTION)
    drop(out, ignore_errors=True)
    say(f"{key}: {m.wall_s:.2f} s, {landed:,} rows")
    if landed != n:
        row.status = f"FAILED: {landed:,} rows landed, expected {n:,}"
        return None
    return m


# --- report -----------------------------------------------------------------------------------


def fmt(value: float | None, spec: str, unit: str = "") -> str:
    return "–" if value is None else f"{value:{spec}}{unit}"


def rss_cells(r: Row) -> list[str]:
    if r.m is None or not r.ok:
        return ["–", "–"]
    kind = f" ({r.m.max_proc_kind})" if r.m.max_proc_kind not in ("", "?") else ""
    return [fmt(r.m.tree_peak_mib, ",.0f"), fmt(r.m.max_proc_mib, ",.0f") + kind]


STEPS = {"mongo-plan"}  # rows timing one step of a path, shown as a share of the limit's wall
REFERENCES = {"pg-subscription"}  # a base row that is a peer to meet, not a limit


def one_table(parts: list[tuple[str, str, str, list[Row]]]) -> list[str]:
    """Every path of the run in one table: per part (its name, the unit it moves, the key of its limit,
    its rows), each path's time per item against its limit's, measured in the same run."""
    out = ["| part | path | moved | wall s | per second | × the limit's time per item | peak RSS, tree (MiB) | "
           "largest process (MiB) | check |", "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for part, unit, base_key, rows in parts:
        base = next((r for r in rows if r.key == base_key and r.ok), None)
        for r in rows:
            if r.ok:
                wall = r.m.wall_s
                per_item = wall / r.count if r.count else None  # the same work as the limit's: its wall
                base_per_item = base.m.wall_s / base.count if base and base.count else None
                if r.key in STEPS and base:  # a step of a path, not a path (MongoDB planning): its wall
                    ratio = f"{wall / base.m.wall_s:.2f}× the wall"
                else:
                    ratio = fmt(per_item / base_per_item if per_item and base_per_item else None, ".2f", "×")
                runs = f" (median of {', '.join(f'{w:.2f}' for w in r.runs)})" if len(r.runs) > 1 else ""
                moved = None if r.key in STEPS else r.count
                cells = [fmt(moved, ",") + (f" {unit}" if moved else ""), fmt(wall, ".2f") + runs,
                         fmt(moved / wall if moved else None, ",.0f"), ratio]
            else:
                cells = ["–", "–", "–", "–"]
            label = r.label + (f" **({'the reference' if base_key in REFERENCES else 'the limit'})**"
                               if r.key == base_key else "")
            out.append("| " + " | ".join([part, label] + cells + rss_cells(r) + [r.status.replace("|", "\\|")]) + " |")
    return out


def targets(full: list[Row], cdc: list[Row], args: argparse.Namespace, mongo: list[Row] = ()) -> list[str]:
    by = {r.key: r for r in [*full, *cdc, *mongo] if r.ok}

    def wall(key):
        return by[key].m.wall_s if key in by else None

    def rate(key):
        return by[key].count / by[key].m.wall_s if key in by and by[key].count else None

    def verdict(ok: bool | None) -> str:
        return "n/a (a path it needs did not run)" if ok is None else ("**met**" if ok else "**not met**")

    lines = ["| target | measured | verdict |", "|---|---|---|"]

    def add(target: str, measured_text: str, ok: bool | None) -> None:
        lines.append(f"| {target} | {measured_text} | {verdict(ok)} |")

    copy = wall("copy")
    sp, cx = wall("sync-parquet"), wall("dlt-connectorx")
    add("`olake sync` → Parquet ≤ 1.5× raw COPY wall (JVM start included)",
        f"{sp / copy:.2f}×" if sp and copy else "–", sp / copy <= 1.5 if sp and copy else None)
    add("`olake sync` → Parquet faster than dlt + connectorx",
        f"{sp:.2f} s vs {cx:.2f} s" if sp and cx else "–", sp < cx if sp and cx else None)
    pp, pa_rate = wall("pipe-parquet"), rate("dlt-pyarrow")
    add("`olake read \\| olake write` ≤ 3× raw COPY wall",
        f"{pp / copy:.2f}×" if pp and copy else "–", pp / copy <= 3 if pp and copy else None)
    add("`olake read \\| olake write` ≥ 3× the rows/s of dlt (pyarrow)",
        f"{rate('pipe-parquet') / pa_rate:.2f}×" if pp and pa_rate else "–",
        rate("pipe-parquet") / pa_rate >= 3 if pp and pa_rate else None)
    spark = wall("spark-jdbc")
    for key in ("sync-parquet", "sync-iceberg", "pipe-parquet"):
        w = wall(key)
        add(f"{FULL_PATHS[key]} ≥ 5× faster than Spark JDBC",
            f"Spark / olake wall {spark / w:.2f} ({spark:.2f} s / {w:.2f} s)" if w and spark else "–",
            spark / w >= 5 if w and spark else None)
    for key in ("cdc-pipe", "cdc-sync"):
        r, raw = rate(key), rate("cdc-raw")
        add(f"change capture {CDC_PATHS[key]} ≥ 200,000 changes/s",
            f"{r:,.0f}/s ({r / raw:.3f} of the raw slot read)" if r and raw else (f"{r:,.0f}/s" if r else "–"),
            r >= 200_000 if r else None)
    raw_scan = wall("mongo-raw")
    for key in ("mongo-sync", "mongo-pipe"):
        w = wall(key)
        add(f"MongoDB {MONGO_PATHS[key]} ≥ 0.7 of the raw scan's documents/s",
            f"{raw_scan / w:.2f}" if w and raw_scan else "–", raw_scan / w >= 0.7 if w and raw_scan else None)
    drivers = [(r.key, r.m.driver_mib) for r in [*full, *cdc, *mongo] if r.ok and r.m.driver_mib is not None]
    if drivers:
        key, peak = max(drivers, key=lambda kv: kv[1])
        add("driver peak RSS < 1 GiB (largest olake_cli process of any olake run)", f"{peak:,.0f} MiB ({key})",
            peak < 1024)
    else:
        add("driver peak RSS < 1 GiB", "–", None)
    return lines


def report(args, full, cdc, info, started_at, mach, mongo=()) -> str:
    command = ".venv/bin/python bench/run.py" + ("" if not sys.argv[1:] else " " + shlex.join(sys.argv[1:]))
    n, ch = args.rows, info.get("changes")
    out = [f"### Benchmark ({started_at:%Y-%m-%d %H:%M} UTC)", "",
           "```", f"$ {command}", "```", "",
           f"Machine: {mach['cores']} cores ({mach['cpu']}), {mach['memory']} memory, load average "
           f"{mach['load']} at the start (shared machine); PostgreSQL {info.get('server_version', '?')} "
           f"(throwaway cluster, fsync off); Spark `{args.spark_master}`; Python {platform.python_version()}.", ""]
    parts = []
    if full:
        out += [f"**PostgreSQL full load** into Parquet and Iceberg: {n:,} rows, {info.get('table_size', '?')} (bigint, "
                "int, numeric, text, timestamptz, date, boolean, double, uuid, jsonb); every run end to end from a "
                "cold process (Python and JVM start included); output row counts checked. Limit: the raw COPY.", ""]
        parts.append(("PostgreSQL full load", "rows", "copy", full))
    if cdc:
        out += [f"**PostgreSQL change capture**: {ch if ch is None else format(ch, ',')} row changes (40% updates, "
                f"40% inserts, 20% deletes, 1,000 per transaction) over a {args.cdc_rows:,}-row table after its full "
                "load; change rows (`_olake_op` c/u/d) in each output checked against the slot's count. Limit: the "
                "raw slot read.", ""]
        parts.append(("PostgreSQL change capture", "changes", "cdc-raw", cdc))
    if mongo:
        out += [f"**MongoDB full load**: {args.mongo_docs:,} documents (bench_mongo.py's shape: ObjectId `_id`, strings, "
                "int32, int64, double, Decimal128, two dates, a nested document, an array of strings, a boolean) on "
                f"SecantusDB in its own process; chunk_documents {args.mongo_chunk_documents:,}; each path run "
                f"{args.mongo_repeat} time(s), the median shown (load average at the start of each round: "
                f"{info.get('mongo_load', '?')}); plan: {info.get('mongo_plan', '?')}. Limit: the raw scan. (MongoDB "
                "change capture is measured by bench/bench_mongo.py, not in this run.)", ""]
        parts.append(("MongoDB full load", "documents", "mongo-raw", list(mongo)))
    if info.get("pg_full"):
        out += ["**PostgreSQL destination, full load**: the same table into a second throwaway cluster; every target "
                "table compared with the source (row count and an md5 over every row's text). Limit: the binary "
                "COPY pipe.", ""]
        parts.append(("PostgreSQL destination, full load", "rows", "pg-copy-pipe", info["pg_full"]))
    if info.get("pg_cdc"):
        out += ["**PostgreSQL destination, change apply**: the change-capture table's changes applied into the "
                "second cluster, each target compared with the source. Reference: PostgreSQL's own subscription "
                "(not a limit: the target to meet).", ""]
        parts.append(("PostgreSQL destination, change apply", "changes", "pg-subscription", info["pg_cdc"]))
    if parts:
        out += one_table(parts) + [""]
    out += ["Peak RSS: *tree* is the peak of the summed RSS of the measured command and all its descendants "
            "(both ends of a pipe, the JVM, Spark's Python workers), sampled from /proc every 0.2 s (pages shared "
            "by forked workers count once per process); *largest process* is the largest single-process peak, "
            "the larger of `ru_maxrss` from `/usr/bin/time -v` and each process's `VmHWM` read at every sample "
            "(`/usr/bin/time` alone misses the JVM, which pyspark never waits for), with the kind of process. "
            "The PostgreSQL server's memory is in neither, for any path.", ""]
    scale = "" if n == 10_000_000 and (ch or 0) >= 1_000_000 else \
        f" (stated for 10M rows and 1M changes; this run: {n:,} rows, {ch if ch is None else format(ch, ',')} changes)"
    out += [f"**Targets of issue [F6]**{scale}:", ""] + targets(full, cdc, args, mongo) + [""]
    out += pg_report(info)
    return "\n".join(out)


def pg_report(info: dict) -> list[str]:
    """The PostgreSQL destination's tables and the targets of issue [F8]."""
    full, cdc = info.get("pg_full") or [], info.get("pg_cdc") or []
    if not full and not cdc:
        return []
    out: list[str] = []
    by = {r.key: r for r in full + cdc if r.ok}
    lines = ["| target | measured | verdict |", "|---|---|---|"]
    if "sync-postgres" in by and "pg-copy-pipe" in by:
        ratio = by["sync-postgres"].m.wall_s / by["pg-copy-pipe"].m.wall_s
        lines.append(f"| `olake sync` → PostgreSQL within 1.5× the COPY pipe | {ratio:.2f}× | "
                     f"{'**met**' if ratio <= 1.5 else '**not met**'} |")
    if "pg-subscription" in by:
        theirs = by["pg-subscription"].count / by["pg-subscription"].m.wall_s
        for key in ("cdc-sync-postgres", "cdc-pipe-postgres"):
            if key in by:
                ours = by[key].count / by[key].m.wall_s
                lines.append(f"| change apply ({pgd.CDC_PATHS[key]}) at least as fast as PostgreSQL's own "
                             f"subscription | {ours:,.0f}/s vs {theirs:,.0f}/s | "
                             f"{'**met**' if ours >= theirs else '**not met**'} |")
    return out + ["**Targets of issue [F8]**:", ""] + lines + [""]


def main() -> None:
    all_paths = list(FULL_PATHS) + list(CDC_PATHS) + list(MONGO_PATHS) + list(pgd.FULL_PATHS) + list(pgd.CDC_PATHS)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="paths: " + ", ".join(all_paths))
    parser.add_argument("--rows", type=int, default=10_000_000, help="rows of the full-load table (0: skip it)")
    parser.add_argument("--changes", type=int, default=1_000_000, help="row changes to capture (0: skip)")
    parser.add_argument("--cdc-rows", type=int, default=100_000, help="rows of the change-capture table")
    parser.add_argument("--mongo-docs", type=int, default=200_000, help="MongoDB documents (0: skip MongoDB)")
    parser.add_argument("--mongo-repeat", type=int, default=1, help="runs of each MongoDB path (median shown)")
    parser.add_argument("--mongo-chunk-documents", type=int, default=250_000, help="olake's chunk_documents")
    parser.add_argument("--chunk-rows", type=int, default=None, help="olake's chunk_rows (default: olake's)")
    parser.add_argument("--spark-master", default="local[*]")
    parser.add_argument("--only", default="", help="comma-separated paths to run (baselines always run)")
    parser.add_argument("--skip-peers", action="store_true", help="leave out dlt and Spark JDBC")
    parser.add_argument("--markdown", type=Path, help="also write the Markdown report to this file")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, configs)")
    args = parser.parse_args()
    global KEEP
    KEEP = args.keep
    selected = set(all_paths)
    if args.only:
        wanted = {p.strip() for p in args.only.split(",") if p.strip()}
        unknown = wanted - selected
        if unknown:
            parser.error(f"unknown path(s) in --only: {', '.join(sorted(unknown))} (paths: {', '.join(all_paths)})")
        selected = wanted
    if args.skip_peers:
        selected -= PEER_PATHS
    run_full = args.rows > 0 and bool(selected & (set(FULL_PATHS) | set(pgd.FULL_PATHS)))
    run_cdc = args.changes > 0 and bool(selected & (set(CDC_PATHS) | set(pgd.CDC_PATHS)))
    run_mongo = args.mongo_docs > 0 and bool(selected & set(MONGO_PATHS) - {"mongo-raw"})

    started_at = dt.datetime.now(dt.UTC)
    mach = machine()
    say(f"{mach['cores']} cores, {mach['memory']}, load {mach['load']}; paths: {', '.join(sorted(selected))}")
    cluster = start_cluster()
    target = start_cluster() if selected & (set(pgd.FULL_PATHS) | set(pgd.CDC_PATHS)) else None
    work = Path(tempfile.mkdtemp(prefix="olake-bench-run-"))
    say(f"work folder {work} (logs of every run are there{'' if args.keep else '; removed at the end'})")
    full: list[Row] = []
    cdc: list[Row] = []
    mongo: list[Row] = []
    info: dict = {}
    try:
        b = Bench(args, cluster, work, target)
        if run_full:
            full, more = full_load(b, selected)
            info.update(more)
        if run_cdc:
            cdc, more = change_capture(b, selected)
            info.update(more)
        if run_mongo:
            mongo, more = mongo_full_load(b, selected)
            info.update(more)
        if "server_version" not in info:
            import psycopg

            with psycopg.connect(cluster.dsn()) as conn:
                info["server_version"] = conn.execute("SHOW server_version").fetchone()[0]
        text = report(args, full, cdc, info, started_at, mach, mongo)
        print(text)
        if args.markdown:
            args.markdown.write_text(text + "\n")
    finally:
        cluster.stop()
        if target is not None:
            target.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
