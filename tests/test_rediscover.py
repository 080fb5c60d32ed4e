"""``olake discover --catalog old.json`` keeps the user's edits and reports what changed."""

from __future__ import annotations

import json

import psycopg

from tests.support.cli import run_olake, write_json


def test_rediscover_keeps_edits_adds_new_streams_and_reports_vanished_ones(pg_cluster, pg_db, tmp_path):
    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE a (id int PRIMARY KEY, secret text, updated_at timestamptz)")
        conn.execute("CREATE TABLE b (id int PRIMARY KEY)")
        conn.execute("CREATE TABLE gone (id int PRIMARY KEY)")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(pg_db))
    first = json.loads(run_olake("discover", "--config", src).stdout)["catalog"]
    streams = {s["name"]: s for s in first["streams"]}
    streams["a"].update(sync_mode="incremental", cursor_field=["updated_at"], cursor_lookback="5 minutes")
    del streams["a"]["json_schema"]["properties"]["secret"]  # the user skips a column
    streams["b"]["selected"] = False
    (tmp_path / "old.json").write_text(json.dumps(first))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE gone")
        conn.execute("CREATE TABLE c (id int PRIMARY KEY)")
        conn.execute("ALTER TABLE a ADD COLUMN note text")
    again = run_olake("discover", "--config", src, "--catalog", str(tmp_path / "old.json"))
    assert again.returncode == 0, again.stderr.decode()
    merged = {s["name"]: s for s in json.loads(again.stdout)["catalog"]["streams"]}
    assert set(merged) == {"a", "b", "c"}
    a = merged["a"]
    assert (a["sync_mode"], a["cursor_field"], a["cursor_lookback"]) == ("incremental", ["updated_at"], "5 minutes")
    assert list(a["json_schema"]["properties"]) == ["id", "updated_at", "note"]  # secret stays skipped
    assert merged["b"]["selected"] is False and merged["c"]["selected"] is True
    log = again.stderr.decode()
    assert "public.gone: no longer exists at the source" in log
    assert "public.c: new stream" in log
    assert "public.a: new column(s) note" in log
