"""``write`` as an Airbyte destination, in process: an Airbyte source's schema (plain JSON Schema with
Airbyte's type hints, no ``x-olake-type``), its records and its per-stream, global and legacy STATEs.

Every Airbyte type goes into Parquet and PostgreSQL and is compared value by value; a record that does not
fit its schema stops the run naming its line, stream and column, what STATEs covered before it staying
committed; ``write`` without ``--catalog`` says an Airbyte source needs one.
"""

from __future__ import annotations

import base64
import datetime as dt
import io
import json

import orjson
import psycopg
import pyarrow.dataset as ds

from olake_cli.core.calendar_text import date_text
from olake_cli.core.catalog import parse_catalog
from olake_cli.core.errors import OlakeError
from olake_cli.core.messages import MessageWriter
from olake_cli.core.registry import make_destination
from olake_cli.pipeline.write import WritePipeline
from tests.support.current_view import current_view

UTC = dt.UTC
PROPERTIES = {
    "id": {"type": "integer"},
    "s": {"type": ["null", "string"]},
    "d": {"type": "string", "format": "date"},
    "ts_tz": {"type": "string", "format": "date-time", "airbyte_type": "timestamp_with_timezone"},
    "ts_default": {"type": ["null", "string"], "format": "date-time"},
    "ts": {"type": "string", "format": "date-time", "airbyte_type": "timestamp_without_timezone"},
    "t": {"type": "string", "format": "time", "airbyte_type": "time_without_timezone"},
    "t_tz": {"type": "string", "format": "time", "airbyte_type": "time_with_timezone"},
    "whole": {"type": "number", "airbyte_type": "integer"},
    "n": {"type": "number"},
    "b": {"type": "boolean"},
    "obj": {"type": "object", "properties": {"a": {"type": "string"}}},
    "arr": {"type": ["null", "array"], "items": {"type": "integer"}},
    "stamps": {"type": "array", "items": {"type": "string", "format": "date-time"}},
    "objs": {"type": "array", "items": {"type": "object"}},
    "untyped": {},
    "union": {"type": ["string", "integer"]},
    "bin": {"type": "string", "contentEncoding": "base64"},
    "big": {"type": "string", "airbyte_type": "big_integer"},
}
STREAM = {"name": "things", "namespace": "ab", "supported_sync_modes": ["full_refresh", "incremental"],
          "source_defined_cursor": True, "default_cursor_field": ["ts_tz"], "source_defined_primary_key": [["id"]],
          "json_schema": {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
                          "properties": PROPERTIES}}
CONFIGURED = {"streams": [{"stream": STREAM, "sync_mode": "incremental", "cursor_field": ["ts_tz"],
                           "destination_sync_mode": "append_dedup", "primary_key": [["id"]]}]}
ROW_1 = {"id": 1, "s": "a\u00e9", "d": "2021-01-23", "ts_tz": "2022-11-22T01:23:45.123456+05:00",
         "ts_default": "2022-11-22T01:23:45Z", "ts": "2022-11-22T01:23:45.5", "t": "01:23:45.123456",
         "t_tz": "01:23:45+05:00", "whole": 7, "n": 1.5, "b": True, "obj": {"a": "x", "extra": [1, {"b": None}]},
         "arr": [1, None, 3], "stamps": ["2020-01-01T00:00:00+01:00", "2020-01-01T00:00:00"],
         "objs": [{"k": 1}], "untyped": "text", "union": 5, "bin": base64.b64encode(b"\x00\xff").decode(),
         "big": "123456789012345678901234567890"}
ROW_2 = {"id": 2, "d": "0044-03-15 BC", "ts_tz": "2001-01-05T21:37:30.796635", "ts": "1999-12-31T23:59:59",
         "t": "24:00:00", "t_tz": "12:00:00Z", "whole": -1, "n": -2, "b": False, "obj": {}, "stamps": [],
         "objs": [], "untyped": {"x": [True]}, "union": "five", "bin": "", "big": "-1", "ts_default": None}
# what a reader of the destination sees; a date and a time as text (Python has no 44 BC, no 24:00)
EXPECTED = {
    1: {"id": 1, "s": "a\u00e9", "d": "2021-01-23", "ts_tz": dt.datetime(2022, 11, 21, 20, 23, 45, 123456, UTC),
        "ts_default": dt.datetime(2022, 11, 22, 1, 23, 45, tzinfo=UTC), "ts": dt.datetime(2022, 11, 22, 1, 23, 45, 500000),
        "t": "01:23:45.123456", "t_tz": "01:23:45+05:00", "whole": 7, "n": 1.5, "b": True,
        "obj": {"a": "x", "extra": [1, {"b": None}]}, "arr": [1, None, 3],
        "stamps": [dt.datetime(2019, 12, 31, 23, tzinfo=UTC), dt.datetime(2020, 1, 1, tzinfo=UTC)],
        "objs": [{"k": 1}], "untyped": "text", "union": 5, "bin": b"\x00\xff", "big": "123456789012345678901234567890"},
    2: {"id": 2, "s": None, "d": "0044-03-15 BC", "ts_tz": dt.datetime(2001, 1, 5, 21, 37, 30, 796635, UTC),
        "ts_default": None, "ts": dt.datetime(1999, 12, 31, 23, 59, 59), "t": "24:00:00", "t_tz": "12:00:00Z",
        "whole": -1, "n": -2.0, "b": False, "obj": {}, "arr": None, "stamps": [], "objs": [], "untyped": {"x": [True]},
        "union": "five", "bin": b"", "big": "-1"},
}
JSON_COLUMNS = ("obj", "objs", "untyped", "union")
RUN = [{"type": "LOG", "log": {"level": "INFO", "message": "Starting"}}]


def _record(data: dict, stream: str = "things") -> dict:
    return {"type": "RECORD", "record": {"stream": stream, "namespace": "ab", "data": data, "emitted_at": 1700000000000}}


def _stream_state(stream: str, cursor: object) -> dict:
    return {"type": "STATE", "state": {"type": "STREAM", "stream": {
        "stream_descriptor": {"name": stream, "namespace": "ab"}, "stream_state": {"cursor": cursor}},
        "sourceStats": {"recordCount": 1.0}}}


def _status(status: str, stream: str = "things") -> dict:
    return {"type": "TRACE", "trace": {"type": "STREAM_STATUS", "emitted_at": 1700000000000.5,
                                       "stream_status": {"stream_descriptor": {"name": stream, "namespace": "ab"},
                                                         "status": status}}}


def _write(dst: dict, lines: list[dict], catalog: dict | None = CONFIGURED) -> tuple[list[dict], OlakeError | None]:
    """``write`` in process over ``lines``: (the messages it printed, its error)."""
    destination = make_destination(dst["type"], dst, lambda line: None)
    out = io.BytesIO()
    pipeline = WritePipeline(destination, None if catalog is None else parse_catalog(catalog), None,
                             MessageWriter(out), lambda line: None)
    try:
        pipeline.run(io.BytesIO(b"".join(orjson.dumps(line) + b"\n" for line in lines)))
        error = None
    except OlakeError as exc:
        error = exc
    return [json.loads(line) for line in out.getvalue().splitlines()], error


def _parquet_rows(folder) -> dict[int, dict]:
    """The current row per id of a Parquet stream (the documented query): a date and a time as PostgreSQL's
    text (Python has neither 44 BC nor 24:00), JSON as its value."""
    table = current_view(str(folder), list(PROPERTIES), ["id"], unchanged=False)
    days, micros = table.column("d").cast("int32").to_pylist(), table.column("t").cast("int64").to_pylist()
    rows = {}
    for index, row in enumerate(table.drop_columns(["d", "t"]).to_pylist()):
        for name in JSON_COLUMNS:
            if row[name] is not None:
                row[name] = json.loads(row[name])
        rows[row["id"]] = {**row, "d": date_text(days[index]), "t": _time_text(micros[index])}
    return {i: {c: row[c] for c in PROPERTIES} for i, row in rows.items()}


def _time_text(micros: int) -> str:
    hours, rest = divmod(micros, 3_600_000_000)
    minutes, rest = divmod(rest, 60_000_000)
    seconds, fraction = divmod(rest, 1_000_000)
    return f"{hours:02}:{minutes:02}:{seconds:02}" + (f".{fraction:06}" if fraction else "")


def _pg_rows(dsn: str, table: str = "ab.things") -> dict[int, dict]:
    """The rows of a PostgreSQL target table, a date and a time as text, numeric as text."""
    columns = ", ".join(f'"{c}"::text AS "{c}"' if c in ("d", "t", "big") else f'"{c}"' for c in PROPERTIES)
    with psycopg.connect(dsn) as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        cur.execute("SET TIME ZONE 'UTC'")
        return {row["id"]: row for row in cur.execute(f"SELECT {columns} FROM {table}").fetchall()}


TWO_ROWS = [*RUN, _status("STARTED"), _record(ROW_1), _stream_state("things", 1), _record(ROW_2),
            _stream_state("things", 2), _status("COMPLETE")]


def test_every_airbyte_type_into_parquet_value_by_value(tmp_path) -> None:
    out, error = _write({"type": "parquet", "path": str(tmp_path / "lake")}, TWO_ROWS)
    assert error is None
    assert out == [TWO_ROWS[3], TWO_ROWS[5]]  # each STATE echoed unchanged once committed
    schema = ds.dataset(str(tmp_path / "lake" / "ab" / "things")).schema
    assert {name: str(schema.field(name).type) for name in PROPERTIES} == {
        "id": "int64", "s": "string", "d": "date32[day]", "ts_tz": "timestamp[us, tz=UTC]",
        "ts_default": "timestamp[us, tz=UTC]", "ts": "timestamp[us]", "t": "time64[us]", "t_tz": "string",
        "whole": "int64", "n": "double", "b": "bool", "obj": "extension<arrow.json>", "arr": "list<element: int64>",
        "stamps": "list<element: timestamp[us, tz=UTC]>", "objs": "extension<arrow.json>",
        "untyped": "extension<arrow.json>", "union": "extension<arrow.json>", "bin": "binary", "big": "string"}
    assert not schema.field("id").nullable and schema.field("ts").nullable  # nullable outside the key
    assert _parquet_rows(tmp_path / "lake" / "ab" / "things") == EXPECTED


def test_every_airbyte_type_into_postgres_value_by_value(pg_target, target_db) -> None:
    out, error = _write(pg_target.destination_config(target_db), TWO_ROWS)
    assert error is None
    assert out == [TWO_ROWS[3], TWO_ROWS[5]]
    with psycopg.connect(pg_target.dsn(target_db)) as conn:
        types = dict(conn.execute("SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
                                  "WHERE attrelid = 'ab.things'::regclass AND attnum > 0").fetchall())
    assert {name: types[name] for name in PROPERTIES} == {
        "id": "bigint", "s": "text", "d": "date", "ts_tz": "timestamp with time zone",
        "ts_default": "timestamp with time zone", "ts": "timestamp without time zone",
        "t": "time without time zone", "t_tz": "text", "whole": "bigint", "n": "double precision", "b": "boolean",
        "obj": "jsonb", "arr": "bigint[]", "stamps": "timestamp with time zone[]", "objs": "jsonb", "untyped": "jsonb",
        "union": "jsonb", "bin": "bytea", "big": "numeric"}
    assert _pg_rows(pg_target.dsn(target_db)) == EXPECTED


def test_global_and_legacy_states_commit_and_are_echoed(tmp_path) -> None:
    """A GLOBAL state commits the streams it lists and those with records waiting; a LEGACY one those with
    records waiting; each is echoed unchanged after its commit, and each stream's destination record keeps
    its part of the Airbyte state."""
    other = {**STREAM, "name": "others"}
    catalog = {"streams": [CONFIGURED["streams"][0], {**CONFIGURED["streams"][0], "stream": other}]}
    global_state = {"type": "STATE", "state": {"type": "GLOBAL", "global": {
        "shared_state": {"lsn": 42}, "stream_states": [
            {"stream_descriptor": {"name": "things", "namespace": "ab"}, "stream_state": {"c": 1}}]}}}
    legacy_state = {"type": "STATE", "state": {"data": {"things": {"c": 2}, "others": {"c": 2}}}}
    lines = [_record(ROW_1), _record({"id": 7, **{k: v for k, v in ROW_2.items() if k != "id"}}, "others"),
             global_state, _record(ROW_2), legacy_state, _status("COMPLETE"), _status("COMPLETE", "others")]
    out, error = _write({"type": "parquet", "path": str(tmp_path / "lake")}, lines, catalog)
    assert error is None
    assert out == [global_state, legacy_state]
    assert _parquet_rows(tmp_path / "lake" / "ab" / "things") == EXPECTED
    assert list(_parquet_rows(tmp_path / "lake" / "ab" / "others")) == [7]
    manifest = json.loads((tmp_path / "lake" / "ab" / ".others.manifest.json").read_text())
    assert manifest["state"]["stream_state"]["airbyte_state"] == {
        "type": "GLOBAL", "global": {"shared_state": {"lsn": 42}, "stream_states": []}}
    manifest = json.loads((tmp_path / "lake" / "ab" / ".things.manifest.json").read_text())
    assert manifest["state"]["stream_state"]["airbyte_state"] == {"type": "LEGACY", "data": legacy_state["state"]["data"]}


def test_a_record_that_does_not_fit_stops_the_run_naming_it(tmp_path) -> None:
    """The rule of every input: the run stops at the record, naming its line, stream and column; what the
    STATEs before it covered stays committed."""
    bad = {**ROW_2, "whole": "seven"}
    lines = [_record(ROW_1), _stream_state("things", 1), _record(bad), _stream_state("things", 2)]
    out, error = _write({"type": "parquet", "path": str(tmp_path / "lake")}, lines)
    assert out == [lines[1]]
    assert error is not None and error.message.startswith("stdin line 3: stream 'ab.things', column 'whole': ")
    assert list(_parquet_rows(tmp_path / "lake" / "ab" / "things")) == [1]


def test_overwrite_replaces_and_append_keeps_every_record(tmp_path) -> None:
    """destination_sync_mode: overwrite empties the stream at the run's first commit of it; append keeps
    every record (no key); append_dedup (above) the newest per key."""
    lake = {"type": "parquet", "path": str(tmp_path / "lake")}
    for mode, runs in (("overwrite", ([1, 2], [2, 3])), ("append", ([1, 2], [2, 3]))):
        entry = {**CONFIGURED["streams"][0], "destination_sync_mode": mode, "sync_mode": "full_refresh",
                 "stream": {**STREAM, "name": mode}}
        for ids in runs:
            lines = [*(_record({**ROW_1, "id": i}, mode) for i in ids), _stream_state(mode, ids), _status("COMPLETE", mode)]
            assert _write(lake, lines, {"streams": [entry]})[1] is None
        ids = ds.dataset(str(tmp_path / "lake" / "ab" / mode)).to_table(columns=["id"]).column("id").to_pylist()
        assert sorted(ids) == ([2, 3] if mode == "overwrite" else [1, 2, 2, 3])


def test_write_without_catalog_says_an_airbyte_source_needs_one(tmp_path) -> None:
    out, error = _write({"type": "parquet", "path": str(tmp_path / "lake")}, [_record(ROW_1)], catalog=None)
    assert out == []
    assert error is not None and "give --catalog" in error.message and "Airbyte source" in error.message


def test_a_state_repeated_word_for_word_commits_the_records_before_each(tmp_path) -> None:
    """faker repeats a STATE word for word after other records: each still commits its own (Parquet names a
    commit's files by its state, so two equal states wrote one file name and the second batch replaced the first)."""
    lines = [_record(ROW_1), _stream_state("things", 1), _record(ROW_2), _stream_state("things", 1),
             _status("COMPLETE")]
    out, error = _write({"type": "parquet", "path": str(tmp_path / "lake")}, lines)
    assert error is None and out == [lines[1], lines[3]]
    assert _parquet_rows(tmp_path / "lake" / "ab" / "things") == EXPECTED
