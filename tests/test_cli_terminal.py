"""What a user sees at a terminal: ``read | head`` ends quietly, ``write`` on a terminal says what it waits for."""

from __future__ import annotations

import os
import pty
import subprocess

import psycopg

from tests.support.cli import olake_cmd, olake_env, run_olake, write_json


def test_read_into_head_ends_quietly(pg_cluster, pg_db, tmp_path):
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, note text)")
        conn.execute("INSERT INTO t SELECT g, repeat('x', 200) FROM generate_series(1, 200000) g")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(pg_db))
    disc = run_olake("discover", "--config", src)
    assert disc.returncode == 0, disc.stderr
    (tmp_path / "cat.json").write_bytes(disc.stdout)
    reader = subprocess.Popen(olake_cmd("read", "--config", src, "--catalog", str(tmp_path / "cat.json")),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=olake_env())
    first = reader.stdout.readline()  # what `head -n 1` does, then it exits
    reader.stdout.close()
    _, stderr = reader.communicate(timeout=300)
    assert first.startswith(b'{"type":"CATALOG"')
    assert reader.returncode == 0, stderr.decode()[-2000:]
    assert b"error" not in stderr and b"Traceback" not in stderr and b"Exception" not in stderr, stderr.decode()


def test_write_on_a_terminal_says_what_it_waits_for(tmp_path):
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "lake")})
    master, slave = pty.openpty()
    writer = subprocess.Popen(olake_cmd("write", "--config", dst), stdin=slave, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=olake_env())
    os.close(slave)
    os.write(master, b"\x04")  # Ctrl-D: end of input
    _, stderr = writer.communicate(timeout=60)
    os.close(master)
    assert b"reading protocol messages from stdin" in stderr
    assert writer.returncode != 0 and b"the input ended before its CATALOG message" in stderr, stderr.decode()
