"""``olake sync`` into several destinations at once: one capture, every destination gets every change.

A writer changes the source while ``sync --follow`` feeds PostgreSQL, Parquet and Iceberg; the run is
SIGKILLed at seeded moments and started again (each destination resumes from its own record, the one
further on drops what it holds); then the PostgreSQL target's server is stopped while the others go on,
and the slot never moves past what the stopped one committed; once it is back and the writer stops,
each destination equals the source value by value. Bad input: the same destination twice, two configs of
one place, ``--state`` with several destinations: one line, nothing written.
"""

from __future__ import annotations

import os
import subprocess
import time

import psycopg

from tests.support.cdc import discover_catalog
from tests.support.cli import run_olake, trace_errors, write_json
from tests.support.follow import (Incrementer, create_counted_table, iceberg_equals_source, kill_and_restart,
                                  lake_equals_source, start_olake, stop, wait_until)
from tests.support.pg_compare import table_texts
from tests.support.pgcluster import create_database

COLUMNS = ["id", "v", "note"]


def _pg_equals(source: str, target: str) -> bool:
    try:
        return table_texts(target, "public", "t", COLUMNS) == table_texts(source, "public", "t", COLUMNS)
    except psycopg.Error:
        return False  # no table yet, or the server is down


def _confirmed_lsn(dsn: str, slot: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        text = conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                            (slot,)).fetchone()[0]
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


def _pg_committed_lsn(target: str) -> int:
    """The commit LSN of the change position the PostgreSQL destination's record holds for ``public.t``."""
    with psycopg.connect(target, autocommit=True) as conn:
        (entry,) = conn.execute("SELECT state FROM _olake.streams WHERE stream_name = 't'").fetchone()
    high, low = entry.get("stream_state", entry)["cursor_field"].split("/")
    return (int(high, 16) << 32) | int(low, 16)


def _rows(lake) -> int:
    from tests.support.verify import read_parquet

    return read_parquet(str(lake / "public" / "t")).num_rows


def _start_pg(cluster) -> None:
    log = os.path.join(os.path.dirname(cluster.datadir), "log")
    cluster._run([os.path.join(cluster.bin_dir, "pg_ctl"), "-D", cluster.datadir, "-l", log, "-w", "start"])


def _stop_pg(cluster) -> None:
    cluster._run([os.path.join(cluster.bin_dir, "pg_ctl"), "-D", cluster.datadir, "-m", "fast", "-w", "stop"])


def test_sync_follow_into_three_destinations_survives_kills_and_a_destination_down(
        spare_cluster, pg_target, target_db, tmp_path):
    create_database(spare_cluster, "fan_src")
    source = spare_cluster.dsn("fan_src")
    create_counted_table(source)
    src = write_json(tmp_path / "src.json", spare_cluster.source_config(
        "fan_src", replication_slot="fan_out", publication="fan_out_pub", create_slot_and_publication=True))
    dst_pg = write_json(tmp_path / "pg.json", pg_target.destination_config(target_db))
    dst_lake = write_json(tmp_path / "lake.json", {"type": "parquet", "path": str(tmp_path / "lake")})
    dst_ice = write_json(tmp_path / "ice.json", {"type": "iceberg", "path": str(tmp_path / "ice")})
    discover_catalog(src, tmp_path / "cat.json", {"t": "cdc"})
    args = ["sync", "--source", src, "--destination", dst_pg, "--destination", dst_lake, "--destination", dst_ice,
            "--catalog", str(tmp_path / "cat.json"), "--follow", "--commit-interval", "0.5"]
    log, target = tmp_path / "sync.log", pg_target.dsn(target_db)
    writer = Incrementer(source, seed=21)
    writer.start()
    try:
        run = start_olake(args, log, stdout=subprocess.DEVNULL)
        wait_until(lambda: "following the change log" in log.read_text(), "the change phase starts", run=run)
        for seed in (3, 4):
            run = kill_and_restart(run, args, log, seed=seed)
        time.sleep(2.0)
        held = _pg_committed_lsn(target)
        _stop_pg(pg_target)
        try:
            wait_until(lambda: "the other destinations go on" in log.read_text(), "the run notices", run=run)
            lake_rows = _rows(tmp_path / "lake")
            time.sleep(6.0)  # the others go on committing meanwhile; the slot waits for the stopped one
            assert _rows(tmp_path / "lake") > lake_rows
            assert _confirmed_lsn(source, "fan_out") <= held
            assert run.poll() is None, log.read_text()[-3000:]
        finally:
            _start_pg(pg_target)
        time.sleep(2.0)
    finally:
        writer.stop()
    assert writer.transactions > 100
    wait_until(lambda: _pg_equals(source, target), "the PostgreSQL target equals the source", timeout=120, run=run)
    wait_until(lambda: lake_equals_source(tmp_path / "lake" / "public" / "t", source),
               "the Parquet files equal the source", run=run)
    wait_until(lambda: iceberg_equals_source(tmp_path / "ice", source), "the Iceberg table equals the source", run=run)
    assert stop(run) < 15 and run.returncode == 0, log.read_text()[-3000:]
    assert _pg_equals(source, target) and iceberg_equals_source(tmp_path / "ice", source)


def test_sync_into_several_destinations_refuses_collisions_and_a_state_file(pg_cluster, pg_db, tmp_path):
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v bigint NOT NULL, note text)")
        conn.execute("INSERT INTO t SELECT g, g, 'row ' || g FROM generate_series(1, 50) g")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(pg_db))
    discover_catalog(src, tmp_path / "cat.json", {"t": "full_refresh"})
    lake = write_json(tmp_path / "lake.json", {"type": "parquet", "path": str(tmp_path / "lake")})
    again = write_json(tmp_path / "again.json", {"type": "parquet", "path": str(tmp_path / "lake")})
    other = write_json(tmp_path / "other.json", {"type": "parquet", "path": str(tmp_path / "other")})
    base = ["sync", "--source", src, "--catalog", str(tmp_path / "cat.json")]
    cases = [(["--destination", lake, "--destination", lake], "is named twice"),
             (["--destination", lake, "--destination", again], "write to the same place"),
             (["--destination", lake, "--destination", other, "--state", str(tmp_path / "st.json")],
              "--state applies to one --destination")]
    for extra, said in cases:
        result = run_olake(*base, *extra)
        assert result.returncode != 0 and said in result.stderr.decode(), result.stderr
        assert len(trace_errors(result.stdout)) == 1
        assert not (tmp_path / "lake").exists() and not (tmp_path / "other").exists()
    result = run_olake(*base, "--destination", lake, "--destination", other)
    assert result.returncode == 0, result.stderr
    for folder in ("lake", "other"):
        assert lake_equals_source(tmp_path / folder / "public" / "t", pg_cluster.dsn(pg_db))


def test_a_destination_further_on_drops_the_changes_it_holds(pg_cluster, pg_db, pg_target, target_db, tmp_path):
    """Parquet keeps no watermark: synced alone once, it is ahead of the PostgreSQL target; the next run into
    both starts from the target's record and the Parquet files get no change twice."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from tests.support.verify import read_parquet

    source = pg_cluster.dsn(pg_db)
    create_counted_table(source)
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot="fan_ahead", publication="fan_ahead_pub", create_slot_and_publication=True))
    lake = write_json(tmp_path / "lake.json", {"type": "parquet", "path": str(tmp_path / "lake")})
    dst_pg = write_json(tmp_path / "pg.json", pg_target.destination_config(target_db))
    discover_catalog(src, tmp_path / "cat.json", {"t": "cdc"})
    base = ["sync", "--source", src, "--catalog", str(tmp_path / "cat.json")]

    def change(step: int) -> None:
        with psycopg.connect(source, autocommit=True) as conn:
            conn.execute("UPDATE t SET v = v + %s WHERE id %% 7 = %s", (step, step))
            conn.execute("DELETE FROM t WHERE id = %s", (100 + step,))

    said = {}
    for step, destinations in ((1, [lake, dst_pg]), (2, [lake]), (3, [lake, dst_pg]), (4, [lake, dst_pg])):
        result = run_olake(*base, *[arg for d in destinations for arg in ("--destination", d)])
        said[step] = result.stderr.decode()
        assert result.returncode == 0, said[step][-3000:]
        if step < 4:
            change(step)
    assert "already holds (a replay)" in said[3] and "already holds (a replay)" not in said[4], said[3]
    rows = read_parquet(str(tmp_path / "lake" / "public" / "t"))
    changes = rows.filter(pc.is_in(rows.column("_olake_op"), pa.array(["c", "u", "d"])))
    ops = changes.column("_olake_op_id").to_pylist()
    assert len(ops) == len(set(ops)) and len(ops) > 0  # no change twice
    assert lake_equals_source(tmp_path / "lake" / "public" / "t", source)
    assert _pg_equals(source, pg_target.dsn(target_db))
