"""NOT NULL source columns stay non-nullable in Parquet, except where changes need them nullable.

A ``cdc`` stream's files also receive deletes, which carry only the key: there only key columns keep
NOT NULL, in the files ``write`` spills and in those a ``sync`` task writes for the full load. A null
arriving for a NOT NULL column fails the run naming the stream and the column.
"""

from __future__ import annotations

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from olake_cli.core.codec.types import stored_schema
from olake_cli.destinations.parquet.chunk_sink import ParquetChunkSink
from tests.support.cli import run_olake, write_json

SCHEMA = {"type": "object", "properties": {
    "id": {"type": "integer", "x-olake-type": "int64"},
    "code": {"type": "string", "x-olake-type": "string"},
    "note": {"type": ["null", "string"], "x-olake-type": "string"}}}


def test_only_key_columns_keep_not_null_when_changes_follow():
    def nullable(schema):
        return {f.name: f.nullable for f in schema}

    assert nullable(stored_schema(SCHEMA, ["id"], with_changes=False)) == {"id": False, "code": False, "note": True}
    assert nullable(stored_schema(SCHEMA, ["id"], with_changes=True)) == {"id": False, "code": True, "note": True}
    assert nullable(stored_schema(SCHEMA, [], with_changes=True)) == {"id": True, "code": True, "note": True}


def test_sync_task_files_of_a_cdc_load_leave_non_key_columns_nullable(tmp_path):
    batch = pa.record_batch({"id": pa.array([1, 2], pa.int64()), "code": ["a", "b"], "note": [None, "x"]})
    sink = ParquetChunkSink(str(tmp_path), rows_per_file=1)
    for load_op_key, expected in ((None, {"id": False, "code": False, "note": True}),
                                  ("00000000016B37480000000000000000", {"id": False, "code": True, "note": True})):
        load = "plain" if load_op_key is None else "cdc"
        rows, _ = sink.write("n", "s", load, 0, load_op_key, SCHEMA, iter([(batch, None)]), ("id",))
        files = sorted((tmp_path / "n").rglob(f"*part-{load}-*.parquet"))  # staged, not yet live
        assert rows == 2 and len(files) == 2  # rows_per_file 1: a part per row
        for path in files:
            schema = pq.read_schema(path)
            assert {n: schema.field(n).nullable for n in expected} == expected, path


def test_a_null_in_a_not_null_column_names_stream_and_column(tmp_path):
    stream = {"name": "s", "namespace": "n", "json_schema": SCHEMA, "supported_sync_modes": ["full_refresh"],
              "sync_mode": "full_refresh", "source_defined_primary_key": [["id"]]}
    lines = [orjson.dumps({"type": "CATALOG", "catalog": {"streams": [stream]}})]
    for i, code in enumerate(["a", None]):
        lines.append(orjson.dumps({"type": "RECORD", "record": {"stream": "s", "namespace": "n", "emitted_at": 1,
                                                               "data": {"id": i, "code": code, "note": None}}}))
    state = {"level": "global", "version": "v1", "streams": [
        {"sync_type": "incremental", "stream_name": "s", "stream_namespace": "n", "stream_state": {"cursor_field": "1"}}]}
    lines.append(orjson.dumps({"type": "STATE", "state": state}))
    config = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "out")})
    result = run_olake("write", "--config", config, stdin=b"\n".join(lines) + b"\n")
    assert result.returncode != 0
    errors = [line for line in result.stderr.decode().splitlines() if line.startswith("olake: error")]
    assert len(errors) == 1 and "stream 'n.s', column 'code'" in errors[0] and "NOT NULL" in errors[0], errors
    assert not list((tmp_path / "out").rglob("*.parquet"))
