"""A full_refresh load replaced in ``read | write`` (and ``olake sync`` with OLAKE_TEST_ALL_PATHS=1), SIGKILLed
in the middle of a commit (OLAKE_TEST_CRASH_AT): readers see the old load whole until the new one is whole, and the rerun
ends with the destination equal to the source, without duplicate rows."""

from __future__ import annotations

import json
import os
import subprocess

import psycopg
import pytest

from tests.support.cdc import discover_catalog, make_accounts
from tests.support.cli import olake_cmd, olake_env, read_into_write, write_json
from tests.support.matrix import cases
from tests.support.verify import assert_table_matches, read_parquet

ROWS = 1200


def _run(kind: str, src: str, dst: str, cat: str, state):
    """One ``sync`` or ``read | write`` run; returns the (writing) process' return code and stderr."""
    if kind == "sync":
        result = subprocess.run(olake_cmd("sync", "--source", src, "--destination", dst, "--catalog", cat,
                                          "--state", str(state)), capture_output=True, env=olake_env(),
                                timeout=600)
        return result.returncode, result.stderr
    result = read_into_write(["--config", src, "--catalog", cat, "--state", str(state)],
                             ["--config", dst, "--state", str(state)])
    return result.write_code, result.write_stderr


def _source_rows(dsn: str) -> list[tuple]:
    with psycopg.connect(dsn) as conn:
        return sorted((i, str(b), n) for i, b, n in conn.execute("SELECT id, balance, note FROM acct"))


def _visible_rows(folder) -> list[tuple]:
    table = read_parquet(str(folder))
    return sorted((i, str(b), n) for i, b, n in zip(*(table.column(c).to_pylist()
                                                      for c in ("id", "balance", "note"))))


# the commit is the driver's through either command; OLAKE_TEST_ALL_PATHS=1 runs sync as well (a sync killed
# at the manifest, in a bucket: tests/test_object_storage.py)
@pytest.mark.parametrize("kind", cases(["sync", "read-write"], ["read-write"]))
def test_kill_while_a_new_full_load_replaces_the_old(pg_cluster, pg_db, tmp_path, monkeypatch, kind):
    dsn = pg_cluster.dsn(pg_db)
    make_accounts(dsn, "acct", ROWS)
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, chunk_strategy="primary_key", chunk_rows=300, max_parallel=1))
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "out")})
    catalog = discover_catalog(src, tmp_path / "cat.json", {}, only={"acct"})
    cat, state, folder = str(tmp_path / "cat.json"), tmp_path / "st.json", tmp_path / "out" / "public" / "acct"

    code, stderr = _run(kind, src, dst, cat, state)
    assert code == 0, stderr.decode()[-3000:]
    first_load = _source_rows(dsn)
    assert _visible_rows(folder) == first_load

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE acct SET note = 'second load' WHERE id % 3 = 0")
        conn.execute("DELETE FROM acct WHERE id > 1100")
        conn.execute("INSERT INTO acct SELECT g, g, 'new' FROM generate_series(5001, 5100) g")
    # the second run's commits: load opened (1), chunks 1-3 (2-4); the kill hits the 5th manifest write
    monkeypatch.setenv("OLAKE_TEST_CRASH_AT", "manifest-written")
    monkeypatch.setenv("OLAKE_TEST_CRASH_AFTER", "4")
    code, stderr = _run(kind, src, dst, cat, state)
    assert code == -9, stderr.decode()[-3000:]
    monkeypatch.delenv("OLAKE_TEST_CRASH_AT")
    assert _visible_rows(folder) == first_load, "readers keep the complete first load until the second is"
    chunks = json.loads(state.read_text())["streams"][0]["stream_state"]["chunks"]
    assert 0 < sum(c["status"] == "succeed" for c in chunks) < len(chunks)

    code, stderr = _run(kind, src, dst, cat, state)
    assert code == 0, stderr.decode()[-3000:]
    schema = next(s for s in catalog["streams"] if s["name"] == "acct")["json_schema"]
    data = read_parquet(str(folder))
    with psycopg.connect(dsn, autocommit=True) as conn:  # equal row counts: no duplicates either
        assert_table_matches(conn, "public", "acct", schema, data.select(list(schema["properties"])))
    assert 0 < len(os.listdir(folder)) <= len(chunks), "at most one file per chunk of the live load"
