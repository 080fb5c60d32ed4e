"""RelationWatch: a new pgoutput Relation version against the catalog, types resolved on a real server."""

from __future__ import annotations

import psycopg
import pytest

from olake_cli.core.catalog import CatalogStream
from olake_cli.core.errors import ConfigError
from olake_cli.sources.postgres.relation_watch import RelationWatch

INT4, INT8, TEXT, NUMERIC, FLOAT4, FLOAT8 = 23, 20, 25, 1700, 700, 701


def _stream() -> CatalogStream:
    props = {"id": {"type": ["integer"], "x-olake-type": "int32"},
             "n": {"type": ["null", "integer"], "x-olake-type": "int32"},
             "ratio": {"type": ["null", "number", "string"], "x-olake-type": "float32"},
             "code": {"type": ["null", "string"], "x-olake-type": "string"}}
    return CatalogStream("acct", "public", {"type": "object", "properties": props})


@pytest.fixture()
def watch(pg_cluster, pg_db):
    logged: list[str] = []
    watch = RelationWatch(lambda: psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True), logged.append)
    watch.logged = logged
    yield watch
    watch.close()


def test_same_and_narrower_versions_need_nothing(watch):
    stream = _stream()
    assert watch.check(stream, [("id", INT4, -1), ("n", INT4, -1), ("ratio", FLOAT4, -1), ("code", TEXT, -1)]) is None
    stream.json_schema["properties"]["n"]["x-olake-type"] = "int64"  # replaying a version older than a widening
    assert watch.check(stream, [("id", INT4, -1), ("n", INT4, -1), ("ratio", FLOAT4, -1), ("code", TEXT, -1)]) is None
    assert watch.logged == []


def test_widening_returns_the_wider_stream_and_keeps_nullability(watch):
    stream = _stream()
    wider = watch.check(stream, [("id", INT8, -1), ("n", INT8, -1), ("ratio", FLOAT8, -1), ("code", TEXT, -1)])
    props = wider.json_schema["properties"]
    assert props["id"]["x-olake-type"] == "int64" and "null" not in props["id"]["type"]
    assert props["n"]["x-olake-type"] == "int64" and "null" in props["n"]["type"]
    assert props["ratio"]["x-olake-type"] == "float64"
    assert stream.json_schema["properties"]["n"]["x-olake-type"] == "int32"  # the original is untouched
    assert any("widened at the source" in line for line in watch.logged)


def test_dropped_and_added_columns_warn_once(watch):
    stream = _stream()
    columns = [("id", INT4, -1), ("n", INT4, -1), ("ratio", FLOAT4, -1)]
    assert watch.check(stream, columns) is None
    assert watch.check(stream, columns) is None
    assert len([line for line in watch.logged if "code were dropped" in line]) == 1


@pytest.mark.parametrize("columns,text", [
    ([("id", INT4, -1), ("n", INT4, -1), ("ratio", FLOAT4, -1), ("code", NUMERIC, -1)], "'code' string -> numeric"),
    ([("id", INT4, -1), ("n", TEXT, -1), ("ratio", FLOAT4, -1), ("code", TEXT, -1)], "'n' int32 -> string"),
    ([("id", INT4, -1), ("n", INT4, -1), ("ratio", FLOAT4, -1), ("label", TEXT, -1)], "code disappeared while label"),
])
def test_changes_that_lose_values_raise_a_config_error(watch, columns, text):
    with pytest.raises(ConfigError, match=text):
        watch.check(_stream(), columns)
