"""Helpers for tests of runs that follow their change log (``--follow``): a writer changing the source,
start a run in the background, wait for what its log or the destination shows, stop it with a signal."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import psycopg

from tests.support.cli import olake_cmd, olake_env
from tests.support.pg_compare import table_texts
from tests.support.verify import latest_versions, read_parquet

ROWS = 400  # rows of the table an Incrementer changes


def create_counted_table(dsn: str) -> None:
    """Table ``t`` (id, v counting the increments, note) with ROWS rows, for an :class:`Incrementer`."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v bigint NOT NULL, note text)")
        conn.execute(f"INSERT INTO t SELECT g, 0, 'row ' || g FROM generate_series(1, {ROWS}) g")


def lake_equals_source(folder: Path, dsn: str) -> bool:
    """Whether the current rows of a Parquet stream folder (the newest version of each key, deletes
    dropped) equal table ``t`` of ``dsn``, value by value as PostgreSQL's text."""
    try:
        rows = latest_versions(read_parquet(str(folder)), ["id"])
    except Exception:
        return False  # no file yet
    lake = sorted((str(i), str(v), n) for i, v, n in zip(rows["id"].to_pylist(), rows["v"].to_pylist(),
                                                           rows["note"].to_pylist()))
    return lake == table_texts(dsn, "public", "t", ["id", "v", "note"])


def iceberg_equals_source(root: Path, dsn: str) -> bool:
    """Whether Iceberg table ``public.t`` under ``root`` equals table ``t`` of ``dsn``, value by value as
    PostgreSQL's text (False while the table does not exist yet)."""
    from tests.support.current_view import iceberg_rows

    try:
        rows = iceberg_rows(root, "public", "t").to_pydict()
    except Exception:
        return False  # no table yet
    lake = sorted((str(i), str(v), n) for i, v, n in zip(rows["id"], rows["v"], rows["note"]))
    return lake == table_texts(dsn, "public", "t", ["id", "v", "note"])


def start_olake(args: list[str], log: Path, **popen) -> subprocess.Popen:
    """``olake ARGS`` in its own process group, stderr appended to ``log`` (status lines every 2 s)."""
    with open(log, "ab") as err:
        return subprocess.Popen(olake_cmd(*args), stderr=err, env={**olake_env(), "OLAKE_STATUS_EVERY_S": "2"},
                                start_new_session=True, **popen)


def wait_until(check: Callable[[], bool], what: str, timeout: float = 90,
               run: subprocess.Popen | None = None) -> None:
    """Poll ``check`` until it is true; fail naming ``what`` after ``timeout`` seconds, or as soon as
    ``run`` (if given) has ended."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if run is not None and run.poll() is not None:
            raise AssertionError(f"the run ended (status {run.returncode}) before {what}")
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting until {what}")


def kill_and_restart(run: subprocess.Popen, args: list[str], log: Path, seed: int, low: float = 1.0,
                     high: float = 4.0) -> subprocess.Popen:
    """SIGKILL the following ``run`` (its whole process group) at a seeded moment ``low``-``high`` seconds
    into its change phase, start ``olake ARGS`` again and wait until that one follows; returns it."""
    runs = log.read_text().count("following the change log")
    time.sleep(random.Random(seed).uniform(low, high))
    os.killpg(run.pid, signal.SIGKILL)
    run.wait(timeout=30)
    run = start_olake(args, log, stdout=subprocess.DEVNULL)
    wait_until(lambda: log.read_text().count("following the change log") > runs, "the rerun follows", run=run)
    return run


def stop(proc: subprocess.Popen, signum: int = signal.SIGTERM) -> float:
    """Send ``signum``; the seconds until the process ended."""
    sent = time.monotonic()
    proc.send_signal(signum)
    proc.wait(timeout=60)
    return time.monotonic() - sent


class Incrementer(threading.Thread):
    """``UPDATE <table> SET v = v + 1`` on a few of its first ``rows`` rows, an INSERT and a DELETE now and
    then, in small transactions; reconnects when the server restarts. The table is ``(id int PRIMARY KEY,
    v bigint, note text)``."""

    def __init__(self, dsn: str, seed: int, pause: float = 0.005, table: str = "t", rows: int = ROWS) -> None:
        super().__init__(daemon=True)
        self.dsn, self.rng, self.pause, self.table, self.rows = dsn, random.Random(seed), pause, table, rows
        self.stop_event, self.transactions, self.next_id = threading.Event(), 0, rows + 1

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                with psycopg.connect(self.dsn, autocommit=True) as conn:
                    while not self.stop_event.is_set():
                        self._one(conn)
                        time.sleep(self.pause)
            except psycopg.OperationalError:
                time.sleep(0.2)  # the server restarts

    def _one(self, conn: psycopg.Connection) -> None:
        first = self.rng.randint(1, self.rows)
        with conn.transaction():
            conn.execute(f"UPDATE {self.table} SET v = v + 1 WHERE id BETWEEN %s AND %s", (first, first + 3))
            if self.rng.random() < 0.1:
                conn.execute(f"INSERT INTO {self.table} VALUES (%s, 1, 'new')", (self.next_id,))
                self.next_id += 1
            if self.rng.random() < 0.05:
                conn.execute(f"DELETE FROM {self.table} WHERE id = %s", (self.rng.randint(1, self.rows),))
        self.transactions += 1

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=30)


def http_get(port: int, path: str) -> tuple[int, str]:
    """``GET path`` on 127.0.0.1:``port`` (a following run's endpoints): the status and the body."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()
