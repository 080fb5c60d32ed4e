"""``rows_per_file`` bounds every Parquet file, in ``read | write`` and in ``sync`` (the tasks' files);
both keep NOT NULL columns non-nullable in the files."""

from __future__ import annotations

import json

import psycopg
import pyarrow.parquet as pq

from tests.support.cli import read_into_write, run_olake, write_json
from tests.support.verify import assert_table_matches, read_parquet

ROWS = 5_000


def test_rows_per_file_bounds_every_file(pg_cluster, pg_db, tmp_path):
    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, name text, code text NOT NULL)")
        conn.execute(f"INSERT INTO items SELECT g, 'item ' || g, 'c' || g FROM generate_series(1, {ROWS}) g")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(pg_db, chunk_strategy="primary_key",
                                                                      chunk_rows=2_000))
    disc = run_olake("discover", "--config", src)
    assert disc.returncode == 0, disc.stderr
    (tmp_path / "cat.json").write_bytes(disc.stdout)
    for mode in ("pipe", "sync"):
        root = tmp_path / mode
        dst = write_json(tmp_path / f"{mode}.json", {"type": "parquet", "path": str(root), "rows_per_file": 700})
        if mode == "pipe":
            result = read_into_write(["--config", src, "--catalog", str(tmp_path / "cat.json")], ["--config", dst])
            assert result.read_code == 0 and result.write_code == 0, result.write_stderr.decode()[-2000:]
        else:
            result = run_olake("sync", "--source", src, "--destination", dst, "--catalog", str(tmp_path / "cat.json"))
            assert result.returncode == 0, result.stderr.decode()[-2000:]
            assert f"wrote 0 record(s) (plus {ROWS} row(s) written by the chunk tasks)".encode() in result.stderr
        folder = root / "public" / "items"
        sizes = sorted(pq.ParquetFile(f).metadata.num_rows for f in folder.glob("*.parquet"))
        assert sum(sizes) == ROWS and max(sizes) == 700, sizes
        assert len(sizes) >= ROWS // 700 + 1
        for path in folder.glob("*.parquet"):
            schema = pq.read_schema(path)
            assert [(n, schema.field(n).nullable) for n in ("id", "name", "code")] == [
                ("id", False), ("name", True), ("code", False)], (mode, schema)
        stream = next(s for s in json.loads(disc.stdout)["catalog"]["streams"] if s["name"] == "items")
        with psycopg.connect(dsn) as conn:
            assert_table_matches(conn, "public", "items", stream["json_schema"], read_parquet(str(folder)))
