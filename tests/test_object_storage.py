"""Destinations on object storage: an Iceberg warehouse in an S3 bucket (moto's S3 server,
tests/support/object_store.py), with the endpoint and credentials in the destination's ``catalog``.

A multi-chunk PostgreSQL load goes through ``read | write`` (the driver writes the data files), then
``sync``'s full load (the Spark tasks write them) replaces it; the current table read back from the
bucket equals the source value by value, and the secret key never appears in any output.
"""

from __future__ import annotations

import itertools
import json
import subprocess
from pathlib import Path

import psycopg

from tests.support.cli import olake_cmd, olake_env, read_into_write, run_olake, write_json
from tests.support.object_store import ACCESS_KEY_ID, REGION, SECRET_ACCESS_KEY, create_bucket, keys
from tests.support.verify import assert_table_matches

_buckets = itertools.count()
TABLE_SQL = """
CREATE TABLE items (id bigint PRIMARY KEY, price numeric(12,3), name text, seen timestamptz, tags text[],
                    doc jsonb, raw bytea);
INSERT INTO items SELECT g, g / 7.0, 'item ' || g || repeat('é', g % 5),
       '2024-01-01'::timestamptz + g * interval '1 min', ARRAY['a' || g, NULL], jsonb_build_object('g', g),
       decode(lpad(to_hex(g), 8, '0'), 'hex')
FROM generate_series(1, 3000) g;
"""


def _catalog_properties(moto_server, tmp_path: Path, bucket: str) -> dict:
    """pyiceberg properties: a SQLite catalog here, the warehouse in ``bucket``."""
    return {"type": "sql", "uri": f"sqlite:///{tmp_path / bucket}.db", "warehouse": f"s3://{bucket}/warehouse",
            "s3.endpoint": moto_server.endpoint, "s3.region": REGION, "s3.access-key-id": ACCESS_KEY_ID,
            "s3.secret-access-key": SECRET_ACCESS_KEY}


def _rows(properties: dict, namespace: str, name: str):
    from pyiceberg.catalog import load_catalog

    return load_catalog("olake", **properties).load_table((namespace, name)).scan().to_arrow()


def _no_secret(*outputs: bytes) -> None:
    for output in outputs:
        assert SECRET_ACCESS_KEY.encode() not in output


def test_iceberg_warehouse_in_a_bucket_through_read_write_and_sync(pg_cluster, pg_db, moto_server, tmp_path):
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
        conn.execute(TABLE_SQL)
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(pg_db, chunk_strategy="primary_key",
                                                                      chunk_rows=1000))
    found = run_olake("discover", "--config", src)
    assert found.returncode == 0, found.stderr.decode()
    cat = tmp_path / "cat.json"
    cat.write_bytes(found.stdout)
    stream = json.loads(found.stdout)["catalog"]["streams"][0]
    columns = list(stream["json_schema"]["properties"])
    bucket = create_bucket(moto_server, f"olake-{next(_buckets)}")
    properties = _catalog_properties(moto_server, tmp_path, bucket)
    dst = write_json(tmp_path / "dst.json", {"type": "iceberg", "catalog": properties})
    piped = read_into_write(["--config", src, "--catalog", str(cat), "--state", str(tmp_path / "pipe.json")],
                            ["--config", dst, "--state", str(tmp_path / "pipe.json")])
    assert piped.read_code == 0 and piped.write_code == 0, piped.write_stderr.decode()[-3000:]
    _no_secret(piped.read_stderr, piped.write_stdout, piped.write_stderr)
    first = set(keys(moto_server, bucket, "warehouse/public/items/data/"))
    # sync's full load (fresh state) replaces the first one in one commit; its tasks write the files
    synced = subprocess.run(olake_cmd("sync", "--source", src, "--destination", dst, "--catalog", str(cat),
                                      "--state", str(tmp_path / "sync.json")),
                            capture_output=True, env=olake_env(), timeout=600)
    assert synced.returncode == 0, synced.stderr.decode()[-3000:]
    _no_secret(synced.stdout, synced.stderr)
    assert first and set(keys(moto_server, bucket, "warehouse/public/items/data/")) - first
    with psycopg.connect(pg_cluster.dsn(pg_db)) as conn:
        assert_table_matches(conn, "public", "items", stream["json_schema"],
                             _rows(properties, "public", "items").select(columns))


def test_check_writes_into_the_bucket_and_names_a_missing_one(moto_server, tmp_path):
    """``check`` writes (and removes) a probe object in the warehouse: a bucket that does not exist
    fails with one line naming the warehouse, the secret key in no output."""
    bucket = create_bucket(moto_server, f"olake-{next(_buckets)}")
    good = write_json(tmp_path / "good.json", {"type": "iceberg",
                                               "catalog": _catalog_properties(moto_server, tmp_path, bucket)})
    checked = run_olake("check", "--config", good)
    assert checked.returncode == 0, checked.stderr.decode()
    assert not [key for key in keys(moto_server, bucket) if ".olake-check-" in key]  # the probe is gone
    missing = _catalog_properties(moto_server, tmp_path, bucket)
    missing["warehouse"] = "s3://no-such-bucket/warehouse"
    bad = write_json(tmp_path / "bad.json", {"type": "iceberg", "catalog": missing})
    failed = run_olake("check", "--config", bad)
    _no_secret(failed.stdout, failed.stderr)
    errors = [line for line in failed.stderr.decode().splitlines() if line.startswith("olake: error")]
    assert failed.returncode != 0 and len(errors) == 1, failed.stderr.decode()
    assert "s3://no-such-bucket/warehouse" in errors[0] and "cannot write" in errors[0], errors
