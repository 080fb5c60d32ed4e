"""Helpers for change-capture end-to-end tests: catalogs in cdc mode and a concurrent writer."""

from __future__ import annotations

import json
import random
import threading
from pathlib import Path

import psycopg

from tests.support.cli import read_into_write, run_olake, write_json


def discover_catalog(src: str, path: Path, modes: dict[str, str], cursor: dict[str, str] | None = None,
                     only: set[str] | None = None) -> dict:
    """Run discover, set each named stream's sync_mode (and cursor), deselect others if ``only``."""
    result = run_olake("discover", "--config", src)
    assert result.returncode == 0, result.stderr.decode()
    catalog = json.loads(result.stdout)["catalog"]
    for stream in catalog["streams"]:
        stream["sync_mode"] = modes.get(stream["name"], "full_refresh")
        if cursor and stream["name"] in cursor:
            stream["cursor_field"] = [cursor[stream["name"]]]
        if only is not None:
            stream["selected"] = stream["name"] in only
    path.write_text(json.dumps(catalog))
    return catalog


def sync_once(src: str, catalog: Path, dst: str, state: Path):
    """One ``olake read | olake write`` run with the shared state file; asserts both succeed."""
    result = read_into_write(["--config", src, "--catalog", str(catalog), "--state", str(state)],
                             ["--config", dst, "--state", str(state)])
    assert result.read_code == 0, result.read_stderr.decode()[-3000:]
    assert result.write_code == 0, result.write_stderr.decode()[-3000:]
    return result


class ConcurrentWriter(threading.Thread):
    """Inserts, updates and deletes rows of ``table(id int pk, balance numeric, note text)`` until stopped."""

    def __init__(self, dsn: str, table: str, first_new_id: int, max_id: int, seed: int = 7) -> None:
        super().__init__(daemon=True)
        self.dsn, self.table, self.next_id, self.max_id = dsn, table, first_new_id, max_id
        self.rng = random.Random(seed)
        self.stop_event = threading.Event()
        self.transactions = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=False) as conn:
                while not self.stop_event.is_set():
                    self._one_transaction(conn)
                    conn.commit()
                    self.transactions += 1
        except BaseException as exc:  # surfaced by stop()
            self.error = exc

    def _one_transaction(self, conn: psycopg.Connection) -> None:
        for _ in range(self.rng.randint(1, 5)):
            action = self.rng.random()
            target = self.rng.randint(1, self.max_id)
            if action < 0.4:
                conn.execute(f"INSERT INTO {self.table} (id, balance, note) VALUES (%s, %s, %s)",
                             (self.next_id, self.rng.randint(0, 10**6) / 100, f"new {self.next_id}"))
                self.next_id += 1
            elif action < 0.8:
                conn.execute(f"UPDATE {self.table} SET balance = balance + 1.25, note = note || '+' WHERE id = %s",
                             (target,))
            else:
                conn.execute(f"DELETE FROM {self.table} WHERE id = %s", (target,))

    def stop(self) -> None:
        """Stop and re-raise any error the writer hit."""
        self.stop_event.set()
        self.join(timeout=30)
        if self.error:
            raise self.error


def make_accounts(dsn: str, table: str, rows: int) -> None:
    """Create and fill ``table`` with ``rows`` accounts."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"""CREATE TABLE {table} (id int PRIMARY KEY, balance numeric(12,2), note text);
                         INSERT INTO {table} SELECT g, g / 100.0, 'acct ' || g FROM generate_series(1, {rows}) g;
                         ANALYZE {table};""")


__all__ = ["discover_catalog", "sync_once", "ConcurrentWriter", "make_accounts", "write_json"]
