"""The Iceberg destination without a source: protocol lines into ``olake write`` (and the destination
in-process), read back with pyiceberg. Schema evolution, soft deletes, keyless streams, the cost of a
change commit, bad configs and incompatible tables."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from olake_cli.core.catalog import parse_catalog
from olake_cli.core.state import Chunk, State, StreamState
from olake_cli.destinations.iceberg.destination import IcebergDestination
from olake_cli.destinations.iceberg.snapshot import live_files
from tests.support.buffered import BufferedWriter
from tests.support.cli import run_olake, with_stream_ends, write_json


def _stream(columns: dict[str, str], key: list[str] | None = ("id",), mode: str = "cdc", name: str = "t") -> dict:
    props = {c: {"type": ["null", "string"], "x-olake-type": t} for c, t in columns.items()}
    return {"name": name, "namespace": "ns", "json_schema": {"type": "object", "properties": props},
            "supported_sync_modes": ["full_refresh", "incremental", "cdc"], "sync_mode": mode,
            "default_cursor_field": ["id"],
            "source_defined_primary_key": [[k] for k in key or []]}


def _lines(*messages: dict) -> bytes:
    return b"".join(orjson.dumps(m) + b"\n" for m in messages)


def _catalog(*streams: dict) -> dict:
    return {"type": "CATALOG", "catalog": {"streams": list(streams)}}


def _state(sync_type: str = "cdc", cursor: str = "p1", name: str = "t", **extra) -> dict:
    inner = {"cursor_field": cursor, "load_id": "L1", **extra}
    if sync_type == "full-load":  # a load just opened: one chunk, pending
        inner["chunks"] = [{"status": "pending", "min": None, "max": None}]
    return {"type": "STATE", "state": {"level": "stream", "version": "v1", "streams": [
        {"sync_type": sync_type, "stream_name": name, "stream_namespace": "ns", "stream_state": inner}]}}


def _record(data: dict, name: str = "t") -> dict:
    return {"type": "RECORD", "record": {"stream": name, "namespace": "ns", "emitted_at": 0, "data": data}}


def _change(op: str, seq: int, stream: str = "t", **data) -> dict:
    return _record({**data, "_olake_op": op, "_olake_op_id": [7, seq], "_olake_commit_ts": 1_700_000_000_000_000},
                   stream)


def _table(root: Path, name: str = "t"):
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("olake", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/warehouse")
    return catalog.load_table(("ns", name))


def _write(tmp_path: Path, lines: bytes, **config) -> tuple[Path, object]:
    root = tmp_path / "lake"
    dst = write_json(tmp_path / "dst.json", {"type": "iceberg", "path": str(root), **config})
    return root, run_olake("write", "--config", dst, stdin=with_stream_ends(lines))


def _rows(root: Path, name: str = "t") -> list[dict]:
    return sorted(_table(root, name).scan().to_arrow().to_pylist(), key=lambda r: (str(r["id"]), r["_olake_op_id"] or ""))


@pytest.mark.parametrize("old, new, stored", [
    ("int32", "int64", "long"), ("float32", "float64", "double"), ("decimal(10,2)", "decimal(14,2)", "decimal(14, 2)")])
def test_widened_column_is_promoted(tmp_path, old, new, stored):
    value = {"int32": 7, "float32": 1.5, "decimal(10,2)": "12.25"}[old]
    wide = {"int64": 2**40, "float64": 0.1, "decimal(14,2)": "123456789012.25"}[new]
    before, wider = _stream({"id": "int32", "v": old}), _stream({"id": "int32", "v": new})
    root, result = _write(tmp_path, _lines(_catalog(before), _state("full-load"), _record({"id": 1, "v": value}),
                                            _state(), _catalog(wider), _change("c", 1, id=2, v=wide),
                                            _state(cursor="p2")))
    assert result.returncode == 0, result.stderr.decode()
    added = _stream({"id": "int32", "v": new, "extra": "string"})  # the next run's catalog has a new column
    _, result = _write(tmp_path, _lines(_catalog(added), _change("u", 2, id=2, v=wide, extra="x"),
                                        _state(cursor="p3")))
    assert result.returncode == 0, result.stderr.decode()
    table = _table(root)
    assert str(table.schema().find_field("v").field_type) == stored
    assert table.schema().find_field("extra")
    rows = _rows(root)
    assert [r["id"] for r in rows] == [1, 2] and str(rows[1]["v"]) == str(wide) and rows[1]["extra"] == "x"


@pytest.mark.parametrize("wide, narrow, stored, value", [
    ("int64", "int32", "long", -2**31), ("float64", "float32", "double", 0.1),
    ("decimal(14,2)", "decimal(10,2)", "decimal(14, 2)", "-99999999.99")])
def test_a_catalog_narrower_than_the_table_keeps_the_wider_column(tmp_path, wide, narrow, stored, value):
    """A column widened during change capture, then a run with the original catalog: the table keeps
    its wider type and takes the narrower values exactly."""
    root, result = _write(tmp_path, _lines(_catalog(_stream({"id": "int32", "v": wide})), _state("full-load")))
    assert result.returncode == 0, result.stderr.decode()
    _, result = _write(tmp_path, _lines(_catalog(_stream({"id": "int32", "v": narrow})), _state("full-load"),
                                        _record({"id": 1, "v": value}), _state(), _change("u", 1, id=1, v=value),
                                        _change("c", 2, id=2, v=value), _state(cursor="p2")))
    assert result.returncode == 0, result.stderr.decode()
    assert str(_table(root).schema().find_field("v").field_type) == stored
    expected = str(pc.cast(pa.scalar(0.1, pa.float32()), pa.float64())) if narrow == "float32" else str(value)
    assert [str(r["v"]) for r in _rows(root)] == [expected, expected]


@pytest.mark.parametrize("old, new, value", [("string", "int64", 5), ("int64", "int32", 5),
                                             ("timestamp", "timestamptz", "2020-01-01T00:00:00.000000+00:00")])
def test_incompatible_table_fails_naming_the_column_and_commits_nothing(tmp_path, old, new, value):
    """A type Iceberg cannot promote comes only with a new load: changes under it fail, naming the column."""
    first = {"string": "a", "int64": 7, "timestamp": "2020-01-01T00:00:00.000000"}[old]
    root, result = _write(tmp_path, _lines(_catalog(_stream({"id": "int32", "v": old})), _state("full-load"),
                                           _record({"id": 1, "v": first}), _state()))
    assert result.returncode == 0, result.stderr.decode()
    table = _table(root)
    snapshot, schema = table.metadata_location, table.schema()
    _, result = _write(tmp_path, _lines(_catalog(_stream({"id": "int32", "v": new})), _change("c", 1, id=2, v=value),
                                        _state(cursor="p2")))
    errors = [line for line in result.stderr.decode().splitlines() if line.startswith("olake: error")]
    if (old, new) == ("int64", "int32"):  # a narrower source type: the table keeps its wider column
        assert result.returncode == 0 and not errors
        return
    assert result.returncode != 0 and len(errors) == 1, result.stderr.decode()
    assert "'v'" in errors[0] and "new load" in errors[0] and "nothing was committed" in errors[0]
    assert _table(root).metadata_location == snapshot and _table(root).schema() == schema


@pytest.mark.parametrize("new, stored, values", [("decimal(12,3)", "decimal(12, 3)", ["1.250", "-2.125"]),
                                                 ("numeric", "string", ["1.25", "1E+100"])])
def test_a_decimal_converted_by_value_rewrites_the_rows_in_place(tmp_path, new, stored, values):
    """A decimal whose scale grows, or that becomes decimal text, is no Iceberg promotion, but its values
    convert exactly: the next commit takes the new type with the table's rows rewritten, no new load."""
    root, result = _write(tmp_path, _lines(_catalog(_stream({"id": "int32", "v": "decimal(10,2)"})), _state("full-load"),
                                           _record({"id": 1, "v": "1.25"}), _state()))
    assert result.returncode == 0, result.stderr.decode()
    _, result = _write(tmp_path, _lines(_catalog(_stream({"id": "int32", "v": new})),
                                        _change("c", 1, id=2, v=values[1]), _state(cursor="p2")))
    assert result.returncode == 0, result.stderr.decode()
    assert "rewrites the table's rows with the new type(s)" in result.stderr.decode()
    assert str(_table(root).schema().find_field("v").field_type) == stored
    assert [r["v"] for r in _rows(root)] == (values if new == "numeric" else [Decimal(v) for v in values])


def _load_state(load_id: str, done: list[bool]) -> dict:
    chunks = [{"status": "succeed" if ok else "pending", "min": str(i), "max": str(i + 1)} for i, ok in enumerate(done)]
    return {"type": "STATE", "state": {"level": "stream", "version": "v1", "streams": [
        {"sync_type": "full-load", "stream_name": "t", "stream_namespace": "ns",
         "stream_state": {"cursor_field": "p1", "load_id": load_id, "chunks": chunks}}]}}


def test_a_type_iceberg_cannot_promote_changes_with_the_new_load_that_replaces_the_rows(tmp_path):
    """int -> string: the new load's files take a fresh field id; until its last chunk commits (two
    runs here) readers see the old rows with the old type, then the new rows with the new type."""
    old, new = _stream({"id": "int32", "v": "int32"}, mode="full_refresh"), \
        _stream({"id": "int32", "v": "string"}, mode="full_refresh")
    root, result = _write(tmp_path, _lines(_catalog(old), _load_state("L1", [False]), _record({"id": 1, "v": 7}),
                                           _load_state("L1", [True])))
    assert result.returncode == 0, result.stderr.decode()
    field_id = _table(root).schema().find_field("v").field_id
    _, result = _write(tmp_path, _lines(_catalog(new), _load_state("L2", [False, False]),
                                        _record({"id": 1, "v": "seven"}), _load_state("L2", [True, False])))
    assert result.returncode == 0, result.stderr.decode()
    assert [(r["id"], r["v"]) for r in _rows(root)] == [(1, 7)]
    assert str(_table(root).schema().find_field("v").field_type) == "int"
    _, result = _write(tmp_path, _lines(_catalog(new), _record({"id": 2, "v": "eight"}),
                                        _load_state("L2", [True, True])))
    assert result.returncode == 0, result.stderr.decode()
    assert [(r["id"], r["v"]) for r in _rows(root)] == [(1, "seven"), (2, "eight")]
    replaced = _table(root).schema().find_field("v")
    assert str(replaced.field_type) == "string" and replaced.field_id != field_id


def test_soft_delete_keeps_the_last_values_and_marks_the_row(tmp_path):
    stream = _stream({"id": "int32", "v": "string", "w": "string"})
    root, result = _write(tmp_path, _lines(
        _catalog(stream), _state("full-load"), _record({"id": 1, "v": "a", "w": "keep"}), _record({"id": 2, "v": "b"}),
        _state(), _change("u", 1, id=1, v="a2", _olake_toast_unchanged=["w"]), _change("d", 2, id=1),
        _change("d", 3, id=2), _change("c", 4, id=3, v="c"), _state(cursor="p2")), soft_delete=True)
    assert result.returncode == 0, result.stderr.decode()
    rows = [(r["id"], r["v"], r["w"], r["_olake_op"]) for r in _rows(root)]
    assert rows == [(1, "a2", "keep", "d"), (2, "b", None, "d"), (3, "c", None, "c")]


def test_keyless_stream_appends_every_change(tmp_path):
    stream = _stream({"id": "int32", "v": "string"}, key=None)
    root, result = _write(tmp_path, _lines(
        _catalog(stream), _state("full-load"), _record({"id": 1, "v": "a"}), _state(),
        _change("u", 1, id=1, v="b"), _change("d", 2, id=1, v="b"), _state(cursor="p2")))
    assert result.returncode == 0, result.stderr.decode()
    assert [(r["id"], r["v"], r["_olake_op"]) for r in _rows(root)] == [(1, "a", "r"), (1, "b", "u"), (1, "b", "d")]


def test_a_change_commit_touches_only_the_files_holding_its_keys(tmp_path):
    """Position deletes, not copy-on-write: untouched data files stay, one delete file per commit."""
    catalog = parse_catalog({"streams": [_stream({"id": "int64", "v": "string"})]})
    destination = IcebergDestination({"type": "iceberg", "path": str(tmp_path / "lake")}, lambda m: None)
    writer = BufferedWriter(destination, catalog)
    key = ("ns", "t")
    chunks = [Chunk("pending", str(i * 1000), str((i + 1) * 1000)) for i in range(4)]
    opened = StreamState("full-load", "t", "ns", "p0", chunks, load_id="L1")
    writer.commit(State("stream", streams=[opened]))
    for index in range(4):  # four chunks: four data files with disjoint key ranges
        writer.add(key, [{"id": i, "v": "load"} for i in range(index * 1000, (index + 1) * 1000)])
        done = opened.copy()
        for chunk in done.chunks[: index + 1]:
            chunk.status = "succeed"
        writer.commit(State("stream", streams=[done]))
    table = destination.streams[key].table
    data_before, _ = live_files(table)
    writer.add(key, [{"id": i, "v": "changed", "_olake_op": "u", "_olake_op_id": [9, seq]}
                     for seq, i in enumerate([5, 17, 900, 2500], 1)])  # keys in chunks 0 and 2 only
    writer.commit(State("stream", streams=[StreamState("cdc", "t", "ns", "p1", None, load_id="L1")]))
    table = destination.streams[key].table
    data_after, deletes = live_files(table)
    assert {f.file_path for f in data_before} <= {f.file_path for f in data_after}, "no data file was rewritten"
    assert len(data_after) == len(data_before) + 1 and len(deletes) == 1
    [delete_file] = deletes
    assert delete_file.record_count == 4
    rows = table.scan().to_arrow()
    assert rows.num_rows == 4000 and sorted(rows.filter(pc.equal(rows["v"], "changed"))["id"].to_pylist()) == [5, 17, 900, 2500]


def test_bad_configs_fail_with_one_clear_line(tmp_path):
    (tmp_path / "a-file").write_text("")
    cases = {
        "unknown catalog type": ({"type": "iceberg", "catalog": {"type": "nessie"}}, "nessie"),
        "warehouse under a file": ({"type": "iceberg", "path": str(tmp_path / "a-file" / "lake")}, "Not a directory"),
        "both path and catalog": ({"type": "iceberg", "path": str(tmp_path), "catalog": {"type": "rest"}},
                                  "exactly one of"),
        "unknown transform": ({"type": "iceberg", "path": str(tmp_path / "x"),
                               "partitioning": {"t": [{"column": "id", "transform": "bucket[0]"}]}}, "transform"),
    }
    for label, (config, expected) in cases.items():
        path = write_json(tmp_path / "dst.json", config)
        result = run_olake("check", "--config", path)
        errors = [line for line in result.stderr.decode().splitlines() if line.startswith("olake: error")]
        assert result.returncode != 0 and len(errors) == 1 and expected in errors[0], (label, result.stderr)
        assert json.loads(result.stdout.splitlines()[-1])["type"] == "TRACE"


def test_partition_column_must_exist(tmp_path):
    stream = _stream({"id": "int32"})
    _, result = _write(tmp_path, _lines(_catalog(stream), _state("full-load")),
                       partitioning={"t": [{"column": "missing", "transform": "identity"}]})
    assert result.returncode != 0 and b"partition column 'missing'" in result.stderr


def test_check_succeeds_on_a_fresh_folder(tmp_path):
    path = write_json(tmp_path / "dst.json", {"type": "iceberg", "path": str(tmp_path / "new" / "lake")})
    result = run_olake("check", "--config", path)
    assert result.returncode == 0, result.stderr.decode()
    assert json.loads(result.stdout)["connectionStatus"]["status"] == "SUCCEEDED"


def test_many_change_commits_are_compacted(tmp_path, monkeypatch):
    """Small change files and delete files are merged once there are too many; the rows stay exact."""
    from olake_cli.destinations.iceberg import maintenance

    monkeypatch.setattr(maintenance, "MAX_DELETE_FILES", 4)
    catalog = parse_catalog({"streams": [_stream({"id": "int64", "v": "string"})]})
    destination = IcebergDestination({"type": "iceberg", "path": str(tmp_path / "lake")}, lambda m: None)
    writer = BufferedWriter(destination, catalog)
    key, expected = ("ns", "t"), {}
    opened = StreamState("full-load", "t", "ns", "p0", [Chunk("pending", None, None)], load_id="L1")
    writer.commit(State("stream", streams=[opened]))
    writer.add(key, [{"id": i, "v": "load"} for i in range(300)])
    expected.update((i, "load") for i in range(300))
    writer.commit(State("stream", streams=[StreamState("cdc", "t", "ns", "p0", None, load_id="L1")]))
    seq = 0
    for commit in range(12):
        changes = []
        for i in range(commit * 7, commit * 7 + 40, 3):
            seq += 1
            if i % 5 == 0:
                changes.append({"id": i, "_olake_op": "d", "_olake_op_id": [9, seq]})
                expected.pop(i, None)
            else:
                changes.append({"id": i, "v": f"c{commit}", "_olake_op": "u", "_olake_op_id": [9, seq]})
                expected[i] = f"c{commit}"
        writer.add(key, changes)
        writer.commit(State("stream", streams=[
            StreamState("cdc", "t", "ns", f"p{commit + 1}", None, load_id="L1")]))
    table = destination.streams[key].table
    data, deletes = live_files(table)
    assert len(deletes) <= 4 and len(data) <= 6, (len(data), len(deletes))
    rows = table.scan().to_arrow()
    assert dict(zip(rows["id"].to_pylist(), rows["v"].to_pylist())) == expected
    assert rows.num_rows == len(expected)


@pytest.mark.parametrize("key_type, keys", [
    ("uuid", ["123e4567-e89b-12d3-a456-426614174000", "6ba7b810-9dad-11d1-80b4-00c04fd430c8"]),
    ("string", ["a", "é😀"]), ("date", ["0044-03-15 BC", "infinity"])])
def test_changes_merge_on_keys_of_any_type(tmp_path, key_type, keys):
    stream = _stream({"id": key_type, "v": "string"})
    first, second = keys
    root, result = _write(tmp_path, _lines(
        _catalog(stream), _state("full-load"), _record({"id": first, "v": "a"}), _record({"id": second, "v": "b"}),
        _state(), _change("u", 1, id=first, v="a2"), _change("d", 2, id=second), _change("c", 3, id=second, v="b3"),
        _state(cursor="p2")))
    assert result.returncode == 0, result.stderr.decode()
    rows = _table(root).scan().to_arrow()
    assert rows.num_rows == 2 and sorted(rows["v"].to_pylist()) == ["a2", "b3"]


def test_incremental_passes_upsert_and_an_older_pass_never_wins(tmp_path):
    stream = _stream({"id": "int32", "v": "string"}, mode="incremental")

    def passed(ms: int, **data) -> dict:  # an incremental row: every row of a pass has the pass's op id
        return _record({**data, "_olake_op_id": [ms, 0]})

    root, result = _write(tmp_path, _lines(
        _catalog(stream), _state("full-load"), _record({"id": 1, "v": "a"}), _record({"id": 2, "v": "b"}),
        _state("incremental"), passed(2000, id=2, v="b2"), passed(2000, id=3, v="c2"), _state("incremental", "p2"),
        passed(1000, id=2, v="stale"), passed(1000, id=4, v="d1"), _state("incremental", "p3")))
    assert result.returncode == 0, result.stderr.decode()
    assert [(r["id"], r["v"]) for r in _rows(root)] == [(1, "a"), (2, "b2"), (3, "c2"), (4, "d1")]
    assert b"older than the table's version" in result.stderr


def test_a_table_created_under_the_old_location_scheme_keeps_its_location(tmp_path):
    """Tables created before names were encoded into locations (at the catalog's default, the raw
    name) keep working where they are; only new tables get the encoded location."""
    from pyiceberg.catalog.sql import SqlCatalog

    from olake_cli.core.catalog import CatalogStream
    from olake_cli.destinations.iceberg.schema import stream_iceberg_schema
    from olake_cli.destinations.iceberg.tables import CREATE_PROPERTIES

    root = tmp_path / "lake"
    (root / "warehouse").mkdir(parents=True)
    legacy, fresh = _stream({"id": "int32", "v": "string"}, name="_legacy"), _stream({"id": "int32"}, name="_fresh")
    catalog = SqlCatalog("olake", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/warehouse")
    catalog.create_namespace("ns")
    catalog.create_table(("ns", "_legacy"), schema=stream_iceberg_schema(CatalogStream.from_dict(legacy)),
                         properties=CREATE_PROPERTIES)  # as olake created tables before
    _, result = _write(tmp_path, _lines(
        _catalog(legacy, fresh), _state("full-load", name="_legacy"), _record({"id": 1, "v": "a"}, "_legacy"),
        _record({"id": 2, "v": "b"}, "_legacy"), _state(name="_legacy"), _change("u", 1, "_legacy", id=1, v="a2"), _state(cursor="p2", name="_legacy"), _state("full-load", name="_fresh"), _record({"id": 7}, "_fresh"),
        _state(name="_fresh")))
    assert result.returncode == 0, result.stderr.decode()
    table = _table(root, "_legacy")
    assert table.location() == f"file://{root}/warehouse/ns/_legacy"
    files = [t.file.file_path for t in table.scan().plan_files()]
    assert files and all(f.startswith(f"{table.location()}/data/") for f in files)
    assert sorted(table.scan().to_arrow().select(["id", "v"]).to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "v": "a2"}, {"id": 2, "v": "b"}]
    assert _table(root, "_fresh").location() == f"file://{root}/warehouse/ns/%5Ffresh"
