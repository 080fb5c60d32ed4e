"""``olake discover --output FILE``: a catalog written for people to edit, usable as ``--catalog``."""

from __future__ import annotations

import json

import psycopg

from olake_cli.core.catalog import load_catalog
from tests.support.cli import messages, run_olake, write_json
from tests.test_bad_input import assert_one_error


def test_discover_output_writes_an_indented_catalog_that_rediscovery_updates_in_place(pg_cluster, pg_db, tmp_path):
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id bigint PRIMARY KEY, placed_at timestamptz, total numeric(12,2))")
        conn.execute("CREATE TABLE notes (id int PRIMARY KEY, body text)")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(pg_db))
    printed = run_olake("discover", "--config", src)
    assert printed.returncode == 0, printed.stderr.decode()
    [message] = messages(printed.stdout)

    path = tmp_path / "catalog.json"
    written = run_olake("discover", "--config", src, "--output", str(path))
    assert written.returncode == 0, written.stderr.decode()
    assert written.stdout == b"", "with --output, stdout carries nothing"
    assert written.stderr.decode() == (f"olake: discovered 2 stream(s) into {path}; edit 'selected', 'sync_mode' and "
                                       f"'cursor_field' there, then pass it as --catalog {path}\n")
    text = path.read_text()
    assert json.loads(text) == message["catalog"]
    lines = text.splitlines()
    assert lines[:6] == ["{", '  "streams": [', "    {", '      "name": "notes",', '      "namespace": "public",',
                         '      "selected": true,'] and lines[6] == '      "sync_mode": "full_refresh",'
    for column in ("id", "total", "body"):  # a column on one line when it fits in 120 columns
        found = [line for line in lines if line.strip().startswith(f'"{column}": {{')]
        assert found and all(line.rstrip(",").endswith("}") and '"x-olake-type": ' in line for line in found), found
    assert all(len(line) <= 120 for line in lines), [line for line in lines if len(line) > 120]

    edited = json.loads(text)
    orders = next(s for s in edited["streams"] if s["name"] == "orders")
    orders.update(sync_mode="incremental", cursor_field=["placed_at"])
    next(s for s in edited["streams"] if s["name"] == "notes")["selected"] = False
    path.write_text(json.dumps(edited, indent=2))
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
        conn.execute("ALTER TABLE notes ADD COLUMN title text")
    again = run_olake("discover", "--config", src, "--catalog", str(path), "--output", str(path))
    assert again.returncode == 0, again.stderr.decode()
    catalog = load_catalog(path)
    streams = {s.name: s for s in catalog.streams}
    assert streams["orders"].sync_mode == "incremental" and streams["orders"].cursor_field == ["placed_at"]
    assert streams["notes"].selected is False
    assert "title" in json.loads(path.read_text())["streams"][0]["json_schema"]["properties"]


def test_discover_output_into_a_missing_folder_is_one_error_line(pg_cluster, pg_db, tmp_path):
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(pg_db))
    target = tmp_path / "no-such-folder" / "catalog.json"
    result = run_olake("discover", "--config", src, "--output", str(target))
    assert_one_error(result, "config_error", f"cannot write the catalog to '{target}'", "No such file or directory")
    assert not target.parent.exists()
