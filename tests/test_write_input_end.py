"""``write`` fails an input that ends before the reader's final messages, and checks values on arrival.

In-process against real Parquet and Iceberg destinations: the rule of ``core.input_end`` (every announced stream
ends with STREAM_STATUS COMPLETE, no RECORD after the last STATE), what stays committed when it is
broken, and a RECORD whose value does not fit its column reported with its line, stream and column.
"""

from __future__ import annotations

import io
import json

import orjson
import pyarrow.dataset as ds
import pytest

from olake_cli.core.catalog import parse_catalog
from olake_cli.core.errors import OlakeError, ProtocolError, TransientError, UpstreamError
from olake_cli.core.messages import MessageWriter, catalog_message, trace_error, trace_stream_status
from olake_cli.core.registry import make_destination
from olake_cli.core.state import FileStateStore
from olake_cli.pipeline.write import BATCH_ROWS, WritePipeline
from tests.support.current_view import iceberg_rows

SCHEMA = {"type": "object", "properties": {"id": {"type": "integer", "x-olake-type": "int32"},
                                           "v": {"type": ["string", "null"], "x-olake-type": "string"}}}
CATALOG = {"streams": [{"name": name, "namespace": "n", "json_schema": SCHEMA, "supported_sync_modes": ["full_refresh"],
                        "source_defined_primary_key": [["id"]]} for name in ("a", "b")]}


def _record(stream: str, **data) -> dict:
    return {"type": "RECORD", "record": {"stream": stream, "namespace": "n", "emitted_at": 1, "data": data}}


def _state(*streams: str, cursor: str = "1") -> dict:
    return {"type": "STATE", "state": {"level": "global", "version": "v1", "streams": [
        {"sync_type": "incremental", "stream_name": s, "stream_namespace": "n", "stream_state": {"cursor_field": cursor}}
        for s in streams]}}


def _status(stream: str, status: str) -> dict:
    return trace_stream_status(stream, "n", status)


def _write(tmp_path, lines: list, catalog: dict | None = None,
           kind: str = "parquet") -> tuple[list[dict], OlakeError | None]:
    """Run write in-process into a ``kind`` destination over ``lines`` (dicts, or raw bytes lines);
    (messages on stdout, its error)."""
    destination = make_destination(kind, {"type": kind, "path": str(tmp_path / "out")}, lambda line: None)
    out = io.BytesIO()
    stdin = b"".join(line if isinstance(line, bytes) else orjson.dumps(line) + b"\n" for line in lines)
    pipeline = WritePipeline(destination, None if catalog is None else parse_catalog(catalog),
                             FileStateStore(str(tmp_path / "st.json")), MessageWriter(out), lambda line: None)
    try:
        pipeline.run(io.BytesIO(stdin))
        error = None
    except OlakeError as exc:
        error = exc
    return [json.loads(line) for line in out.getvalue().splitlines()], error


def _ids(tmp_path, stream: str, kind: str = "parquet") -> list[int]:
    """The ids a reader of the destination sees in ``stream`` (none when it holds no table)."""
    if kind == "iceberg":
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return sorted(iceberg_rows(tmp_path / "out", "n", stream).column("id").to_pylist())
        except NoSuchTableError:
            return []
    folder = tmp_path / "out" / "n" / stream
    return sorted(ds.dataset(str(folder)).to_table().column("id").to_pylist()) if folder.exists() else []


A_RUN = [catalog_message(CATALOG), _status("a", "STARTED"), _status("b", "STARTED"), _record("a", id=1, v="x"),
         _record("a", id=2, v=None), _state("a"), _record("b", id=3, v="y"), _state("a", "b")]


READER_ERROR = trace_error("cannot connect", "config_error")


@pytest.mark.parametrize("kind", ["parquet", "iceberg"])
@pytest.mark.parametrize("lines, catalog, unfinished", [
    ([], None, None),
    ([READER_ERROR], None, None),
    (A_RUN, None, ["'n.a'", "'n.b'"]),
    (A_RUN + [_status("a", "COMPLETE")], None, ["'n.b'"]),
    (A_RUN + [_status("a", "COMPLETE"), _status("b", "INCOMPLETE")], None, ["'n.b'"]),
    (A_RUN[1:] + [_status("a", "COMPLETE")], CATALOG, ["'n.b'"]),  # no CATALOG line: --catalog's streams
])
def test_an_input_cut_short_commits_what_its_states_covered_then_fails(tmp_path, lines, catalog, unfinished, kind):
    out, error = _write(tmp_path, lines, catalog, kind)
    if lines and lines[0] == READER_ERROR:  # the reading side reported why: its error, nothing opened
        assert isinstance(error, UpstreamError) and error.failure_type == "config_error"
        assert error.message == "the reading side failed (the reader's own error line says why); nothing was committed"
        assert error.internal_message == "the reader's error: cannot connect"
        assert not (tmp_path / "out").exists(), "an input holding only the reader's error touched the destination"
        return
    assert isinstance(error, TransientError) and error.failure_type == "transient_error", error
    assert error.message.startswith("the reading side stopped early: the input ended before ")
    assert error.message.endswith("run the same command again to resume")
    if unfinished is None:
        assert "its CATALOG message" in error.message
        assert out == [] and not (tmp_path / "out").exists()
        return
    for label in unfinished:
        assert label in error.message
    assert [m["type"] for m in out] == ["STATE", "STATE"]
    assert (_ids(tmp_path, "a", kind), _ids(tmp_path, "b", kind)) == ([1, 2], [3])  # every STATE before the cut holds
    assert json.loads((tmp_path / "st.json").read_text())["streams"][1]["stream_name"] == "b"


@pytest.mark.parametrize("cut", [_record("a", id=9, v="z"), _state("a", "b", cursor="2")])
def test_an_input_that_ends_inside_a_line_is_a_reader_stopped_early(tmp_path, cut):
    """A reader killed in the middle of writing a line leaves it without its end: the input stopped early
    (what came before is committed), not a line of bad JSON."""
    whole = orjson.dumps(cut)
    out, error = _write(tmp_path, A_RUN + [whole[: len(whole) // 2]])
    assert isinstance(error, TransientError), error
    assert error.message.startswith("the reading side stopped early: the input ended before "), error.message
    assert "'n.a'" in error.message and "its last line was cut" in error.message, error.message
    assert [m["type"] for m in out] == ["STATE", "STATE"] and _ids(tmp_path, "a") == [1, 2]


def test_a_last_line_without_its_newline_is_still_read(tmp_path):
    """A program that ends its last line without a newline is understood: the line is whole JSON."""
    ending = [_status("a", "COMPLETE"), orjson.dumps(_status("b", "COMPLETE"))]
    out, error = _write(tmp_path, A_RUN + ending)
    assert error is None and [m["type"] for m in out] == ["STATE", "STATE"]


def test_a_reader_error_after_commits_says_they_hold_and_points_to_the_reader(tmp_path):
    out, error = _write(tmp_path, A_RUN + [_record("a", id=9, v="z"), READER_ERROR])
    assert isinstance(error, UpstreamError) and error.failure_type == "config_error"
    assert error.message == ("the reading side failed (the reader's own error line says why); what its STATE "
                             "messages covered is committed, records after the last one are not")
    assert "cannot connect" not in error.message and error.internal_message == "the reader's error: cannot connect"
    assert [m["type"] for m in out] == ["STATE", "STATE"] and _ids(tmp_path, "a") == [1, 2]


def test_an_input_ended_by_complete_statuses_succeeds(tmp_path):
    out, error = _write(tmp_path, A_RUN + [_status("a", "COMPLETE"), _status("b", "COMPLETE")])
    assert error is None and [m["type"] for m in out] == ["STATE", "STATE"]
    out, error = _write(tmp_path, A_RUN[1:] + [_status("a", "COMPLETE"), _status("b", "COMPLETE")], CATALOG)
    assert error is None


def test_records_after_the_last_state_fail_even_when_every_stream_completed(tmp_path):
    lines = A_RUN + [_record("a", id=9, v="z"), _status("a", "COMPLETE"), _status("b", "COMPLETE")]
    out, error = _write(tmp_path, lines)
    assert isinstance(error, ProtocolError) and "records after its last STATE" in error.message
    assert _ids(tmp_path, "a") == [1, 2]


def _bad_value_lines(layout: str, rows: int, bad_at: int) -> list:
    """A CATALOG, ``rows`` records of stream a of which row ``bad_at`` has ``"id": "one"``, no STATE after."""
    lines: list = [catalog_message(CATALOG)]
    for i in range(rows):
        data = {"id": "one" if i == bad_at else i, "v": "x"}
        if layout == "read":  # read's own layout (the block path) ...
            lines.append(b'{"type":"RECORD","record":{"stream":"a","namespace":"n","emitted_at":1,"data":'
                         + orjson.dumps(data) + b"}}\n")
        else:  # ... or another program's key order (the line path)
            lines.append(orjson.dumps({"record": {"data": data, "stream": "a", "namespace": "n"}, "type": "RECORD"})
                         + b"\n")
    return lines


@pytest.mark.parametrize("layout, kind", [("read", "parquet"), ("other", "parquet"), ("read", "iceberg"),
                                          ("other", "iceberg")])
@pytest.mark.parametrize("rows, bad_at", [(5, 3), (BATCH_ROWS + 700, BATCH_ROWS + 123), (3000, 0)])
def test_a_value_of_the_wrong_type_names_its_line_stream_and_column_on_arrival(tmp_path, layout, kind, rows, bad_at):
    out, error = _write(tmp_path, _bad_value_lines(layout, rows, bad_at), kind=kind)
    assert isinstance(error, ProtocolError), error
    assert error.message.startswith(f"stdin line {bad_at + 2}: stream 'n.a', column 'id': "), error.message
    assert "'one'" in error.message
    assert out == [] and _ids(tmp_path, "a", kind) == []
