"""``olake read --follow | olake write`` when the writing side dies: ``write`` is SIGKILLed at a seeded random
moment while a writer keeps changing the source. ``read`` then finds the reading side of its stdout
closed: it must stop by itself, with one error line on stderr and a non-zero status (a service manager
restarts the pipe), and it must have confirmed the replication slot no further than what ``write``
committed (``pg_replication_slots.confirmed_flush_lsn`` against the LSN of the ``--state`` file that
``write`` keeps: a change past it would be lost). A new ``read --follow | write`` from that state file then
continues exactly: once the writer stops, the Parquet copy equals the table value by value (``v`` counts
every increment, so a change lost shows)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import psycopg

from tests.support.cdc import discover_catalog
from tests.support.cli import write_json
from tests.support.follow import Incrementer, create_counted_table, lake_equals_source, start_olake, stop, wait_until

SEED = int(os.environ.get("OLAKE_FAULT_SEED", str(random.randrange(1 << 20))))


def _lsn(text: str) -> int:
    high, low = text.split("/")
    return (int(high, 16) << 32) + int(low, 16)


def _committed_lsn(state: Path) -> int | None:
    """The LSN the ``--state`` file's stream is committed at (None: no change position yet)."""
    try:
        entry = json.loads(state.read_text())["streams"][0]["stream_state"]
    except (OSError, ValueError, KeyError, IndexError):
        return None
    cursor = entry.get("cursor_field")
    return _lsn(cursor) if isinstance(cursor, str) and "/" in cursor else None


def _confirmed_lsn(dsn: str, slot: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return _lsn(conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                                 (slot,)).fetchone()[0])


def _start_pipe(read_args: list[str], write_args: list[str], log: Path, tag: str) -> tuple:
    """``read ARGS | write ARGS``, each in its own process group; their stderr in ``<tag>-read.log`` and
    ``<tag>-write.log`` beside ``log``."""
    reader = start_olake(read_args, log.with_name(f"{tag}-read.log"), stdout=subprocess.PIPE)
    writer = start_olake(write_args, log.with_name(f"{tag}-write.log"), stdin=reader.stdout,
                         stdout=subprocess.DEVNULL)
    reader.stdout.close()
    return reader, writer


def test_read_follow_stops_when_write_is_killed_and_the_slot_stays_at_what_write_committed(pg_cluster, pg_db,
                                                                                          tmp_path):
    source, slot = pg_cluster.dsn(pg_db), f"pipe_{pg_db}"
    create_counted_table(source)
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot=slot, publication=f"{slot}_pub", create_slot_and_publication=True))
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "lake")})
    discover_catalog(src, tmp_path / "cat.json", {"t": "cdc"})
    state = tmp_path / "state.json"
    read_args = ["read", "--config", src, "--catalog", str(tmp_path / "cat.json"), "--state", str(state),
                 "--follow", "--commit-interval", "0.5"]
    write_args = ["write", "--config", dst, "--state", str(state)]
    changes, started = Incrementer(source, seed=SEED, pause=0.01), []
    changes.start()
    try:
        reader, writer = _start_pipe(read_args, write_args, tmp_path / "x.log", "first")
        started += [reader, writer]
        read_log = tmp_path / "first-read.log"
        wait_until(lambda: "following the change log" in read_log.read_text(), "the change phase starts", run=reader)
        wait_until(lambda: _committed_lsn(state) is not None, "write commits a change position", run=reader)
        time.sleep(random.Random(SEED).uniform(0.5, 3.0))
        print(f"read --follow | write: seed {SEED}; write SIGKILLed")
        os.killpg(writer.pid, signal.SIGKILL)
        writer.wait(timeout=30)
        reader.wait(timeout=60)  # it must stop by itself
        text = read_log.read_text()
        errors = [line for line in text.splitlines() if line.startswith("olake: error")]
        assert reader.returncode not in (0, None) and len(errors) == 1, text[-3000:]
        assert text.splitlines()[-1] == errors[0] and "Traceback" not in text, text[-3000:]
        assert _confirmed_lsn(source, slot) <= _committed_lsn(state), "the slot went past what write committed"
        reader, writer = _start_pipe(read_args, write_args, tmp_path / "x.log", "second")
        started += [reader, writer]
        wait_until(lambda: "following the change log" in (tmp_path / "second-read.log").read_text(),
                   "the new pipe follows", run=reader)
        time.sleep(1.0)
        changes.stop()
        assert changes.transactions > 100
        wait_until(lambda: lake_equals_source(tmp_path / "lake" / "public" / "t", source),
                   "the Parquet copy equals the table", run=reader)
        stop(reader)
        writer.wait(timeout=60)
        assert reader.returncode == 0 and writer.returncode == 0, (tmp_path / "second-read.log").read_text()[-3000:]
        assert lake_equals_source(tmp_path / "lake" / "public" / "t", source)
    finally:
        changes.stop()
        for proc in started:  # whatever a failed assertion left running
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
