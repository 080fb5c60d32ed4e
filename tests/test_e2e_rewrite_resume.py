"""A ctid full load killed part way, the table rewritten (VACUUM FULL) after deletes and updates, resumed.

ctid ranges name physical places: after a rewrite the unfinished ranges hold other rows than before,
so resuming them would lose rows (moved into finished ranges) and repeat others. The state records the
table's relfilenode with the chunks; the resume sees it changed and loads the stream anew. The
destination then equals the source exactly, without duplicates (the new load replaces the partial one).
"""

from __future__ import annotations

import json

import psycopg

from tests.support.cli import kill_read_after_chunks, run_olake, write_json
from tests.support.verify import assert_table_matches, read_parquet

ROWS = 12_000


def _stream_state(state_path) -> dict:
    try:
        streams = json.loads(state_path.read_text())["streams"]
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return next((s["stream_state"] for s in streams if s["stream_name"] == "parts"), {})


def test_resume_after_vacuum_full_reloads_the_stream(pg_cluster, pg_db, tmp_path):
    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"""CREATE TABLE parts (id int PRIMARY KEY, label text, weight numeric(8,2));
                         INSERT INTO parts SELECT g, repeat('p', 150) || g, g / 4.0
                         FROM generate_series(1, {ROWS}) g; ANALYZE parts;""")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, chunk_rows=600, max_parallel=1, batch_rows=200))
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "out")})
    disc = run_olake("discover", "--config", src)
    assert disc.returncode == 0, disc.stderr
    (tmp_path / "cat.json").write_bytes(disc.stdout)
    state = tmp_path / "st.json"
    kill_read_after_chunks(["--config", src, "--catalog", str(tmp_path / "cat.json"), "--state", str(state)],
                                  ["--config", dst, "--state", str(state)])
    at_kill = _stream_state(state)
    assert at_kill["chunk_column"] == "ctid"
    assert 0 < sum(c["status"] != "succeed" for c in at_kill["chunks"]) < len(at_kill["chunks"])

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM parts WHERE id % 3 = 0 OR id < 2000")
        conn.execute("UPDATE parts SET weight = -weight, label = 'moved ' || id WHERE id % 7 = 0")
        conn.execute("VACUUM FULL parts")

    resumed = run_olake("sync", "--source", src, "--destination", dst, "--catalog", str(tmp_path / "cat.json"),
                        "--state", str(state))
    assert resumed.returncode == 0, resumed.stderr.decode()[-3000:]
    assert b"parts: the table was rewritten" in resumed.stderr
    final = _stream_state(state)
    assert not final.get("chunks") and final["load_id"] != at_kill["load_id"]

    data = read_parquet(str(tmp_path / "out" / "public" / "parts"))
    catalog = json.loads((tmp_path / "cat.json").read_text())["catalog"]
    schema = next(s for s in catalog["streams"] if s["name"] == "parts")["json_schema"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        # a multiset comparison with equal counts: no row lost, none duplicated
        assert_table_matches(conn, "public", "parts", schema, data.select(list(schema["properties"])))
