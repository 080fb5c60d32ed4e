"""End to end: discover, then ``olake read | olake write`` into Parquet, compared value by value."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from tests.support.cli import read_into_write, run_olake, write_json, messages
from tests.support.verify import assert_table_matches, read_parquet

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "postgres" / "demo.sql"


@pytest.fixture(scope="module")
def demo_db(pg_cluster):
    """A database loaded with fixtures/postgres/demo.sql."""
    from tests.support.pgcluster import create_database

    create_database(pg_cluster, "demo_e2e")
    with psycopg.connect(pg_cluster.dsn("demo_e2e"), autocommit=True) as conn:
        conn.execute(FIXTURE.read_text())
        conn.execute("ANALYZE")
    return "demo_e2e"


def test_discover_read_write_roundtrip(pg_cluster, demo_db, tmp_path):
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(demo_db, schemas=["shop", "public"],
                                                                       chunk_rows=3000))
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "out")})
    disc = run_olake("discover", "--config", src)
    assert disc.returncode == 0, disc.stderr.decode()
    catalog_lines = messages(disc.stdout)
    assert [m["type"] for m in catalog_lines] == ["CATALOG"]
    catalog = catalog_lines[0]["catalog"]
    names = {(s["namespace"], s["name"]) for s in catalog["streams"]}
    assert len(names) >= 5
    assert not any(name.startswith("events_") for _, name in names), "partitions must not be streams"
    (tmp_path / "cat.json").write_bytes(disc.stdout)
    state = tmp_path / "st.json"

    result = read_into_write(["--config", src, "--catalog", str(tmp_path / "cat.json"), "--state", str(state)],
                             ["--config", dst, "--state", str(state)])
    assert result.read_code == 0, result.read_stderr.decode()[-3000:]
    assert result.write_code == 0, result.write_stderr.decode()[-3000:]

    final = json.loads(state.read_text())
    assert final["level"] == "global"
    assert {(s["stream_namespace"], s["stream_name"]) for s in final["streams"]} == names
    for stream in final["streams"]:
        assert not stream["stream_state"].get("chunks"), f"{stream['stream_name']} has chunks left"

    echoed = [m for m in messages(result.write_stdout)]
    assert echoed and all(m["type"] == "STATE" for m in echoed)
    with psycopg.connect(pg_cluster.dsn(demo_db), autocommit=True) as conn:
        for entry in catalog["streams"]:
            folder = tmp_path / "out" / entry["namespace"] / entry["name"]
            assert_table_matches(conn, entry["namespace"], entry["name"], entry["json_schema"],
                                 read_parquet(str(folder)))
