"""olake as a source of a real Airbyte client: PyAirbyte (``airbyte`` from PyPI, in an environment of its own:
``tests/support/tool_envs``) runs ``olake`` as a local executable (``OLAKE_PROTOCOL=airbyte``): check, discover, a
full refresh and incremental reads into its DuckDB cache, the state it keeps handed back to the next read; the
cache is compared with the source table value by value. Every message olake prints validates against Airbyte's
protocol models (``airbyte_protocol``, the pydantic 2 models PyAirbyte itself uses).
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from tests.support.cli import olake_env
from tests.support.tool_envs import tool_env

PYAIRBYTE = ["airbyte==0.71.3", "SQLAlchemy<2.1"]
OLAKE = str(Path(sys.executable).parent / "olake")
SCRIPT = r'''
import json, os, sys
os.environ.update(AIRBYTE_OFFLINE_MODE="1", DO_NOT_TRACK="1")
phase, config, cache_dir = sys.argv[1:4]
if phase == "validate":  # every line on stdin is one AirbyteMessage
    from airbyte_protocol.models import AirbyteMessage
    kinds = [AirbyteMessage.model_validate_json(line).type.value for line in sys.stdin if line.strip()]
    print(json.dumps(kinds))
    sys.exit(0)
import airbyte as ab
source = ab.get_source("source-olake", local_executable=sys.argv[4], config=json.load(open(config)))
source.check()
source.select_all_streams()
cache = ab.new_local_cache("olake", cache_dir=cache_dir)
if phase == "incremental":
    source.set_cursor_key("items", "updated_at")
result = source.read(cache=cache, force_full_refresh=phase == "full")
rows = cache["items"].to_pandas().drop(columns=["_airbyte_raw_id", "_airbyte_extracted_at", "_airbyte_meta"])
print(json.dumps({"records": result.processed_records, "rows": json.loads(rows.astype(str).to_json(orient="records"))}))
'''
TABLE = ("CREATE TABLE items (id int PRIMARY KEY, name text, price numeric(10,2), seen timestamptz, d date, "
         "tags text[], doc jsonb, updated_at timestamp)")


@pytest.fixture(scope="session")
def pyairbyte() -> str:
    """The Python of PyAirbyte's environment (made once per machine)."""
    return str(tool_env("pyairbyte", PYAIRBYTE) / "bin" / "python")


def _run(pyairbyte: str, tmp_path: Path, phase: str, config: Path, stdin: bytes | None = None) -> object:
    script = tmp_path / "pyairbyte_run.py"
    script.write_text(SCRIPT)
    env = {**olake_env(), "OLAKE_PROTOCOL": "airbyte"}
    done = subprocess.run([pyairbyte, str(script), phase, str(config), str(tmp_path / "cache"), OLAKE], input=stdin,
                          capture_output=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


def _source_rows(dsn: str) -> list[dict]:
    """The table as PyAirbyte's cache shows it as text: timestamps in UTC without zone, dates at midnight."""
    sql = ("SELECT id::text, name, price::text, (seen AT TIME ZONE 'UTC')::text AS seen, (d::timestamp)::text AS d, "
           "to_jsonb(tags)::text AS tags, doc::text AS doc, updated_at::text FROM items ORDER BY id")
    with psycopg.connect(dsn, row_factory=psycopg.rows.dict_row) as conn:
        return conn.execute(sql).fetchall()


def _normalised(rows: list[dict]) -> list[dict]:
    """Rows as text (the cache's or the source's) as values: JSON parsed, timestamps as datetimes, by id."""
    def value(column: str, text: str) -> object:
        if column in ("tags", "doc"):
            return json.loads(text)
        return dt.datetime.fromisoformat(text) if column in ("seen", "d", "updated_at") else text
    return sorted(({c: value(c, v) for c, v in r.items()} for r in rows), key=lambda r: int(r["id"]))


def test_pyairbyte_reads_olake_full_then_incremental(pyairbyte, tmp_path, pg_cluster, pg_db) -> None:
    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(TABLE)
        conn.execute("INSERT INTO items SELECT g, 'item ' || g, g * 1.5, '2024-05-01 10:00:00.123456+02'::timestamptz "
                     "- g * interval '1 hour', date '2024-01-01' - g, ARRAY['a', 'b'], '{\"k\": 1}', "
                     "'2024-01-01'::timestamp + g * interval '1 minute' FROM generate_series(1, 5) g")
    config = tmp_path / "src.json"
    config.write_text(json.dumps(pg_cluster.source_config(pg_db, schemas=["public"])))

    full = _run(pyairbyte, tmp_path, "full", config)
    assert full["records"] == 5 and _normalised(full["rows"]) == _normalised(_source_rows(dsn))
    first = _run(pyairbyte, tmp_path, "incremental", config)  # a new cursor: loaded anew, the cursor saved
    assert first["records"] == 5
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE items SET name = 'changed', updated_at = '2030-01-01' WHERE id = 2")
        conn.execute("INSERT INTO items VALUES (6, 'six', 9.99, '2024-06-01 00:00:00+00', '2024-06-01', "
                     "ARRAY['x'], '[1, 2]', '2030-01-02')")  # seen without a fraction
    second = _run(pyairbyte, tmp_path, "incremental", config)
    assert second["records"] < 5  # only from the saved cursor on: PyAirbyte handed olake's state back
    assert _normalised(second["rows"]) == _normalised(_source_rows(dsn))


def test_every_message_olake_prints_is_an_airbyte_message(pyairbyte, tmp_path, pg_cluster, pg_db) -> None:
    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(TABLE)
        conn.execute("INSERT INTO items VALUES (1, 'one', 1, now(), current_date, ARRAY['a'], '{}', now())")
    config = tmp_path / "src.json"
    config.write_text(json.dumps(pg_cluster.source_config(pg_db, schemas=["public"])))
    env = {**olake_env(), "OLAKE_PROTOCOL": "airbyte"}

    def olake(*args: str) -> bytes:
        return subprocess.run([OLAKE, *args], capture_output=True, env=env, timeout=600).stdout

    discovered = olake("discover", "--config", str(config))
    stream = next(json.loads(line)["catalog"]["streams"][0] for line in discovered.splitlines()
                  if json.loads(line)["type"] == "CATALOG")
    assert stream["supported_sync_modes"] == ["full_refresh", "incremental"]
    assert (stream["source_defined_cursor"], stream["default_cursor_field"]) == (True, ["_ab_cdc_lsn"])
    catalog, state = tmp_path / "configured.json", tmp_path / "state.json"
    catalog.write_text(json.dumps({"streams": [{"stream": stream, "sync_mode": "full_refresh",
                                                "destination_sync_mode": "overwrite"}]}))
    state.write_text("[]")
    printed = b"".join([olake("spec"), olake("check", "--config", str(config)), discovered,
                        olake("read", "--config", str(config), "--catalog", str(catalog), "--state", str(state))])
    kinds = _run(pyairbyte, tmp_path, "validate", config, stdin=printed)
    assert {"SPEC", "CONNECTION_STATUS", "CATALOG", "RECORD", "STATE", "TRACE"} <= set(kinds)
    assert len(kinds) == len([line for line in printed.splitlines() if line.strip()])
