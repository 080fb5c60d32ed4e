"""The slot moved to the start position before it is streamed, so that the server does not decode again
what an earlier run read; and the plain SQL that a replication connection runs.

Before ``START_REPLICATION``, a slot whose ``restart_lsn`` lags the start position (what the destination
committed) by :data:`CATCH_UP_BYTES` or more is moved there with ``pg_replication_slot_advance``. The
walsender decodes everything from ``restart_lsn`` in full, queueing every change of every table of the
database (a transaction larger than ``logical_decoding_work_mem`` is spilled to disk), even what lies
before its start position, which it then skips. ``restart_lsn`` moves only to a running-xacts record
(the server logs one every 15 s while the database writes, and at each checkpoint) that lies before the
confirmed position, so a big transaction on an unrelated table was decoded again by each run until one
had confirmed a position past such a record when it started. The advance decodes the same WAL in
fast-forward mode (no change is queued, nothing is spilled: 310 MB of WAL in 1.3 s here, where the
walsender took 4 to 17 s) and confirms only the start position, as the walsender's first status update
does.
"""

from __future__ import annotations

import psycopg
from psycopg import pq

from olake_cli.sources.postgres.lsn import format_lsn

CATCH_UP_BYTES = 16 << 20  # a slot whose restart_lsn lags the start by this much is fast-forwarded first


def catch_up(pg: pq.PGconn, slot: str, lsn: int) -> None:
    """Fast-forward the slot to ``lsn`` (at or past its confirmed position: what the destination
    committed) when its restart_lsn lags it by CATCH_UP_BYTES or more, through the replication
    connection ``pg`` before it streams. Past the confirmed position the server keeps only the first
    restart point it meets and applies it once a confirmation reaches it: a call that moves the
    confirmed position may stop there (inside a big transaction), and a second one, from there, applies
    every restart point before ``lsn``."""
    before = _slot_positions(pg, slot)
    if before is None or lsn < before[1] or lsn - before[0] < CATCH_UP_BYTES:
        return  # (confirmed further by someone else: the walsender starts there, as before)
    _advance(pg, slot, lsn)
    after = _slot_positions(pg, slot)
    if before[1] < lsn and after is not None and before[0] < after[0] <= lsn - CATCH_UP_BYTES:
        _advance(pg, slot, lsn)


def _slot_positions(pg: pq.PGconn, slot: str) -> tuple[int, int] | None:
    """The slot's (restart_lsn, confirmed_flush_lsn), or None when it has none (or does not exist)."""
    result = pg.exec_(f"SELECT (restart_lsn - '0/0')::text, (confirmed_flush_lsn - '0/0')::text "
                      f"FROM pg_replication_slots WHERE slot_name = {literal(slot)}".encode())
    check_result(result, pq.ExecStatus.TUPLES_OK)
    if result.ntuples == 0 or result.get_value(0, 0) is None or result.get_value(0, 1) is None:
        return None
    return int(result.get_value(0, 0)), int(result.get_value(0, 1))


def _advance(pg: pq.PGconn, slot: str, lsn: int) -> None:
    command = f"SELECT 1 FROM pg_replication_slot_advance({literal(slot)}, '{format_lsn(lsn)}'::pg_lsn)"
    check_result(pg.exec_(command.encode()), pq.ExecStatus.TUPLES_OK)


def check_result(result: pq.PGresult | None, expected: pq.ExecStatus) -> None:
    """Raise the server's error (or an OperationalError) unless ``result`` has the ``expected`` status."""
    if result is None or result.status != expected:
        if result is not None and result.status == pq.ExecStatus.FATAL_ERROR:
            raise psycopg.errors.error_from_result(result)
        raise psycopg.OperationalError(f"unexpected reply from the replication connection: "
                                       f"{None if result is None else result.status.name}")


def literal(text: str) -> str:
    """A SQL string literal (standard_conforming_strings)."""
    return "'" + text.replace("'", "''") + "'"
