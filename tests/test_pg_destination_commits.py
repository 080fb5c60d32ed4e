"""The PostgreSQL destination sends its commits on a thread of its own while ``write`` reads on.

What that must not change: a STATE is echoed and saved only once the target committed it, in order;
and when the target refuses one commit, none after it reaches the target, even those already handed
over, so the target, ``_olake.streams``, the state file and the echoed STATEs all stop at the last
commit before it, and a rerun applies the rest exactly once.
"""

from __future__ import annotations

import json

import psycopg

from tests.support.cdc import discover_catalog, sync_once
from tests.support.cli import messages, run_olake, trace_errors, write_json
from tests.support.pg_compare import assert_same_rows, table_texts

ROWS = 20


def test_no_commit_after_one_the_target_refuses(pg_cluster, pg_db, pg_target, target_db, tmp_path, monkeypatch):
    source, target = pg_cluster.dsn(pg_db), pg_target.dsn(target_db)
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("CREATE TABLE c (id int PRIMARY KEY, v int)")
        conn.execute(f"INSERT INTO c SELECT g, 0 FROM generate_series(1, {ROWS}) g")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot="slot_commits", publication="pub_commits", create_slot_and_publication=True))
    dst = write_json(tmp_path / "dst.json", pg_target.destination_config(target_db))
    catalog, state = tmp_path / "cat.json", tmp_path / "state.json"
    discover_catalog(src, catalog, {"c": "cdc"})
    sync_once(src, catalog, dst, state)
    with psycopg.connect(target, autocommit=True) as conn:
        # refused slowly, so that the commits after it are handed over before the refusal is known
        conn.execute("CREATE FUNCTION small(v int) RETURNS boolean LANGUAGE plpgsql AS "
                     "$$ BEGIN IF v >= 100 THEN PERFORM pg_sleep(1); END IF; RETURN v < 100; END $$")
        conn.execute("ALTER TABLE public.c ADD CONSTRAINT small CHECK (small(v))")
    with psycopg.connect(source, autocommit=True) as conn:  # one transaction each
        for _ in range(9):
            conn.execute("UPDATE c SET v = v + 1")
        conn.execute("UPDATE c SET v = v + 1000 WHERE id = 1")  # the target refuses this one
        for _ in range(20):
            conn.execute("UPDATE c SET v = v + 1 WHERE id > 1")

    monkeypatch.setenv("OLAKE_CDC_CHECKPOINT_EVERY", "1")  # a STATE after every transaction
    lines = run_olake("read", "--config", src, "--catalog", str(catalog), "--state", str(state))
    assert lines.returncode == 0, lines.stderr.decode()[-3000:]
    assert sum(m["type"] == "STATE" for m in messages(lines.stdout)) >= 30
    written = run_olake("write", "--config", dst, "--state", str(state), stdin=lines.stdout)  # all input at once

    assert written.returncode != 0
    errors = [line for line in written.stderr.decode().splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and "small" in errors[0] and "public.c" in errors[0], written.stderr.decode()[-3000:]
    assert trace_errors(written.stdout)
    assert dict(table_texts(target, "public", "c", ["id", "v"])) == {str(i): "9" for i in range(1, ROWS + 1)}, \
        "the target holds the nine transactions before the refused one, and none after it"
    echoed = [m["state"] for m in messages(written.stdout) if m["type"] == "STATE"]
    saved = json.loads(state.read_text())
    with psycopg.connect(target, autocommit=True) as conn:
        held = conn.execute("SELECT state FROM _olake.streams").fetchall()
    assert echoed and echoed[-1]["streams"] == saved["streams"], "the last STATE echoed is the one saved"
    assert [row[0] for row in held] == [s for s in saved["streams"]], "and the one the target holds"

    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute("ALTER TABLE public.c DROP CONSTRAINT small")
    sync_once(src, catalog, dst, state)
    assert assert_same_rows(source, ("public", "c"), target, ("public", "c"), ["id", "v"]) == ROWS
    final = dict(table_texts(target, "public", "c", ["id", "v"]))
    assert final["1"] == "1009" and final["2"] == "29", "each transaction applied once"
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot('slot_commits')")
