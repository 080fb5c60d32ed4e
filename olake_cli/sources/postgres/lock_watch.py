"""Watches the load's exporting session for other sessions kept waiting by its table locks.

The exporting transaction holds ACCESS SHARE on every table the run reads until the run's full loads
end. DDL on a table whose chunks are all done (or not started yet) would then wait for the whole run,
and every query of the application on that table would queue behind it. A chunk scan notices a
waiting DDL only on its own table (its lock request times out); this watch notices the rest: once a
session has waited ``timeout_s`` for a lock the exporting session holds, it ends the exporting
transaction (releasing every lock and the snapshot) and remembers the table, so the run stops.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from olake_cli.sources.postgres.connection import PostgresSettings, connect

_WAITING_ON = """
    SELECT n.nspname || '.' || c.relname FROM pg_locks w
    JOIN pg_class c ON c.oid = w.relation JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE NOT w.granted AND w.locktype = 'relation' AND %(pid)s = ANY(pg_blocking_pids(w.pid))
      AND w.waitstart <= clock_timestamp() - make_interval(secs => %(secs)s)
    LIMIT 1"""


class LockWatch:
    """A daemon thread polling ``pg_locks`` every ``poll_s`` seconds on its own connection."""

    def __init__(self, settings: PostgresSettings, exporting_pid: int, release: Callable[[], None],
                 timeout_s: float, poll_s: float = 1.0) -> None:
        self.settings, self.pid, self.release = settings, exporting_pid, release
        self.timeout_s, self.poll_s = timeout_s, poll_s
        self.blocked: str | None = None  # ``schema.table`` another session waited for, once released
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="olake-lock-watch", daemon=True)

    def start(self) -> None:
        """Begin watching."""
        self._thread.start()

    def stop(self) -> None:
        """Stop watching and wait for the thread."""
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        try:
            with connect(self.settings) as conn:
                while not self._stop.wait(self.poll_s):
                    row = conn.execute(_WAITING_ON, {"pid": self.pid, "secs": self.timeout_s}).fetchone()
                    if row is not None:
                        self.blocked = row[0]
                        self.release()
                        return
        except Exception:  # psycopg or connection errors: a server without pg_locks.waitstart (before
            return  # 14) or a lost connection; chunk scans' own lock timeouts still stop the load
