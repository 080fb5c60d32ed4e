"""SIGINT (Ctrl-C at a terminal reaches the whole process group) and SIGTERM stop a run within seconds
with one line, status 128 + signal, a state that resumes, and a destination equal to the source after
the rerun."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import psycopg
import pytest

from tests.support.cli import olake_cmd, olake_env, run_olake, write_json
from tests.support.verify import assert_table_matches, read_parquet

ROWS = 600_000
CHUNK = 10_000


def _succeeded_chunks(state_path) -> int:
    try:
        streams = json.loads(state_path.read_text())["streams"]
    except (OSError, ValueError):
        return 0
    return sum(c["status"] == "succeed" for s in streams for c in s["stream_state"].get("chunks") or [])


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_stops_sync_cleanly_and_the_rerun_completes(pg_cluster, pg_db, tmp_path, signum):
    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, note text)")
        conn.execute(f"INSERT INTO t SELECT g, 'row ' || g FROM generate_series(1, {ROWS}) g")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(pg_db, chunk_strategy="primary_key",
                                                                      chunk_rows=CHUNK))
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "lake")})
    disc = run_olake("discover", "--config", src)
    assert disc.returncode == 0, disc.stderr
    (tmp_path / "cat.json").write_bytes(disc.stdout)
    state = tmp_path / "st.json"
    args = ["sync", "--source", src, "--destination", dst, "--catalog", str(tmp_path / "cat.json"),
            "--state", str(state), "--max-parallel", "1"]
    run = subprocess.Popen(olake_cmd(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=olake_env(),
                           start_new_session=True)
    deadline = time.monotonic() + 240
    while _succeeded_chunks(state) < 2 and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert run.poll() is None, "the sync finished before it could be interrupted"
    sent = time.monotonic()
    if signum == signal.SIGINT:
        os.killpg(run.pid, signum)  # what Ctrl-C does: every process of the terminal's group gets it
    else:
        run.send_signal(signum)
    _, stderr = run.communicate(timeout=120)
    assert time.monotonic() - sent < 30, "the run took too long to stop"
    assert run.returncode == 128 + signum, stderr.decode()[-2000:]
    text = stderr.decode()
    assert "Traceback" not in text and "ERROR" not in text, text[-3000:]
    assert text.strip().splitlines()[-1].startswith(f"olake: interrupted by {signal.Signals(signum).name}")
    done = _succeeded_chunks(state)
    assert 2 <= done < ROWS // CHUNK, "the signal stopped the load part way; the state names what was committed"

    rerun = run_olake(*args)
    assert rerun.returncode == 0, rerun.stderr.decode()[-2000:]
    stream = next(s for s in json.loads(disc.stdout)["catalog"]["streams"] if s["name"] == "t")
    with psycopg.connect(dsn) as conn:
        assert_table_matches(conn, "public", "t", stream["json_schema"], read_parquet(str(tmp_path / "lake" / "public" / "t")))
