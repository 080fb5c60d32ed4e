"""Destinations on object storage (moto's S3 server, tests/support/object_store.py): an Iceberg warehouse
in a bucket, with the endpoint and credentials in the destination's ``catalog``, and the Parquet
destination at ``s3://bucket/prefix`` (``s3.*`` fields), whose commit point is the manifest object.

Iceberg: a multi-chunk PostgreSQL load goes through ``read | write`` (the driver writes the data files),
then ``sync``'s full load (the Spark tasks write them) replaces it. Parquet: multi-chunk loads through
``read | write`` and ``sync``, then changes (cdc) and a replacing full_refresh load in a ``sync`` killed
at a commit step and run again; runs of ``write`` killed at each commit step of a load replacement. What
a reader sees is read as the README says (the manifest's ``live_files``) and compared value by value
with the source; nothing is left that no manifest lists, and the secret key never appears in any output.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
from pathlib import Path

import psycopg
import pytest

from tests.support.cdc import discover_catalog
from tests.support.cli import olake_cmd, olake_env, read_into_write, run_olake, write_json
from tests.support.object_store import (ACCESS_KEY_ID, REGION, SECRET_ACCESS_KEY, create_bucket, keys,
                                        manifest_of, parquet_config, parquet_rows, unlisted_objects)
from tests.support.protocol_lines import CHUNKS_1, CHUNKS_2, catalog, full_load, rows, state, write
from tests.support.verify import assert_table_matches, latest_versions

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
    assert synced.returncode == 0, _said(synced)
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


PARQUET_SQL = TABLE_SQL + """
CREATE TABLE prices (id int PRIMARY KEY, amount numeric(10,2), label text);
INSERT INTO prices SELECT g, g * 1.25, 'first ' || g FROM generate_series(1, 2500) g;
"""
CHANGES_SQL = """
INSERT INTO items SELECT g, g / 3.0, 'new ' || g, now(), ARRAY['n'], '{"new": true}', '\\x00ff'
FROM generate_series(3001, 3100) g;
UPDATE items SET price = price + 1, name = name || ' (changed)', tags = ARRAY[]::text[] WHERE id % 50 = 0;
DELETE FROM items WHERE id % 97 = 0;
UPDATE items SET id = id + 100000 WHERE id = 1001;
DELETE FROM prices WHERE id > 2000;
UPDATE prices SET label = 'second ' || id, amount = amount * 2;
INSERT INTO prices VALUES (9001, 1.5, 'second new');
"""


def _run_sync(src: str, dst: str, cat: str, state: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(olake_cmd("sync", "--source", src, "--destination", dst, "--catalog", cat,
                                    "--state", str(state)), capture_output=True, env={**olake_env(), **env},
                          timeout=600)


def _said(run: subprocess.CompletedProcess) -> str:
    """A failed run's stderr and the end of its stdout (a TRACE there carries the failure's stack)."""
    return run.stderr.decode()[-3000:] + run.stdout.decode()[-3000:]


def _assert_stream_matches(conn, moto_server, root: str, table: str, stream: dict) -> None:
    """The stream read through its manifest, its newest version per key (deletes dropped), equals the
    source table value by value."""
    rows = parquet_rows(moto_server, root, "public", table)
    assert rows is not None, f"no live files for public.{table} under {root}"
    assert_table_matches(conn, "public", table, stream["json_schema"], latest_versions(rows, ["id"]))


def test_parquet_in_a_bucket_loads_changes_replaces_and_survives_a_kill(pg_cluster, pg_db, moto_server, tmp_path):
    """Multi-chunk loads into ``s3://bucket/pipe`` (read | write: the driver writes) and ``s3://bucket/sync``
    (sync: the Spark tasks write the chunk objects); then changes to the cdc stream and a replacing
    full_refresh load in one sync, SIGKILLed right after a manifest was written and run again."""
    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(PARQUET_SQL)
    bucket = create_bucket(moto_server, f"olake-{next(_buckets)}")
    slots = [f"s3slot_{pg_db}_{way}"[:60] for way in ("pipe", "sync")]
    sources = [write_json(tmp_path / f"src-{way}.json", pg_cluster.source_config(
        pg_db, chunk_strategy="primary_key", chunk_rows=1000, replication_slot=slot, publication="s3pub",
        create_slot_and_publication=True)) for way, slot in zip(("pipe", "sync"), slots)]
    catalog = discover_catalog(sources[0], tmp_path / "cat.json", {"items": "cdc"})
    streams = {s["name"]: s for s in catalog["streams"]}
    cat = str(tmp_path / "cat.json")
    pipe_dst = write_json(tmp_path / "pipe.json", parquet_config(moto_server, bucket, "pipe", rows_per_file=700))
    sync_dst = write_json(tmp_path / "sync.json", parquet_config(moto_server, bucket, "sync", rows_per_file=700))
    outputs: list[bytes] = []
    try:
        piped = read_into_write(["--config", sources[0], "--catalog", cat, "--state", str(tmp_path / "pipe-st.json")],
                                ["--config", pipe_dst, "--state", str(tmp_path / "pipe-st.json")])
        outputs += [piped.read_stderr, piped.write_stdout, piped.write_stderr]
        assert piped.read_code == 0 and piped.write_code == 0, piped.write_stderr.decode()[-3000:]
        assert "chunk 3/3" in piped.read_stderr.decode()
        synced = _run_sync(sources[1], sync_dst, cat, tmp_path / "sync-st.json")
        outputs += [synced.stdout, synced.stderr]
        assert synced.returncode == 0, _said(synced)
        with psycopg.connect(dsn) as conn:
            for root in (f"{bucket}/pipe", f"{bucket}/sync"):
                for table in ("items", "prices"):
                    _assert_stream_matches(conn, moto_server, root, table, streams[table])
        # the tasks' objects, named by chunk and part (a chunk of ~1000 rows is two parts of at most 700)
        live = manifest_of(moto_server, f"{bucket}/sync", "public", "items")["live_files"]
        assert all(re.fullmatch(r"\.items%\.[^/]+/part-.+-c\d{6}-\d{4}\.parquet", n) for n in live), live
        assert any(n.endswith("-0001.parquet") for n in live), live
        first_prices = manifest_of(moto_server, f"{bucket}/sync", "public", "prices")["live"]

        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(CHANGES_SQL)
        killed = _run_sync(sources[1], sync_dst, cat, tmp_path / "sync-st.json",
                           OLAKE_TEST_CRASH_AT="manifest-written", OLAKE_TEST_CRASH_AFTER="1")
        outputs += [killed.stdout, killed.stderr]
        assert killed.returncode == -9, killed.stderr.decode()[-3000:]
        again = _run_sync(sources[1], sync_dst, cat, tmp_path / "sync-st.json")
        outputs += [again.stdout, again.stderr]
        assert again.returncode == 0, _said(again)
        with psycopg.connect(dsn) as conn:
            _assert_stream_matches(conn, moto_server, f"{bucket}/sync", "items", streams["items"])
            prices = parquet_rows(moto_server, f"{bucket}/sync", "public", "prices")
            assert set(prices.column("label").to_pylist()) <= {f"second {i}" for i in range(1, 2001)} | {"second new"}
            _assert_stream_matches(conn, moto_server, f"{bucket}/sync", "prices", streams["prices"])
        replaced = manifest_of(moto_server, f"{bucket}/sync", "public", "prices")
        assert replaced["live"] != first_prices
        assert unlisted_objects(moto_server, bucket, "sync") == [] and unlisted_objects(moto_server, bucket, "pipe") == []
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for slot in slots:
                conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                             "WHERE slot_name = %s", (slot,))
    _no_secret(*outputs)


def test_a_chunk_committed_before_the_state_file_leaves_its_live_objects_alone(pg_cluster, pg_db, moto_server,
                                                                               tmp_path):
    """sync killed right after the manifest that commits chunk 0 (before the state file says so), then rows
    of chunk 0 deleted: the rerun resumes from the manifest's record, so it neither reads chunk 0 again nor
    rewrites the objects the manifest lists (a reader would see two attempts' parts, and a part a shorter
    attempt does not write would be deleted under the manifest); the destination keeps the committed chunk."""
    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE shrink (id int PRIMARY KEY, s text);"
                     "INSERT INTO shrink SELECT g, 'row ' || g FROM generate_series(1, 2000) g;")
    bucket = create_bucket(moto_server, f"olake-{next(_buckets)}")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(pg_db, chunk_strategy="primary_key",
                                                                      chunk_rows=1000))
    cat = str(tmp_path / "cat.json")
    discover_catalog(src, tmp_path / "cat.json", {})
    dst = write_json(tmp_path / "dst.json", parquet_config(moto_server, bucket, "lake", rows_per_file=400))
    state = tmp_path / "st.json"
    sync = ["sync", "--source", src, "--destination", dst, "--catalog", cat, "--state", str(state),
            "--max-parallel", "1"]
    killed = run_olake(*sync, env={"OLAKE_TEST_CRASH_AT": "manifest-written", "OLAKE_TEST_CRASH_AFTER": "1"})
    assert killed.returncode == -9, killed.stderr.decode()[-3000:]
    live = manifest_of(moto_server, f"{bucket}/lake", "public", "shrink")["live_files"]
    assert len(live) == 3 and all("-c000000-" in name for name in live), live  # chunk 0: 400 + 400 + 200 rows

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM shrink WHERE id <= 300")  # chunk 0 read again: 700 rows, two parts
    again = run_olake(*sync)
    assert again.returncode == 0, _said(again)
    assert b"the destination committed full-load, 1 of 2 chunk(s) done: resuming from the destination's record" \
        in again.stderr, again.stderr.decode()[-3000:]  # the manifest is the truth: chunk 0 is not read again
    final = manifest_of(moto_server, f"{bucket}/lake", "public", "shrink")["live_files"]
    assert set(live) <= set(final) and len(final) == 6, final
    loaded = parquet_rows(moto_server, f"{bucket}/lake", "public", "shrink")  # every listed object is readable
    assert sorted(loaded.column("id").to_pylist()) == list(range(1, 2001)), "the committed chunk 0 stays whole"
    assert unlisted_objects(moto_server, bucket, "lake") == []


# (step, times the step is let through, the load a reader sees after the kill): the manifest object is
# the commit point, so a kill right after the last chunk's manifest shows the new load already
KILLS = [("staged", 3, "L1"), ("manifest-written", 3, "L2"), ("state-saved", 2, "L1")]


@pytest.mark.parametrize("step,after,seen_load", KILLS)
def test_parquet_commit_in_a_bucket_killed_at_each_step(moto_server, tmp_path, step, after, seen_load):
    """``olake write`` of a load L2 replacing L1 (protocol lines as ``read`` sends them), SIGKILLed at a
    commit step: a reader of the manifest sees one whole load, the run from the state file ends with
    L2 exactly, and the next commit deletes L1's objects; no object is left that no manifest lists."""
    bucket = create_bucket(moto_server, f"olake-{next(_buckets)}")
    dst = write_json(tmp_path / "dst.json", parquet_config(moto_server, bucket))
    state_file, root = tmp_path / "st.json", f"{bucket}/lake"

    def visible() -> list[tuple]:
        table = parquet_rows(moto_server, root, "public", "t")
        return sorted(zip(table.column("id").to_pylist(), table.column("v").to_pylist()))

    first = write(dst, full_load("L1", CHUNKS_1), state_file)
    assert first.returncode == 0, first.stderr.decode()
    assert visible() == rows("L1", range(80))
    killed = write(dst, full_load("L2", CHUNKS_2), state_file, crash_at=step, crash_after=after)
    assert killed.returncode == -9, killed.stderr.decode()
    assert visible() == {"L1": rows("L1", range(80)), "L2": rows("L2", range(130))}[seen_load]
    saved = json.loads(state_file.read_text())["streams"][0]["stream_state"]
    done = sum(c["status"] == "succeed" for c in saved.get("chunks") or [])
    assert saved["load_id"] == "L2" and done == 2
    again = write(dst, full_load("L2", CHUNKS_2, done=done), state_file)
    assert again.returncode == 0, again.stderr.decode()
    assert visible() == rows("L2", range(130)), "rows lost or duplicated after the resumed run"
    assert write(dst, [catalog(), state("L2", None)], state_file).returncode == 0
    objects = [k for k in keys(moto_server, bucket, "lake/") if not k.endswith("/")]
    assert {k.rsplit("/", 1)[0] for k in objects} == {"lake/public", "lake/public/.t%.L2"}, objects
    assert unlisted_objects(moto_server, bucket, "lake") == []
    _no_secret(first.stderr, killed.stderr, again.stderr)


def test_parquet_check_names_a_missing_bucket_without_the_secret(moto_server, tmp_path):
    """``check`` writes and removes a probe object; a missing bucket fails with one line naming the
    path; ``s3.*`` fields with a local path are a config error."""
    bucket = create_bucket(moto_server, f"olake-{next(_buckets)}")
    good = run_olake("check", "--config", write_json(tmp_path / "good.json", parquet_config(moto_server, bucket)))
    assert good.returncode == 0, good.stderr.decode()
    assert [k for k in keys(moto_server, bucket) if not k.endswith("/")] == []  # the probe is gone
    failed = run_olake("check", "--config", write_json(tmp_path / "bad.json",
                                                       parquet_config(moto_server, "no-such-bucket")))
    _no_secret(failed.stdout, failed.stderr)
    errors = [line for line in failed.stderr.decode().splitlines() if line.startswith("olake: error")]
    assert failed.returncode != 0 and len(errors) == 1, failed.stderr.decode()
    assert "s3://no-such-bucket/lake" in errors[0] and "cannot write" in errors[0], errors
    local = {**parquet_config(moto_server, bucket), "path": str(tmp_path / "lake")}
    mixed = run_olake("check", "--config", write_json(tmp_path / "mixed.json", local))
    _no_secret(mixed.stdout, mixed.stderr)
    assert mixed.returncode != 0 and b"applies only to a path on object storage" in mixed.stderr
