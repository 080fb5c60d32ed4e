"""The warm engine: ``olake spark-server start`` leaves a Spark Connect server running on this machine, a
``sync`` whose chunks are that server's tasks writes a local Parquet path (its tasks see this disk) and
equals the source value by value, and ``stop`` ends it; bad input gets one line."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import psycopg

from olake_cli.core.catalog import parse_catalog
from tests.support.cli import messages, olake_env, run_olake, write_json
from tests.support.spark_cluster import free_port
from tests.support.verify import assert_table_matches, read_parquet


def _table(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("""CREATE TABLE orders (id int PRIMARY KEY, label text, amount numeric(12,2), at timestamptz,
                                             tags text[], doc jsonb);
                        INSERT INTO orders SELECT g, CASE WHEN g % 7 = 0 THEN NULL ELSE 'order ' || g END,
                               g * 1.25, '2024-01-01'::timestamptz + g * '1 minute'::interval,
                               ARRAY['a' || g, 'b'], jsonb_build_object('n', g)
                        FROM generate_series(1, 900) g;
                        ANALYZE orders;""")


def test_a_sync_runs_its_chunks_on_the_warm_server_and_stop_ends_it(pg_cluster, pg_db, tmp_path):
    _table(pg_cluster.dsn(pg_db))
    env = {**olake_env(), "XDG_STATE_HOME": str(tmp_path / "xdg")}
    port = free_port()
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(pg_db, chunk_rows=300, in_process_rows=0))
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "lake")})
    discovered = run_olake("discover", "--config", src, env=env)
    catalog = write_json(tmp_path / "cat.json", messages(discovered.stdout)[-1])
    started = run_olake("spark-server", "start", "--port", str(port), "--master", "local[2]", "--memory", "1g",
                        env=env, timeout=300)
    record_file = tmp_path / "xdg" / "olake" / "spark-server.json"
    try:
        assert started.returncode == 0, started.stderr.decode()
        remote = f"sc://127.0.0.1:{port}"
        assert f"Spark Connect server up at {remote}" in started.stderr.decode()
        assert started.stdout == b""
        again = run_olake("spark-server", "start", "--port", str(port), env=env)
        assert again.returncode == 0 and "already runs" in again.stderr.decode()
        assert run_olake("spark-server", "status", env=env).returncode == 0

        synced = run_olake("sync", "--source", src, "--destination", dst, "--catalog", catalog,
                           "--state", str(tmp_path / "st.json"), "--spark-remote", remote, env=env)
        assert synced.returncode == 0, synced.stderr.decode()
        assert f"full-load chunks run as Spark tasks on {remote}, 2 at a time" in synced.stderr.decode()
        stream = parse_catalog(json.loads(Path(catalog).read_text())).streams[0]
        with psycopg.connect(pg_cluster.dsn(pg_db)) as conn:
            assert_table_matches(conn, "public", "orders", stream.json_schema,
                                 read_parquet(str(tmp_path / "lake" / "public" / "orders")))
        read = run_olake("read", "--config", src, "--catalog", catalog, "--spark-remote", remote, env=env)
        assert read.returncode == 0, read.stderr.decode()
        records = [m["record"]["data"] for m in messages(read.stdout) if m["type"] == "RECORD"]
        assert sorted(r["id"] for r in records) == list(range(1, 901))  # spooled beside this process by its tasks
        pid = json.loads(record_file.read_text())["pid"]
    finally:
        stopped = run_olake("spark-server", "stop", env=env)
        if record_file.exists():  # the test failed before stop could: end the server anyway
            os.killpg(json.loads(record_file.read_text())["pid"], signal.SIGKILL)
    assert stopped.returncode == 0 and f"stopped the Spark Connect server at {remote}" in stopped.stderr.decode()
    assert not record_file.exists()
    try:
        os.kill(pid, 0)
        alive = True
    except ProcessLookupError:
        alive = False
    assert not alive
    status = run_olake("spark-server", "status", env=env)
    assert status.returncode == 3 and "no Spark Connect server" in status.stderr.decode()
    again = run_olake("spark-server", "stop", env=env)
    assert again.returncode == 0 and "no Spark Connect server" in again.stderr.decode()


def test_a_taken_port_is_refused_with_one_line(pg_cluster, tmp_path):
    env = {**olake_env(), "XDG_STATE_HOME": str(tmp_path / "xdg")}
    result = run_olake("spark-server", "start", "--port", str(pg_cluster.port), env=env)
    lines = result.stderr.decode().strip().splitlines()
    assert result.returncode != 0 and len(lines) == 1, lines
    assert f"port {pg_cluster.port} is taken by another process" in lines[0]
    bad = run_olake("spark-server", "start", "--master", "nonsense", env=env)
    assert bad.returncode != 0 and "is not a Spark master URL" in bad.stderr.decode()
