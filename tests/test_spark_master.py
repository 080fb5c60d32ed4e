"""A wrong Spark master fails at once with one line, not after a minute of retries and a stack."""

from __future__ import annotations

import socket
import subprocess
import time

import psycopg
import pytest

from tests.support.cli import olake_cmd, olake_env, run_olake, write_json


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("master, expected", [
    ("spark://127.0.0.1:{closed_port}", "cannot reach the Spark master"),
    ("sparc://cluster:7077", "is not a Spark master URL"),
])
def test_wrong_spark_master_fails_fast_with_one_line(pg_cluster, pg_db, tmp_path, master, expected):
    master = master.format(closed_port=_closed_port())  # at run time: test ids stay the same in every worker
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(pg_db))
    (tmp_path / "cat.json").write_text('{"streams": []}')
    started = time.monotonic()
    result = run_olake("read", "--config", src, "--catalog", str(tmp_path / "cat.json"), "--spark-master", master)
    assert time.monotonic() - started < 30
    assert result.returncode != 0
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and expected in lines[0] and "Traceback" not in lines[0], lines


def test_sync_with_a_cluster_master_refuses_a_local_path(pg_cluster, pg_db, tmp_path):
    with socket.socket() as listener:  # something answers at the master's address
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        src = write_json(tmp_path / "src.json", pg_cluster.source_config(pg_db))
        dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "lake")})
        (tmp_path / "cat.json").write_text('{"streams": []}')
        result = run_olake("sync", "--source", src, "--destination", dst, "--catalog", str(tmp_path / "cat.json"),
                           "--spark-master", f"spark://127.0.0.1:{port}")
    assert result.returncode != 0
    assert b'set "shared_path": true' in result.stderr


def test_spark_output_goes_to_its_log_and_a_failed_start_names_it(pg_cluster, pg_db, tmp_path):
    """The JVM's own lines never reach stderr; when it cannot start, the one error line names the log."""
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
        conn.execute("INSERT INTO t VALUES (1)")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(pg_db, in_process_rows=0))  # Spark starts
    catalog = tmp_path / "cat.json"
    catalog.write_bytes(run_olake("discover", "--config", src).stdout)
    log = tmp_path / "logs" / "spark.log"
    env = {**olake_env(), "OLAKE_SPARK_LOG": str(log)}

    ok = subprocess.run(olake_cmd("read", "--config", src, "--catalog", str(catalog)), capture_output=True,
                        env=env, timeout=600)
    assert ok.returncode == 0, ok.stderr.decode()
    assert [line for line in ok.stderr.decode().splitlines() if not line.startswith("olake: ")] == []
    assert "starts Spark, master local[2]" in log.read_text() and "Using incubator modules" in log.read_text()

    env["OLAKE_SPARK_JAVA_OPTIONS"] = "-Xmx1m"  # spark-submit refuses to start the JVM with it
    failed = subprocess.run(olake_cmd("read", "--config", src, "--catalog", str(catalog)), capture_output=True,
                            env=env, timeout=600)
    assert failed.returncode != 0
    [line] = [line for line in failed.stderr.decode().splitlines()
              if not line.startswith(("olake: no --state", "olake: public.t", "olake: summary: public.t: incomplete",
                                      "olake: full loads of about 1 row(s) in all, more than in_process_rows (0)"))]
    assert line.startswith("olake: error: Spark did not start") and line.endswith(f"see {log} for why"), line
    assert "Not allowed to specify max heap" in log.read_text()


@pytest.mark.parametrize("remote, expected", [
    ("sc://127.0.0.1:{closed_port}", "cannot reach the Spark Connect server"),
    ("http://127.0.0.1:15002", "is not a Spark Connect URL"),
])
def test_dead_spark_connect_url_fails_fast_with_one_line(pg_cluster, pg_db, tmp_path, remote, expected):
    remote = remote.format(closed_port=_closed_port())
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(pg_db))
    (tmp_path / "cat.json").write_text('{"streams": []}')
    for env in ([], ["OLAKE_SPARK_REMOTE"]):
        args = ["--spark-remote", remote] if not env else []
        process_env = {**olake_env(), "OLAKE_SPARK_REMOTE": remote} if env else olake_env()
        result = subprocess.run(olake_cmd("read", "--config", src, "--catalog", str(tmp_path / "cat.json"), *args),
                                capture_output=True, env=process_env, timeout=120)
        assert result.returncode != 0
        lines = result.stderr.decode().strip().splitlines()
        assert len(lines) == 1 and expected in lines[0] and "Traceback" not in lines[0], lines
