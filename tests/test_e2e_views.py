"""Views and materialized views are discovered for full_refresh (and incremental) and copied exactly."""

from __future__ import annotations

import json

import psycopg

from tests.support.cli import read_into_write, run_olake, write_json
from tests.support.verify import assert_table_matches, read_parquet


def test_views_and_materialized_views_copy_exactly(pg_cluster, pg_db, tmp_path):
    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE sales (id int PRIMARY KEY, region text, amount numeric(10,2), at timestamptz)")
        conn.execute("INSERT INTO sales SELECT g, 'r' || (g % 5), g * 1.5, '2024-01-01'::timestamptz + g * interval '1 hour' "
                     "FROM generate_series(1, 3000) g")
        conn.execute("CREATE VIEW big_sales AS SELECT id, region, amount, at FROM sales WHERE amount > 100")
        conn.execute("CREATE MATERIALIZED VIEW by_region AS SELECT region, sum(amount) AS total FROM sales GROUP BY region")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(pg_db, chunk_rows=500))
    disc = run_olake("discover", "--config", src)
    assert disc.returncode == 0, disc.stderr
    catalog = json.loads(disc.stdout)["catalog"]
    streams = {s["name"]: s for s in catalog["streams"]}
    assert streams["big_sales"]["supported_sync_modes"] == ["full_refresh", "incremental"]
    assert streams["big_sales"]["x-olake"]["relkind"] == "view"
    assert "cdc" not in streams["by_region"]["supported_sync_modes"]
    assert streams["by_region"]["x-olake"]["relkind"] == "materialized_view"
    assert "cdc" in streams["sales"]["supported_sync_modes"]
    streams["big_sales"]["sync_mode"] = "incremental"
    streams["big_sales"]["cursor_field"] = ["at"]
    (tmp_path / "cat.json").write_text(json.dumps(catalog))
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "lake")})
    state = tmp_path / "st.json"
    result = read_into_write(["--config", src, "--catalog", str(tmp_path / "cat.json"), "--state", str(state)],
                             ["--config", dst, "--state", str(state)])
    assert result.read_code == 0 and result.write_code == 0, result.read_stderr.decode()[-2000:]
    with psycopg.connect(dsn) as conn:
        for name in ("sales", "big_sales", "by_region"):
            assert_table_matches(conn, "public", name, streams[name]["json_schema"],
                                 read_parquet(str(tmp_path / "lake" / "public" / name)))
