"""Faults injected for real during a full load: the database restarted in the middle of a chunk, and
a Spark Python worker killed in the middle of a chunk.

A restart ends the transaction that exported the load's snapshot, so no chunk can be read under it
again: the run must stop with one line and a transient_error TRACE, keep a valid state naming only
committed chunks, and the rerun must finish the copy exactly. A killed worker loses one task: the
chunk is read again and the run completes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time

import psycopg
import pytest

from tests.support.cli import read_into_write, run_olake, trace_errors, write_json
from tests.support.pgcluster import create_database, start_cluster
from tests.support.verify import assert_table_matches, read_parquet

ROWS = 200_000
SCAN = "COPY (SELECT %FROM \"public\".\"big\"%"


class WhenScanning(threading.Thread):
    """Runs ``action`` while a chunk scan of ``big`` is seen running, until it reports it acted."""

    def __init__(self, dsn: str, action) -> None:
        super().__init__(daemon=True)
        self.dsn, self.action, self.done, self.stop = dsn, action, False, threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop.is_set():
                if conn.execute("SELECT 1 FROM pg_stat_activity WHERE state = 'active' AND "
                                "application_name = 'olake' AND query LIKE %s", (SCAN,)).fetchone() \
                        and self.action() is not False:
                    self.done = True
                    return
                time.sleep(0.01)


def _load(cluster, tmp_path, action, **source) -> tuple:
    dsn = cluster.dsn("faults")
    src = write_json(tmp_path / "src.json", cluster.source_config("faults", chunk_rows=50_000, **source))
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "lake")})
    disc = run_olake("discover", "--config", src)
    assert disc.returncode == 0, disc.stderr
    (tmp_path / "cat.json").write_bytes(disc.stdout)
    state = str(tmp_path / "state.json")
    watcher = WhenScanning(dsn, action)
    watcher.start()
    try:
        first = read_into_write(["--config", src, "--catalog", str(tmp_path / "cat.json"), "--state", state],
                                ["--config", dst, "--state", state])
    finally:
        watcher.stop.set()
        watcher.join()
    assert watcher.done, "no chunk scan was caught running"
    return src, dst, state, json.loads(disc.stdout)["catalog"]["streams"][0], first


@pytest.fixture()
def own_cluster():
    cluster = start_cluster()
    try:
        create_database(cluster, "faults")
        with psycopg.connect(cluster.dsn("faults"), autocommit=True) as conn:
            conn.execute("CREATE TABLE big (id int PRIMARY KEY, a text, b text)")
            conn.execute(f"INSERT INTO big SELECT g, md5(g::text), repeat(md5(g::text), 8) "
                         f"FROM generate_series(1, {ROWS}) g")
        yield cluster
    finally:
        cluster.stop()


def _rerun_and_compare(cluster, tmp_path, src, dst, state, stream) -> None:
    rerun = read_into_write(["--config", src, "--catalog", str(tmp_path / "cat.json"), "--state", state],
                            ["--config", dst, "--state", state])
    assert rerun.read_code == 0 and rerun.write_code == 0, rerun.read_stderr.decode()[-2000:]
    with psycopg.connect(cluster.dsn("faults")) as conn:
        assert_table_matches(conn, "public", "big", stream["json_schema"],
                             read_parquet(str(tmp_path / "lake" / "public" / "big")))


def test_database_restarted_mid_chunk_stops_cleanly_and_the_rerun_completes(own_cluster, tmp_path):
    def restart() -> None:
        log = os.path.join(os.path.dirname(own_cluster.datadir), "log")  # not our pipes: pg_ctl would hang
        own_cluster._run([os.path.join(own_cluster.bin_dir, "pg_ctl"), "-D", own_cluster.datadir, "-l", log,
                          "-m", "fast", "-w", "restart"])

    src, dst, state, stream, first = _load(own_cluster, tmp_path, restart)
    errors = [line for line in first.read_stderr.decode().splitlines() if line.startswith("olake: error")]
    assert first.read_code != 0 and len(errors) == 1, first.read_stderr.decode()[-3000:]
    # the chunk caught mid-read is retried: it finds the snapshot gone, or (a slow restart) the server
    # still down after its retries
    assert ("snapshot is gone" in errors[0] and "run again" in errors[0]) or "shutting down" in errors[0] \
        or "Failed to connect" in errors[0], errors
    assert "Traceback" not in first.read_stderr.decode()
    traces = trace_errors(first.write_stdout)
    assert traces and traces[-1]["trace"]["error"]["failure_type"] == "transient_error", (traces, errors)
    saved = json.loads(open(state).read())  # valid, and names only what write committed
    assert all(c["status"] in ("succeed", "pending", "failed")
               for s in saved["streams"] for c in s["stream_state"].get("chunks", []))
    _rerun_and_compare(own_cluster, tmp_path, src, dst, state, stream)


def test_killed_spark_worker_mid_chunk_is_retried(own_cluster, tmp_path):
    mark = f"worker-kill-{os.getpid()}-{time.monotonic_ns()}"
    os.environ["OLAKE_TEST_RUN_MARK"] = mark  # inherited by this run's JVM and Spark workers only

    def kill_a_worker() -> bool:
        daemons = [pid for pid in subprocess.run(["pgrep", "-f", "pyspark.daemon|pyspark/daemon.py"],
                                                 capture_output=True, text=True).stdout.split() if _marked(pid, mark)]
        children = subprocess.run(["pgrep", "-P", ",".join(daemons)], capture_output=True,
                                  text=True).stdout.split() if daemons else []
        for pid in children[:1]:
            os.kill(int(pid), signal.SIGKILL)
            return True
        return False  # no worker of this run yet: look again

    try:
        src, dst, state, stream, first = _load(own_cluster, tmp_path, kill_a_worker, in_process_rows=0)  # Spark
    finally:
        del os.environ["OLAKE_TEST_RUN_MARK"]
    assert first.read_code == 0 and first.write_code == 0, first.read_stderr.decode()[-3000:]
    lost = [line for line in first.read_stderr.decode().splitlines() if "Spark task was lost" in line]
    assert len(lost) == 1 and "running its chunk again (attempt 2)" in lost[0], first.read_stderr.decode()[-3000:]
    assert "Traceback" not in first.read_stderr.decode() and "at py4j" not in first.read_stderr.decode()
    with psycopg.connect(own_cluster.dsn("faults")) as conn:
        assert_table_matches(conn, "public", "big", stream["json_schema"],
                             read_parquet(str(tmp_path / "lake" / "public" / "big")))


def _marked(pid: str, mark: str) -> bool:
    """Whether process ``pid`` carries ``mark`` in its environment."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return f"OLAKE_TEST_RUN_MARK={mark}".encode() in fh.read()
    except OSError:
        return False
