"""``--follow``: a run that keeps capturing changes as a service, committing on a cadence.

A writer keeps changing the source the whole time. ``sync --follow`` into PostgreSQL is SIGKILLed at a
random moment and started again, then the source server and the target server are restarted under it
(the run stays up: it reads the slot again, or starts the whole run again in the same process); once the writer stops, the target converges to the source value by value (every row's
``v`` counts the increments, so a change lost or applied twice shows), and SIGTERM ends the run within
10 s with exit 0. ``read --follow | write`` into Parquet converges the same way, its slot moves to what
``write --state`` committed while it runs, and SIGTERM to the reader ends both cleanly.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request

import psycopg

from tests.support.cdc import discover_catalog
from tests.support.cli import run_olake, trace_errors, write_json
from tests.support.follow import (Incrementer, create_counted_table, http_get, kill_and_restart, lake_equals_source,
                                  start_olake, stop, wait_until)
from tests.support.pg_compare import table_texts


def _restart(cluster) -> None:
    log = os.path.join(os.path.dirname(cluster.datadir), "log")  # not our pipes: pg_ctl would hang
    cluster._run([os.path.join(cluster.bin_dir, "pg_ctl"), "-D", cluster.datadir, "-l", log, "-m", "fast",
                  "-w", "restart"])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _metrics(port: int, identity: tuple[str, str]) -> dict[str, float]:
    """The samples the run serves, by name with labels; every sample must carry the run's ``pipeline`` and
    ``destination`` labels (``identity``), which the keys leave out."""
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    run_labels = {f'pipeline="{identity[0]}"', f'destination="{identity[1]}"'}
    samples = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            metric, _, labels = name.partition("{")
            labels = set(labels.rstrip("}").split(",")) - {""}
            assert run_labels <= labels, line
            rest = ",".join(sorted(labels - run_labels))
            samples[f"{metric}{{{rest}}}" if rest else metric] = float(value)
    return samples


def _target_matches(source: str, target: str) -> bool:
    try:
        return table_texts(target, "public", "t", ["id", "v", "note"]) == table_texts(source, "public", "t",
                                                                                     ["id", "v", "note"])
    except psycopg.Error:
        return False  # the table is not created yet


def test_sync_follow_survives_a_kill_and_restarts_of_source_and_target_and_stops_on_sigterm(
        spare_cluster, pg_target, target_db, tmp_path):
    from tests.support.pgcluster import create_database

    create_database(spare_cluster, "follow_src")
    source = spare_cluster.dsn("follow_src")
    create_counted_table(source)
    src = write_json(tmp_path / "src.json", spare_cluster.source_config(
        "follow_src", replication_slot="follow_sync", publication="follow_sync_pub", create_slot_and_publication=True))
    dst = write_json(tmp_path / "dst.json", pg_target.destination_config(target_db))
    discover_catalog(src, tmp_path / "cat.json", {"t": "cdc"})
    port = _free_port()
    args = ["sync", "--source", src, "--destination", dst, "--catalog", str(tmp_path / "cat.json"),
            "--state", str(tmp_path / "state.json"), "--follow", "--commit-interval", "0.5",
            "--metrics-port", str(port)]
    log = tmp_path / "sync.log"
    target = pg_target.dsn(target_db)
    writer = Incrementer(source, seed=11)
    writer.start()
    try:
        run = start_olake(args, log, stdout=subprocess.DEVNULL)
        wait_until(lambda: "following the change log" in log.read_text(), "the change phase starts")
        run = kill_and_restart(run, args, log, seed=5)
        time.sleep(1.0)
        _restart(spare_cluster)
        wait_until(lambda: "trying again in" in log.read_text(), "the run notices the restart")
        time.sleep(2.0)
        _restart(pg_target)
        wait_until(lambda: "starting it again in" in log.read_text(), "the run notices the target's restart")
        wait_until(lambda: log.read_text().count("following the change log") == 3, "the run follows again")
        time.sleep(2.0)
        assert run.poll() is None, log.read_text()[-3000:]
        metrics = _metrics(port, (str(tmp_path / "state.json"), f"postgres {tmp_path / 'dst.json'}"))
        assert http_get(port, "/healthz") == (200, "ok\n") and http_get(port, "/readyz") == (200, "ready\n")
        assert metrics['olake_changes_total{op="u",stream="public.t"}'] > 0, metrics
        assert metrics["olake_commits_total"] > 0 and metrics["olake_retries_total"] >= 2, metrics
        assert metrics["olake_source_backlog_bytes"] > 0 and 0 <= metrics["olake_lag_seconds"] < 30, metrics
    finally:
        writer.stop()
    assert writer.transactions > 100
    wait_until(lambda: _target_matches(source, target), "the target equals the source")
    took = stop(run)
    text = log.read_text()
    assert run.returncode == 0 and took < 10, text[-3000:]
    assert "stopped by SIGTERM" in text.splitlines()[-1] and "Traceback" not in text, text[-3000:]
    assert "olake: following: " in text and " retries" in text, "a status line while running"
    assert _target_matches(source, target)


def test_read_follow_into_write_moves_the_slot_and_ends_on_sigterm(pg_cluster, pg_db, tmp_path):
    source = pg_cluster.dsn(pg_db)
    create_counted_table(source)
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot="follow_pipe", publication="follow_pipe_pub", create_slot_and_publication=True))
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "lake")})
    discover_catalog(src, tmp_path / "cat.json", {"t": "cdc"})
    state, log = tmp_path / "state.json", tmp_path / "pipe.log"
    reader = start_olake(["read", "--config", src, "--catalog", str(tmp_path / "cat.json"), "--state", str(state),
                     "--follow", "--commit-interval", "1"], log, stdout=subprocess.PIPE)
    writer_proc = start_olake(["write", "--config", dst, "--state", str(state)], log, stdin=reader.stdout,
                         stdout=subprocess.DEVNULL)
    reader.stdout.close()
    writer = Incrementer(source, seed=12)
    writer.start()
    try:
        wait_until(lambda: "following the change log" in log.read_text(), "the change phase starts")
        time.sleep(4.0)
    finally:
        writer.stop()

    def lake_matches() -> bool:
        return lake_equals_source(tmp_path / "lake" / "public" / "t", source)

    wait_until(lake_matches, "the Parquet files equal the source")
    committed = json.loads(state.read_text())["streams"][0]["stream_state"]["cursor_field"]

    def slot_moved() -> bool:
        with psycopg.connect(source, autocommit=True) as conn:
            row = conn.execute("SELECT confirmed_flush_lsn >= %s::pg_lsn FROM pg_replication_slots "
                               "WHERE slot_name = 'follow_pipe'", (committed,)).fetchone()
        return bool(row and row[0])

    wait_until(slot_moved, "the slot reaches what write committed", timeout=30)
    took = stop(reader)
    writer_proc.wait(timeout=60)
    text = log.read_text()
    assert reader.returncode == 0 and writer_proc.returncode == 0 and took < 10, text[-3000:]
    assert "stopped by SIGTERM" in text and "Traceback" not in text, text[-3000:]
    assert lake_matches()


SOAK_S = float(os.environ.get("OLAKE_TEST_SOAK_S", "90"))  # 30 minutes: OLAKE_TEST_SOAK_S=1800
WARM_UP_S = 30.0


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def test_a_soak_with_a_steady_writer_keeps_memory_flat_and_the_copy_exact(pg_cluster, pg_db, pg_target, target_db,
                                                                           tmp_path):
    """``sync --follow`` into PostgreSQL for SOAK_S seconds under a steady writer: resident memory after the
    warm-up grows by less than 10%, and the target ends equal to the source."""
    source, target = pg_cluster.dsn(pg_db), pg_target.dsn(target_db)
    create_counted_table(source)
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot="follow_soak", publication="follow_soak_pub", create_slot_and_publication=True))
    dst = write_json(tmp_path / "dst.json", pg_target.destination_config(target_db))
    discover_catalog(src, tmp_path / "cat.json", {"t": "cdc"})
    log = tmp_path / "soak.log"
    run = start_olake(["sync", "--source", src, "--destination", dst, "--catalog", str(tmp_path / "cat.json"),
                  "--follow", "--commit-interval", "1"], log, stdout=subprocess.DEVNULL)
    writer = Incrementer(source, seed=13, pause=0.02)  # steady, and light on the other test worker's cores
    try:
        wait_until(lambda: "following the change log" in log.read_text(), "the change phase starts")
        writer.start()
        time.sleep(WARM_UP_S)
        after_warm_up = _rss_kb(run.pid)
        samples = []
        deadline = time.monotonic() + SOAK_S - WARM_UP_S
        while time.monotonic() < deadline and run.poll() is None:
            time.sleep(5)
            samples.append(_rss_kb(run.pid))
    finally:
        writer.stop()
    assert run.poll() is None, log.read_text()[-3000:]
    assert writer.transactions > SOAK_S * 10, writer.transactions
    wait_until(lambda: _target_matches(source, target), "the target equals the source")
    assert stop(run) < 10 and run.returncode == 0, log.read_text()[-3000:]
    print(f"soak: {writer.transactions} transactions in {SOAK_S:.0f}s; RSS after warm-up {after_warm_up} kB, "
          f"then up to {max(samples)} kB")
    assert max(samples) < after_warm_up * 1.10, (after_warm_up, samples)


def test_follow_options_are_checked_before_anything_runs(pg_cluster, pg_db, tmp_path):
    create_counted_table(pg_cluster.dsn(pg_db))
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(pg_db))
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "lake")})
    discover_catalog(src, tmp_path / "cat.json", {"t": "full_refresh"})
    sync = ["sync", "--source", src, "--destination", dst, "--catalog", str(tmp_path / "cat.json")]
    for args, expected in ((sync + ["--commit-interval", "5"], "--commit-interval applies to --follow runs only"),
                           (sync + ["--metrics-port", "9999"], "--metrics-port applies to --follow runs only"),
                           (sync + ["--follow", "--commit-interval", "0"], "--commit-interval 0: give a number"),
                           (sync + ["--follow"], "--follow needs at least one selected stream with sync_mode 'cdc'")):
        result = run_olake(*args)
        lines = result.stderr.decode().strip().splitlines()
        assert result.returncode != 0 and expected in lines[-1], (args, lines)
        assert [m["trace"]["error"]["failure_type"] for m in trace_errors(result.stdout)] == ["config_error"]
    assert not (tmp_path / "lake").exists(), "nothing was written"
