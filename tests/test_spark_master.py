"""A wrong Spark master fails at once with one line, not after a minute of retries and a stack."""

from __future__ import annotations

import socket
import time

import pytest

from tests.support.cli import run_olake, write_json


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("master, expected", [
    (f"spark://127.0.0.1:{_closed_port()}", "cannot reach the Spark master"),
    ("sparc://cluster:7077", "is not a Spark master URL"),
])
def test_wrong_spark_master_fails_fast_with_one_line(pg_cluster, pg_db, tmp_path, master, expected):
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
