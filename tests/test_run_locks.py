"""Overlapping runs on one state file or one destination: the second fails at once naming the first.

Real ``olake`` processes: a holder is started and left waiting (``write`` on its open stdin, ``read``
on a full stdout pipe), then second runs (``read``, ``write``, ``sync``) must exit non-zero with one
line naming the holder's pid, host, start time and command, and without touching what it holds. A
holder killed with SIGKILL leaves its lock file behind, and that file must not block the next run.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from pathlib import Path

import orjson
import psycopg
import pytest

from tests.support.cli import messages, olake_cmd, olake_env, run_olake, with_stream_ends, write_json

STREAM = "items"


@pytest.fixture()
def setup(pg_cluster, pg_db, tmp_path) -> dict:
    """A source table, its catalog (incremental: a pass needs no Spark), src/dst configs, a state file."""
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
        conn.execute(f"""CREATE TABLE {STREAM} (id int PRIMARY KEY, updated_at timestamptz NOT NULL, v text);
                         INSERT INTO {STREAM} SELECT g, '2024-06-01 10:00+00', repeat('v', 200)
                         FROM generate_series(1, 5000) g;""")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(pg_db))
    found = run_olake("discover", "--config", src)
    assert found.returncode == 0, found.stderr.decode()
    catalog = messages(found.stdout)[0]["catalog"]
    stream = next(s for s in catalog["streams"] if s["name"] == STREAM)
    stream.update(sync_mode="incremental", cursor_field=["updated_at"])
    catalog = {"streams": [stream]}
    state = tmp_path / "st.json"
    write_json(state, {"level": "global", "version": "v1", "streams": [{
        "sync_type": "incremental", "stream_name": STREAM, "stream_namespace": "public",
        "stream_state": {"cursor_field": "2024-01-01 00:00:00+00"}}]})
    return {"src": src, "catalog": catalog, "cat": write_json(tmp_path / "cat.json", catalog), "state": state,
            "password": pg_cluster.password}


def _catalog_line(catalog: dict) -> bytes:
    return orjson.dumps({"type": "CATALOG", "catalog": catalog}) + b"\n"


def _refused(result: subprocess.CompletedProcess, holder: subprocess.Popen, command: str, what: str,
             password: str) -> None:
    """A second run's error contract: one line naming what is locked and the holder, a TRACE, nothing else."""
    stderr = result.stderr.decode()
    assert result.returncode != 0, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("olake: error: "), stderr
    for needle in (what, "is in use by another olake run", f"pid {holder.pid}", f"on host {socket.gethostname()}",
                   "started 20", command):
        assert needle in lines[0], (needle, lines[0])
    assert [(m["type"], m["trace"]["error"]["failure_type"]) for m in messages(result.stdout)] == [
        ("TRACE", "transient_error")]
    assert password not in stderr + result.stdout.decode()


def _stop(process: subprocess.Popen) -> None:
    os.kill(process.pid, signal.SIGKILL)
    process.communicate(timeout=60)


@pytest.mark.parametrize("destination", ["parquet", "iceberg"])
def test_a_second_run_on_a_held_state_file_or_destination_fails_at_once(setup, tmp_path, destination):
    dst_config = {"type": destination, "path": str(tmp_path / "lake")}
    dst = write_json(tmp_path / "dst.json", dst_config)
    state, password = setup["state"], setup["password"]
    holder = subprocess.Popen(olake_cmd("write", "--config", dst, "--state", str(state)), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=olake_env())
    try:
        committed = {"type": "STATE", "state": json.loads(state.read_text())}
        holder.stdin.write(_catalog_line(setup["catalog"]) + orjson.dumps(committed) + b"\n")
        holder.stdin.flush()
        assert json.loads(holder.stdout.readline()) == committed  # committed: the holder writes the destination
        before = state.read_bytes()

        sync = run_olake("sync", "--source", setup["src"], "--destination", dst, "--catalog", setup["cat"],
                         "--state", str(state))  # the same state file
        _refused(sync, holder, "olake write", f"state file '{state}'", password)
        other_state = tmp_path / "other.json"  # another state file, the same destination
        for second in (run_olake("sync", "--source", setup["src"], "--destination", dst, "--catalog", setup["cat"],
                                 "--state", str(other_state)),
                       run_olake("write", "--config", dst, "--state", str(other_state),
                                 stdin=with_stream_ends(_catalog_line(setup["catalog"])))):
            _refused(second, holder, "olake write", f"the destination of {dst}", password)
        assert state.read_bytes() == before and not other_state.exists()
        assert holder.poll() is None, "the holder was disturbed"
    finally:
        _stop(holder)

    # the killed holder's lock files stay behind and block nothing: the rerun completes
    assert (tmp_path / "lake" / ".olake.lock").exists() and Path(f"{state}.write.lock").exists()
    rerun = run_olake("sync", "--source", setup["src"], "--destination", dst, "--catalog", setup["cat"],
                      "--state", str(state))
    assert rerun.returncode == 0, rerun.stderr.decode()[-2000:]
    assert json.loads(state.read_text())["streams"][0]["stream_state"]["cursor_field"] == "2024-06-01 10:00:00+00"


def test_a_second_read_of_a_held_state_file_fails_and_read_write_pairs_share_it(setup, tmp_path):
    state, password = setup["state"], setup["password"]
    read_args = ["read", "--config", setup["src"], "--catalog", setup["cat"], "--state", str(state)]
    holder = subprocess.Popen(olake_cmd(*read_args), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              env=olake_env())  # 5000 rows of 200 bytes: it waits on the full stdout pipe
    try:
        first = holder.stdout.readline()  # its CATALOG: the state is read, the source open
        assert first.startswith(b'{"type":"CATALOG"'), first
        _refused(run_olake(*read_args), holder, "olake read", f"state file '{state}'", password)
        dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "lake")})
        sync = run_olake("sync", "--source", setup["src"], "--destination", dst, "--catalog", setup["cat"],
                         "--state", str(state))
        _refused(sync, holder, "olake read", f"state file '{state}'", password)
        assert not (tmp_path / "lake").exists()
        # its own writer is not kept out: read --state S | write --state S
        writer = subprocess.run(olake_cmd("write", "--config", dst, "--state", str(state)),
                                input=first + holder.stdout.read(), capture_output=True, env=olake_env(), timeout=300)
        assert holder.wait(timeout=60) == 0
        assert writer.returncode == 0, writer.stderr.decode()[-2000:]
    finally:
        if holder.poll() is None:
            _stop(holder)
