"""DDL from another session while a full load runs: ADD COLUMN, a rewrite (VACUUM FULL), DROP TABLE.

The load holds ACCESS SHARE on the table, so the DDL waits; its ACCESS EXCLUSIVE request then queues
the next chunk scan's lock request behind it. Without a lock timeout the two wait for each other
forever. The load must stop with one clear line and release its snapshot so the DDL goes through;
the rerun then resumes (column added), restarts (rewritten) or refuses (dropped) the stream's load,
and the copy equals the source value by value: never a silent partial copy.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from tests.support.cli import messages, olake_cmd, olake_env, run_olake, write_json
from tests.support.matrix import cases
from tests.support.verify import assert_table_matches, read_parquet

ROWS = 4000  # 20 chunks of 200 rows (40 of 100): enough left when the DDL lands after the second
BEING_ALTERED = b"public.parts is being altered or dropped by another session"


def _succeeded(state: dict) -> int:
    return sum(c["status"] == "succeed" for c in state.get("chunks") or [])


def _stream_state(path, name: str = "parts") -> dict:
    streams = json.loads(path.read_text())["streams"]
    return next(s["stream_state"] for s in streams if s["stream_name"] == name)


def _load_with_ddl(read_args: list[str], write_args: list[str], dsn: str, ddl: str, stream: str = "parts"):
    """Run ``read | write``; once two chunks of ``stream`` are committed, run ``ddl`` from another
    session (it waits for the load's lock, at most two minutes here). Returns the finished reader and
    its stderr."""
    env = olake_env()
    reader = subprocess.Popen(olake_cmd("read", *read_args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    writer = subprocess.Popen(olake_cmd("write", *write_args), stdin=reader.stdout, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, env=env)
    reader.stdout.close()
    for line in writer.stdout:
        echoed = json.loads(line)["state"]["streams"]
        if any(s["stream_name"] == stream and _succeeded(s["stream_state"]) >= 2 for s in echoed):
            break
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET lock_timeout = '120s'")  # a hang guard only: the load releases within seconds
        conn.execute(ddl)
    writer.communicate(timeout=300)
    reader_stderr = reader.stderr.read()
    reader.wait(timeout=60)
    return reader, reader_stderr


@dataclass
class StoppedLoad:
    """A ``read | write`` load that DDL from another session stopped, and what to rerun it with."""

    src: str
    dst: str
    catalog: list[str]
    state: Path
    streams: dict[str, dict]  # discovered stream name -> json_schema
    reader: subprocess.Popen
    stderr: bytes

    def rerun(self):
        """The same streams again through ``sync``, resuming from the state file."""
        return run_olake("sync", "--source", self.src, "--destination", self.dst, *self.catalog,
                         "--state", str(self.state))


def _stop_load_with_ddl(pg_cluster, pg_db, tmp_path, ddl: str, **source) -> StoppedLoad:
    """Discover, then run ``read | write`` of one chunk at a time until ``ddl`` stops it (lock_timeout 2 s)."""
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(pg_db, max_parallel=1, lock_timeout=2,
                                                                        **source))
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "out")})
    disc = run_olake("discover", "--config", src)
    assert disc.returncode == 0, disc.stderr
    (tmp_path / "cat.json").write_bytes(disc.stdout)
    state = tmp_path / "st.json"
    catalog = ["--catalog", str(tmp_path / "cat.json")]
    reader, stderr = _load_with_ddl(["--config", src, *catalog, "--state", str(state)],
                                    ["--config", dst, "--state", str(state)], pg_cluster.dsn(pg_db), ddl)
    streams = {s["name"]: s["json_schema"] for s in json.loads(disc.stdout)["catalog"]["streams"]}
    return StoppedLoad(src, dst, catalog, state, streams, reader, stderr)


DDL_CASES = [
    ("ALTER TABLE parts ADD COLUMN extra int DEFAULT 7", "ctid", "resumes"),
    ("VACUUM FULL parts", "ctid", "restarts"),  # ctid ranges name other rows after a rewrite
    ("VACUUM FULL parts", "primary_key", "resumes"),  # key ranges keep their meaning
    ("DROP TABLE parts", "ctid", "refused"),
]


# by default one case per DDL kind; a ctid load restarted after a rewrite: tests/test_e2e_rewrite_resume.py
@pytest.mark.parametrize("ddl, strategy, rerun", cases(DDL_CASES, [DDL_CASES[0], DDL_CASES[2], DDL_CASES[3]]))
def test_ddl_mid_load_stops_the_load_and_the_rerun_converges(pg_cluster, pg_db, tmp_path, ddl, strategy, rerun):
    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"""CREATE TABLE parts (id int PRIMARY KEY, label text, weight numeric(8,2));
                         INSERT INTO parts SELECT g, repeat('p', 100) || g, g / 4.0
                         FROM generate_series(1, {ROWS}) g; ANALYZE parts;""")
    run = _stop_load_with_ddl(pg_cluster, pg_db, tmp_path, ddl, chunk_rows=200, chunk_strategy=strategy)
    reader, stderr, state = run.reader, run.stderr, run.state

    assert reader.returncode != 0
    errors = [line for line in stderr.splitlines() if line.startswith(b"olake: error:")]
    assert len(errors) == 1 and BEING_ALTERED in errors[0], stderr.decode()[-2000:]
    stopped = _stream_state(state)
    assert 2 <= _succeeded(stopped) < len(stopped["chunks"])  # committed chunks kept, the rest still to do

    before_rerun = state.read_bytes()
    again = run.rerun()
    if rerun == "refused":
        assert again.returncode != 0
        assert b"'public.parts' does not exist" in again.stderr, again.stderr.decode()[-2000:]
        assert [m["trace"]["error"]["failure_type"] for m in messages(again.stdout)
                if m["type"] == "TRACE" and "error" in m["trace"]] == ["config_error"]
        assert state.read_bytes() == before_rerun
        return
    assert again.returncode == 0, again.stderr.decode()[-3000:]
    if rerun == "resumes":
        assert b"parts: resuming full load" in again.stderr
    else:
        assert b"parts: the table was rewritten" in again.stderr
    final = _stream_state(state)
    assert not final.get("chunks")
    assert (final["load_id"] == stopped["load_id"]) == (rerun == "resumes")
    schema = run.streams["parts"]
    data = read_parquet(str(tmp_path / "out" / "public" / "parts"))
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert_table_matches(conn, "public", "parts", schema, data.select(list(schema["properties"])))


def test_ddl_on_a_table_whose_load_is_done_is_not_blocked_until_the_run_ends(pg_cluster, pg_db, tmp_path):
    """No chunk of ``a_small`` is left to notice its DDL: the lock watch does, and stops the run."""
    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"""CREATE TABLE a_small (id int PRIMARY KEY, note text);
                         INSERT INTO a_small SELECT g, 'n' || g FROM generate_series(1, 50) g;
                         CREATE TABLE parts (id int PRIMARY KEY, label text);
                         INSERT INTO parts SELECT g, repeat('p', 100) || g FROM generate_series(1, {ROWS}) g;
                         ANALYZE;""")
    run = _stop_load_with_ddl(pg_cluster, pg_db, tmp_path, "ALTER TABLE a_small ADD COLUMN extra int",
                              chunk_rows=100)
    reader, stderr, state = run.reader, run.stderr, run.state
    assert reader.returncode != 0
    errors = [line for line in stderr.splitlines() if line.startswith(b"olake: error:")]
    assert len(errors) == 1 and b"public.a_small is being altered or dropped" in errors[0], stderr.decode()[-2000:]
    assert stderr.count(b"the load's snapshot is gone") <= 1  # the first chunk to find it gone stops the run
    stopped = _stream_state(state)
    assert _succeeded(stopped) < len(stopped["chunks"])  # the run did not wait for the last chunk of parts

    again = run.rerun()
    assert again.returncode == 0, again.stderr.decode()[-3000:]
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name, schema in run.streams.items():
            data = read_parquet(str(tmp_path / "out" / "public" / name))
            assert_table_matches(conn, "public", name, schema, data.select(list(schema["properties"])))
