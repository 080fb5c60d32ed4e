"""Full loads beyond one machine: a real standalone master with two workers, and a Spark Connect server
on it (tests/support/spark_cluster.py, started once per run), compared value by value with the source.
Every worker runs a Python without olake (``bare_python``): the runs ship it (``olake pack``).

Multi-chunk loads go through ``read | write`` (the driver writes; on the cluster the chunks' lines come
back from the executors) and ``sync`` (the executors write the Parquet or Iceberg data files themselves),
on the cluster with ``--spark-master`` and through Connect with ``--spark-remote``, into object storage:
a bucket of moto's S3 server (Parquet at ``s3://bucket/lake``, an Iceberg warehouse at
``s3://bucket/warehouse`` with its SQLite catalog on the driver), which the executors reach on loopback
with no ``shared_path`` declared. A worker killed in the middle of a load loses its tasks; they run
again elsewhere and nothing is lost or doubled (into a local folder declared ``shared_path``). Each
way of running is covered once by default (PostgreSQL ``read | write`` into Iceberg on the master and
``sync`` into Parquet through Connect; MongoDB ``read | write`` into Parquet and ``sync`` into Iceberg
through Connect; the kill test's ``sync`` on the master); ``OLAKE_TEST_CLUSTER_ALL=1`` adds the other
pairings (about a minute more; so does ``OLAKE_TEST_ALL_PATHS=1``). ``read`` killed while its chunks sit in ``spark.spool`` (a bucket
prefix) is part of the fault harness's short schedule but lives here, as it needs this cluster (a local
master spools beside the driver and ignores ``spark.spool``): seeded kills (``OLAKE_FAULT_SEED``; one in
the short schedule, four with ``OLAKE_TEST_LONG=1``), then a rerun; every row arrives and no
spool object is left.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import psycopg
import pytest

from tests.support.cli import olake_cmd, olake_env, read_into_write, run_olake, write_json
from tests.support.kills import kill_run, start_run, wait_run
from tests.support.matrix import ALL_PATHS, LONG
from tests.support.mongo import connect
from tests.support.object_store import REGION, create_bucket, iceberg_bucket_rows, parquet_config, parquet_rows
from tests.support.spark_cluster import cluster_spark_config
from tests.support.verify import assert_table_matches, read_parquet

EVERY_PAIRING = pytest.mark.skipif(not ALL_PATHS and os.environ.get("OLAKE_TEST_CLUSTER_ALL") != "1",
                                   reason="set OLAKE_TEST_CLUSTER_ALL=1 for every pairing of command and Spark")
ROWS = 6000
CONNECT_STOP_S = 10.0  # Ctrl-C through Connect: olake gone (its jobs cancelled on the server) within this
_buckets = itertools.count()
SCAN = "COPY (SELECT %FROM \"public\".\"big\"%"
TABLE_SQL = f"""
CREATE TABLE items (id bigint PRIMARY KEY, price numeric(12,3), name text, seen timestamptz, tags text[],
                    doc jsonb, uid uuid, raw bytea);
INSERT INTO items SELECT g, g / 7.0, 'item ' || g || repeat('é', g % 5), '2024-01-01'::timestamptz + g * interval '1 min',
       ARRAY['a' || g, NULL, 'z'], jsonb_build_object('g', g, 'half', g / 2.0), md5(g::text)::uuid,
       decode(lpad(to_hex(g), 8, '0'), 'hex')
FROM generate_series(1, {ROWS}) g;
"""


def _source(pg_cluster, db: str, tmp_path: Path, archive: str | None, chunk_rows: int = 1500,
            spark: dict | None = None) -> str:
    """A source config of ``db`` with key-range chunks, its ``spark`` section for the cluster (plus ``spark``)."""
    config = pg_cluster.source_config(db, chunk_strategy="primary_key", chunk_rows=chunk_rows)
    config["spark"] = {**cluster_spark_config(archive), **(spark or {})}
    return write_json(tmp_path / "src.json", config)


def _catalog(src: str, tmp_path: Path, name: str = "items") -> tuple[str, dict]:
    """Discover ``src``: the catalog's path and the stream ``name``."""
    found = run_olake("discover", "--config", src)
    assert found.returncode == 0, found.stderr.decode()
    path = tmp_path / "cat.json"
    path.write_bytes(found.stdout)
    catalog = json.loads(found.stdout)["catalog"]
    return str(path), next(s for s in catalog["streams"] if s["name"] == name)


def _pipe(spark_args: list[str], src: str, cat: str, dst: str, state: Path):
    result = read_into_write(["--config", src, "--catalog", cat, "--state", str(state), *spark_args],
                             ["--config", dst, "--state", str(state)])
    assert result.read_code == 0 and result.write_code == 0, \
        (result.read_stderr.decode()[-3000:], result.write_stderr.decode()[-2000:])
    return result


def _sync(spark_args: list[str], src: str, cat: str, dst: str, state: Path) -> subprocess.CompletedProcess:
    result = subprocess.run(olake_cmd("sync", "--source", src, "--destination", dst, "--catalog", cat,
                                      "--state", str(state), *spark_args),
                            capture_output=True, env=olake_env(), timeout=900)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    return result


@pytest.fixture()
def items_db(pg_cluster, pg_db) -> str:
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
        conn.execute(TABLE_SQL)
    return pg_db


@pytest.fixture()
def bucket(moto_server) -> str:
    """A fresh bucket on the tests' S3 server."""
    return create_bucket(moto_server, f"cluster-{os.getpid()}-{next(_buckets)}")


def _lake(moto_server, bucket: str, tmp_path: Path) -> tuple[str, str]:
    """Configs of a Parquet destination at s3://bucket/lake and an Iceberg one whose warehouse is
    s3://bucket/warehouse (its SQLite catalog on the driver); neither declares ``shared_path``."""
    parquet = write_json(tmp_path / "lake.json", parquet_config(moto_server, bucket))
    iceberg = write_json(tmp_path / "ice.json", {"type": "iceberg", "catalog": _warehouse(moto_server, bucket, tmp_path)})
    return parquet, iceberg


def _warehouse(moto_server, bucket: str, tmp_path: Path) -> dict:
    from tests.support.object_store import ACCESS_KEY_ID, SECRET_ACCESS_KEY

    return {"type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}", "warehouse": f"s3://{bucket}/warehouse",
            "s3.endpoint": moto_server.endpoint, "s3.region": REGION, "s3.access-key-id": ACCESS_KEY_ID,
            "s3.secret-access-key": SECRET_ACCESS_KEY}


@pytest.fixture()
def bare_workers(bare_python, monkeypatch) -> str:
    """olake runs started by the test give their executors ``bare_python`` (classic Spark takes the
    driver's PYSPARK_PYTHON; the Connect server was started with it)."""
    monkeypatch.setenv("PYSPARK_PYTHON", bare_python)
    return bare_python


def _spark_args(cluster, via: str) -> list[str]:
    return ["--spark-master", cluster.master] if via == "master" else ["--spark-remote", cluster.remote]


@pytest.mark.parametrize("pipe_via, sync_via", [
    pytest.param("master", "remote", id="pipe-on-master-sync-through-connect"),
    pytest.param("remote", "master", id="pipe-through-connect-sync-on-master", marks=EVERY_PAIRING)])
def test_postgres_full_loads_on_the_cluster(pg_cluster, items_db, spark_connect, olake_archive, bare_workers,
                                            moto_server, bucket, tmp_path, pipe_via, sync_via):
    """read | write into Iceberg (the tasks leave their chunks' lines in the source's ``spark.spool``, a
    prefix of the bucket, for the driver to stream) and sync into Parquet (whose tasks write the chunk
    objects into the bucket from the executors; the driver writes the manifest), every chunk a task on
    the cluster."""
    from tests.support.object_store import ACCESS_KEY_ID, SECRET_ACCESS_KEY, keys

    spool = {"spool": f"s3://{bucket}/spool", "s3.endpoint": moto_server.endpoint, "s3.region": REGION,
             "s3.access-key-id": ACCESS_KEY_ID, "s3.secret-access-key": SECRET_ACCESS_KEY}
    src = _source(pg_cluster, items_db, tmp_path, olake_archive, spark=spool)
    cat, stream = _catalog(src, tmp_path)
    parquet, iceberg = _lake(moto_server, bucket, tmp_path)
    result = _pipe(_spark_args(spark_connect, pipe_via), src, cat, iceberg, tmp_path / "pipe-state.json")
    read_log = result.read_stderr.decode()
    assert "chunk 4/4" in read_log
    assert f"chunk lines come back through the spool s3://{bucket}/spool" in read_log, read_log[-2000:]
    assert [k for k in keys(moto_server, bucket, "spool") if not k.endswith("/")] == []
    assert SECRET_ACCESS_KEY not in read_log
    _sync(_spark_args(spark_connect, sync_via), src, cat, parquet, tmp_path / "sync-state.json")
    columns = list(stream["json_schema"]["properties"])
    with psycopg.connect(pg_cluster.dsn(items_db)) as conn:
        assert_table_matches(conn, "public", "items", stream["json_schema"],
                             iceberg_bucket_rows(_warehouse(moto_server, bucket, tmp_path), "public", "items")
                             .select(columns))
        assert_table_matches(conn, "public", "items", stream["json_schema"],
                             parquet_rows(moto_server, f"{bucket}/lake", "public", "items"))


@pytest.mark.parametrize("via", [pytest.param("remote", id="through-connect"),
                                 pytest.param("master", id="on-master", marks=EVERY_PAIRING)])
def test_mongodb_full_loads_on_the_cluster(mongo_server, mongo_db, spark_connect, olake_archive, bare_workers,
                                           moto_server, bucket, tmp_path, via):
    """A multi-chunk MongoDB load: read | write into Parquet, and sync into Iceberg (the executors write
    the data files into the bucket)."""
    from olake_cli.sources.mongodb.bson_types import documents_to_batch
    from tests.test_iceberg_e2e import _canon, _mongo_docs

    with connect(mongo_server.uri) as client:
        client[mongo_db].things.insert_many(_mongo_docs(2400))
    src = write_json(tmp_path / "src.json", {"type": "mongodb", "uri": mongo_server.uri, "database": mongo_db,
                                             "chunk_documents": 600, "spark": cluster_spark_config(olake_archive)})
    cat, stream = _catalog(src, tmp_path, "things")
    parquet, iceberg = _lake(moto_server, bucket, tmp_path)
    _pipe(_spark_args(spark_connect, via), src, cat, parquet, tmp_path / "pipe-state.json")
    _sync(_spark_args(spark_connect, via), src, cat, iceberg, tmp_path / "sync-state.json")
    with connect(mongo_server.uri) as client:
        source = list(client[mongo_db].things.find())
    want = {r["_id"]: _canon(r) for r in documents_to_batch(source, stream["json_schema"], "things").to_pylist()}
    for loaded in (parquet_rows(moto_server, f"{bucket}/lake", mongo_db, "things"),
                   iceberg_bucket_rows(_warehouse(moto_server, bucket, tmp_path), mongo_db, "things")):
        got = loaded.select(list(stream["json_schema"]["properties"])).to_pylist()
        assert len(got) == len(source)
        assert {r["_id"]: _canon(r) for r in got} == want


@pytest.mark.parametrize("via", ["remote", pytest.param("master", marks=EVERY_PAIRING)])
def test_workers_without_olake_and_no_archive_fail_with_one_line(pg_cluster, items_db, spark_connect, bare_workers,
                                                                 tmp_path, via):
    src = _source(pg_cluster, items_db, tmp_path, None)
    cat, _ = _catalog(src, tmp_path)
    result = subprocess.run(olake_cmd("read", "--config", src, "--catalog", cat, *_spark_args(spark_connect, via)),
                            capture_output=True, env=olake_env(), timeout=900)
    assert result.returncode != 0
    errors = [line for line in result.stderr.decode().splitlines() if line.startswith("olake: error")]
    assert len(errors) == 1 and "cannot import olake" in errors[0] and "olake pack" in errors[0], \
        result.stderr.decode()[-3000:]
    assert "Traceback" not in result.stderr.decode() and "Spark task was lost" not in result.stderr.decode()


def _succeeded_chunks(state: Path) -> int:
    try:
        streams = json.loads(state.read_text())["streams"]
    except (OSError, ValueError, KeyError):
        return 0
    return sum(c["status"] == "succeed" for s in streams for c in s["stream_state"].get("chunks") or [])


def test_ctrl_c_through_connect_stops_the_run_and_leaves_the_server_serving(pg_cluster, pg_db, spark_connect,
                                                                           olake_archive, bare_workers, moto_server,
                                                                           bucket, tmp_path):
    """Ctrl-C (SIGINT to the process group) in the middle of a sync through Spark Connect: the run ends
    within seconds with one line and status 130, the Connect server keeps running, and a rerun through
    it completes the load, equal to the source value by value."""
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
        conn.execute("CREATE TABLE slow (id int PRIMARY KEY, note text)")
        conn.execute("INSERT INTO slow SELECT g, repeat(md5(g::text), 4) FROM generate_series(1, 30000) g")
    src = _source(pg_cluster, pg_db, tmp_path, olake_archive, chunk_rows=1000)
    cat, stream = _catalog(src, tmp_path, "slow")
    parquet, _ = _lake(moto_server, bucket, tmp_path)
    state = tmp_path / "state.json"
    args = ["sync", "--source", src, "--destination", parquet, "--catalog", cat, "--state", str(state),
            "--max-parallel", "1", "--spark-remote", spark_connect.remote]
    run = subprocess.Popen(olake_cmd(*args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=olake_env(),
                           start_new_session=True)
    deadline = time.monotonic() + 300
    while _succeeded_chunks(state) < 2 and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert run.poll() is None, "the sync finished (or failed) before it could be interrupted: " + \
        run.stderr.read().decode()[-2000:]
    sent = time.monotonic()
    os.killpg(run.pid, signal.SIGINT)
    _, stderr = run.communicate(timeout=120)
    stopped_s = time.monotonic() - sent
    text = stderr.decode()
    assert run.returncode == 130, text[-3000:]
    assert stopped_s < CONNECT_STOP_S, f"the run took {stopped_s:.1f} s to stop"
    assert "Traceback" not in text, text[-3000:]
    assert text.strip().splitlines()[-1].startswith("olake: interrupted by SIGINT"), text[-2000:]
    assert 2 <= _succeeded_chunks(state) < 30, "the interrupt stopped the load part way"
    assert spark_connect.processes["connect"].poll() is None, "the Connect server must keep running"

    _sync(["--spark-remote", spark_connect.remote], src, cat, parquet, state)
    with psycopg.connect(pg_cluster.dsn(pg_db)) as conn:
        assert_table_matches(conn, "public", "slow", stream["json_schema"],
                             parquet_rows(moto_server, f"{bucket}/lake", "public", "slow"))


def test_a_worker_killed_mid_load_loses_nothing_and_doubles_nothing(pg_cluster, pg_db, spark_cluster, olake_archive,
                                                                   bare_workers, tmp_path, monkeypatch):
    """SIGKILL the worker (and its executors) whose task is scanning a chunk: Spark runs the lost task
    on the other worker; every row lands exactly once. The worker is started again for the tests after."""
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
        conn.execute("CREATE TABLE big (id int PRIMARY KEY, a text, b text)")
        conn.execute("INSERT INTO big SELECT g, md5(g::text), repeat(md5(g::text), 8) FROM generate_series(1, 240000) g")
    # six chunks, each scan long enough (40k rows) for the killer's 10 ms polls to catch one running
    src = _source(pg_cluster, pg_db, tmp_path, olake_archive, chunk_rows=40_000)
    found = run_olake("discover", "--config", src)
    (tmp_path / "cat.json").write_bytes(found.stdout)
    stream = json.loads(found.stdout)["catalog"]["streams"][0]
    log = tmp_path / "spark.log"
    monkeypatch.setenv("OLAKE_SPARK_LOG", str(log))
    lake = tmp_path / "lake"
    dst = write_json(tmp_path / "lake.json", {"type": "parquet", "path": str(lake), "shared_path": True})
    killer = WhenScanning(pg_cluster.dsn(pg_db), lambda port: _kill_worker_of(spark_cluster, port))
    killer.start()
    try:
        _sync(["--spark-master", spark_cluster.master], str(src), str(tmp_path / "cat.json"), dst,
              tmp_path / "state.json")
    finally:
        killer.stop.set()
        killer.join()
        for name in ("worker0", "worker1"):
            if name not in spark_cluster.processes:
                spark_cluster.start_worker(int(name[-1]))
    assert killer.done, "no worker was killed while it scanned a chunk"
    assert "Lost executor" in log.read_text()
    with psycopg.connect(pg_cluster.dsn(pg_db)) as conn:
        assert_table_matches(conn, "public", "big", stream["json_schema"], read_parquet(str(lake / "public" / "big")))


def _kill_worker_of(cluster, client_port: int) -> bool:
    """Kill the worker that started the process holding the connection from ``client_port``; False if none."""
    listing = subprocess.run(["ss", "-Htnp", f"sport = :{client_port}"], capture_output=True, text=True).stdout
    workers = {process.pid: name for name, process in cluster.processes.items() if name.startswith("worker")}
    for pid in map(int, re.findall(r"pid=(\d+)", listing)):
        while pid > 1 and pid not in workers:
            pid = _parent(pid)
        if pid in workers:
            cluster.kill(workers[pid])
            return True
    return False


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


class WhenScanning(threading.Thread):
    """Calls ``action(client_port)`` for a chunk scan of ``big`` seen running, until it returns True."""

    def __init__(self, dsn: str, action) -> None:
        super().__init__(daemon=True)
        self.dsn, self.action, self.done, self.stop = dsn, action, False, threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop.is_set():
                for (port,) in conn.execute("SELECT client_port FROM pg_stat_activity WHERE state = 'active' AND "
                                            "application_name = 'olake' AND query LIKE %s", (SCAN,)).fetchall():
                    if self.action(port):
                        self.done = True
                        return
                time.sleep(0.01)


SPOOL_KILLS = 4 if LONG else 1
SPOOL_SEED = int(os.environ.get("OLAKE_FAULT_SEED", "20261124"))


def _spooled(moto_server, bucket: str) -> list[str]:
    """The chunk objects under the bucket's spool prefix (not pyarrow's empty folder markers)."""
    from tests.support.object_store import keys

    return [k for k in keys(moto_server, bucket, "spool/") if not k.endswith("/")]


def _kill_while_spooled(procs, moto_server, bucket: str, rng: random.Random) -> list[str]:
    """SIGKILL the reader (or reader and writer) a seeded number of polls after chunk objects first sit in
    the spool; the objects seen at that moment ([] if the read ended first)."""
    polls, seen = rng.randint(0, 3), []
    while procs[0].poll() is None:
        seen = _spooled(moto_server, bucket)
        if seen:
            if polls == 0:
                kill_run(procs if rng.random() < 0.5 else procs[:1])
                return seen
            polls -= 1
        time.sleep(0.05)
    return []


def test_read_killed_while_chunks_are_spooled_loses_nothing_and_leaves_no_spool_object(
        pg_cluster, items_db, spark_cluster, olake_archive, bare_workers, moto_server, bucket, tmp_path):
    """``read | write`` on the cluster, the tasks spooling their chunks' lines into ``s3://bucket/spool``,
    SIGKILLed while chunk objects sit there (the tasks wrote them, the driver has not streamed and
    deleted them yet); the rerun from the state file delivers every row (the destination equals the
    source value by value) and leaves no object in the spool, the killed run's included."""
    from tests.support.object_store import ACCESS_KEY_ID, SECRET_ACCESS_KEY

    rng = random.Random(f"{SPOOL_SEED}-spool")
    spool = {"spool": f"s3://{bucket}/spool", "s3.endpoint": moto_server.endpoint, "s3.region": REGION,
             "s3.access-key-id": ACCESS_KEY_ID, "s3.secret-access-key": SECRET_ACCESS_KEY}
    src = _source(pg_cluster, items_db, tmp_path, olake_archive, chunk_rows=500, spark=spool)
    cat, stream = _catalog(src, tmp_path)
    dst = write_json(tmp_path / "lake.json", {"type": "parquet", "path": str(tmp_path / "lake")})
    files, log = (src, dst, cat, str(tmp_path / "state.json")), tmp_path / "runs.log"
    master = ("--spark-master", spark_cluster.master)
    kills, runs, left = 0, 0, []
    while kills < SPOOL_KILLS and runs < SPOOL_KILLS * 3:
        runs += 1
        procs = start_run("pipe", files, olake_env(), log, master)
        seen = _kill_while_spooled(procs, moto_server, bucket, rng)
        codes = wait_run(procs, stop_at_crash_point=False)
        if -signal.SIGKILL in codes and seen:
            kills += 1
            left = _spooled(moto_server, bucket)
        print(f"spool kill run {runs}: exit {codes}, {len(seen)} chunk object(s) spooled at the kill, "
              f"{len(_spooled(moto_server, bucket))} left; seed {SPOOL_SEED}")
    assert kills == SPOOL_KILLS, f"only {kills} kills landed while chunks were spooled in {runs} runs"
    codes = wait_run(start_run("pipe", files, olake_env(), log, master), stop_at_crash_point=False)
    assert codes == [0, 0], log.read_text()[-3000:]
    with psycopg.connect(pg_cluster.dsn(items_db)) as conn:
        assert_table_matches(conn, "public", "items", stream["json_schema"],
                             read_parquet(str(tmp_path / "lake" / "public" / "items")))
    assert _spooled(moto_server, bucket) == [], f"the spool keeps objects (after the last kill: {left})"
