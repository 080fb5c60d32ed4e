"""A real Airbyte source into ``olake write``: Airbyte's faker connector (``airbyte-source-faker`` from PyPI, in
an environment of its own: ``tests/support/tool_envs``) piped into ``write`` with the ConfiguredAirbyteCatalog
it reads with, then read again incrementally from the states ``write`` echoed; Parquet (through the pipe) and
PostgreSQL (in process) hold faker's records, compared value by value.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import subprocess
from pathlib import Path

import orjson
import psycopg
import pytest

from olake_cli.core.catalog import parse_catalog
from olake_cli.core.messages import MessageWriter
from olake_cli.core.registry import make_destination
from olake_cli.pipeline.write import WritePipeline
from tests.support.cli import olake_cmd, olake_env
from tests.support.current_view import current_view
from tests.support.tool_envs import tool_env

FAKER = ["airbyte-source-faker==7.2.1"]
MODES = {"users": ("incremental", "append_dedup"), "purchases": ("incremental", "append_dedup"),
         "products": ("full_refresh", "overwrite")}


@pytest.fixture(scope="session")
def source_faker() -> str:
    """The ``source-faker`` executable (its environment made once per machine)."""
    return str(tool_env("source-faker", FAKER) / "bin" / "source-faker")


def _configured(source_faker: str, tmp_path: Path, config: str) -> str:
    """faker's discovered streams as a ConfiguredAirbyteCatalog (MODES), written to a file."""
    out = subprocess.run([source_faker, "discover", "--config", config], capture_output=True, check=True).stdout
    streams = next(json.loads(line)["catalog"]["streams"] for line in out.splitlines()
                   if json.loads(line)["type"] == "CATALOG")
    configured = {"streams": [{"stream": s, "sync_mode": MODES[s["name"]][0], "cursor_field": s["default_cursor_field"],
                               "destination_sync_mode": MODES[s["name"]][1], "primary_key": [["id"]]} for s in streams]}
    path = tmp_path / "configured.json"
    path.write_text(json.dumps(configured))
    return str(path)


def _faker_into_write(source_faker: str, tmp_path: Path, run: int, count: int, catalog: str, dst: str,
                      state: str | None) -> tuple[list[dict], list[dict]]:
    """``source-faker read ... | tee | olake write ...``: (faker's messages, write's stdout)."""
    config = tmp_path / f"faker{run}.json"
    config.write_text(json.dumps({"count": count, "seed": 7, "records_per_slice": 4, "always_updated": run > 1,
                                  "parallelism": 1}))
    read = [source_faker, "read", "--config", str(config), "--catalog", catalog] + (["--state", state] if state else [])
    lines = tmp_path / f"faker{run}.jsonl"
    with open(lines, "wb") as tee:
        reader = subprocess.Popen(read, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        writer = subprocess.Popen(olake_cmd("write", "--config", dst, "--catalog", catalog), stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=olake_env())
        for chunk in iter(lambda: reader.stdout.read(1 << 16), b""):
            tee.write(chunk)
            writer.stdin.write(chunk)
        writer.stdin.close()
        out, err = writer.stdout.read(), writer.stderr.read()
        assert reader.wait() == 0 and writer.wait() == 0, err.decode()[-2000:]
    return [json.loads(line) for line in lines.read_bytes().splitlines()], [json.loads(line) for line in out.splitlines()]


def _expected(runs: list[list[dict]], stream: str) -> dict[int, dict]:
    """faker's newest record per id of a stream (an overwrite stream: of the last run only), as a reader of the
    destination sees it: timestamps as instants (one without an offset is UTC), objects as values."""
    if MODES[stream][1] == "overwrite":
        runs = runs[-1:]
    rows: dict[int, dict] = {}
    for messages in runs:
        for msg in messages:
            if msg["type"] == "RECORD" and msg["record"]["stream"] == stream:
                rows[msg["record"]["data"]["id"]] = msg["record"]["data"]
    return {i: {k: _instant(v) for k, v in data.items()} for i, data in rows.items()}


def _instant(value: object) -> object:
    if isinstance(value, str) and len(value) >= 19 and value[4] == "-" and value[10] == "T":
        parsed = dt.datetime.fromisoformat(value)
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
    return value


def _held(rows: list[dict], columns: list[str]) -> dict[int, dict]:
    """Rows of a destination keyed by id, only the columns a record has (faker leaves some out: null)."""
    return {row["id"]: {c: json.loads(row[c]) if c == "address" and row[c] is not None else row[c] for c in columns}
            for row in rows}


def _compare(expected: dict[int, dict], held: dict[int, dict]) -> None:
    assert sorted(held) == sorted(expected)
    for key, record in expected.items():
        assert {c: v for c, v in held[key].items() if v is not None or c in record} == record, key


def _columns(catalog: str, stream: str) -> list[str]:
    entry = next(s for s in json.loads(Path(catalog).read_text())["streams"] if s["stream"]["name"] == stream)
    return list(entry["stream"]["json_schema"]["properties"])


def test_faker_into_parquet_and_postgres_full_then_incremental(source_faker, tmp_path, pg_target, target_db) -> None:
    faker_config = tmp_path / "discover.json"
    faker_config.write_text(json.dumps({"count": 10, "seed": 7}))
    catalog = _configured(source_faker, tmp_path, str(faker_config))
    dst = tmp_path / "dst.json"
    dst.write_text(json.dumps({"type": "parquet", "path": str(tmp_path / "lake")}))
    first, acks = _faker_into_write(source_faker, tmp_path, 1, 10, catalog, str(dst), None)
    assert acks == [m for m in first if m["type"] == "STATE"] and acks  # every STATE echoed, unchanged, in order
    state = tmp_path / "state.json"  # what an orchestrator hands the source next: the acknowledged states
    state.write_text(json.dumps([m["state"] for m in acks]))
    second, acks = _faker_into_write(source_faker, tmp_path, 2, 14, catalog, str(dst), str(state))
    assert acks == [m for m in second if m["type"] == "STATE"]
    assert any("'loop_offset': 10" in m["log"]["message"] for m in second if m["type"] == "LOG")  # faker took them
    assert {m["record"]["data"]["id"] for m in second if m["type"] == "RECORD" and m["record"]["stream"] == "users"} \
        == set(range(1, 15))  # ten users again, updated (always_updated), and four new ones
    for stream in MODES:
        columns = _columns(catalog, stream)
        view = current_view(str(tmp_path / "lake" / "default" / stream), columns, ["id"], unchanged=False)
        _compare(_expected([first, second], stream), _held(view.to_pylist(), columns))

    destination = pg_target.destination_config(target_db)  # the same two inputs into PostgreSQL
    for messages in (first, second):
        pipeline = WritePipeline(make_destination("postgres", destination, lambda line: None),
                                 parse_catalog(json.loads(Path(catalog).read_text())), None,
                                 MessageWriter(io.BytesIO()), lambda line: None)
        pipeline.run(io.BytesIO(b"".join(orjson.dumps(m) + b"\n" for m in messages)))
    with psycopg.connect(pg_target.dsn(target_db), row_factory=psycopg.rows.dict_row) as conn:
        for stream in MODES:
            columns = _columns(catalog, stream)
            rows = conn.execute(f"SELECT * FROM {stream}").fetchall()  # a stream without namespace: in public
            held = {r["id"]: {c: r[c] for c in columns} for r in rows}
            _compare(_expected([first, second], stream), held)
