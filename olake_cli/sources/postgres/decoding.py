"""What reading the slot costs the server, and what the user is told while it pays.

The server decodes every WAL record from the slot's ``restart_lsn`` up to the run's bound, whatever
the publication holds; a transaction's changes are sent once its commit is decoded. A transaction
larger than ``logical_decoding_work_mem`` is spilled to disk on the way, published or not; the feed's
session raises that setting to ``logical_decoding_work_mem_mb``. Before the read, the log says how
much WAL the server decodes; during it, every few seconds, how long it has waited and what the
server's slot statistics (PostgreSQL 14 and later) say it has decoded and spilled since.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable

import psycopg

from olake_cli.core.errors import OlakeError
from olake_cli.core.validation import env_seconds
from olake_cli.sources.postgres.lsn import format_lsn

# Seconds between progress lines while the server decodes; OLAKE_CDC_PROGRESS_EVERY overrides it.
PROGRESS_EVERY_S = max(0.01, env_seconds("OLAKE_CDC_PROGRESS_EVERY", 5.0))
_MB = 1 << 20
_STATS_SQL = ("SELECT total_txns, total_bytes, spill_bytes FROM pg_stat_replication_slots"
              " WHERE slot_name = %s")
Stats = tuple[int, int, int]  # transactions decoded, their bytes, bytes spilled to disk


@dataclass(frozen=True)
class SlotDecoding:
    """The WAL a read of the slot decodes, and the reorder-buffer memory of the session that reads it."""

    slot: str
    upto: int
    restart_lsn: int | None
    confirmed_lsn: int | None
    work_mem_kb: int | None  # the feed session's logical_decoding_work_mem (None before PostgreSQL 13)
    raise_work_mem: bool  # the feed session must SET it (the server's, role's or database's is lower)
    stats: Stats | None  # the slot's statistics before the read (None before PostgreSQL 14)

    def session_settings(self) -> dict[str, str]:
        """The settings the feed's session needs (none when the server's own memory setting is enough)."""
        return {"logical_decoding_work_mem": f"{self.work_mem_kb}kB"} if self.raise_work_mem else {}

    def describe(self, following: bool = False) -> str:
        """The line logged before the read: the bound (following: the WAL's end now), the WAL to decode
        and the memory it gets."""
        line = (f"change capture: following slot '{self.slot}' (the WAL ends at {format_lsn(self.upto)} now)"
                if following else f"change capture: reading slot '{self.slot}' up to {format_lsn(self.upto)}")
        if self.restart_lsn is None:
            return line
        line += (f"; the server decodes {_mb(self.upto - self.restart_lsn)} of WAL from the slot's restart_lsn "
                 f"{format_lsn(self.restart_lsn)}")
        if self.confirmed_lsn is not None and self.confirmed_lsn > self.restart_lsn:
            line += f" ({_mb(max(0, self.upto - self.confirmed_lsn))} of it written since the confirmed position)"
        if self.work_mem_kb is not None:
            line += f", with logical_decoding_work_mem {format_kb(self.work_mem_kb)}"
        return line


def measure(conn: psycopg.Connection, slot: str, upto: int, work_mem_mb: int) -> SlotDecoding:
    """What reading ``slot`` up to ``upto`` decodes, with the feed's memory raised to ``work_mem_mb``."""
    from olake_cli.sources.postgres.change_feed import slot_info

    info = slot_info(conn, slot) or {}
    row = conn.execute("SELECT setting::int8 FROM pg_settings WHERE name = 'logical_decoding_work_mem'").fetchone()
    current = None if row is None else int(row[0])  # this role's and database's value, in kB
    wanted = work_mem_mb * 1024
    return SlotDecoding(slot, upto, info.get("restart_lsn"), info.get("confirmed_flush_lsn"),
                        None if current is None else max(current, wanted),
                        current is not None and current < wanted, slot_stats(conn, slot))


def slot_stats(conn: psycopg.Connection, slot: str) -> Stats | None:
    """The slot's decoding statistics (cumulative), or None before PostgreSQL 14."""
    if conn.info.server_version < 140000:
        return None
    row = conn.execute(_STATS_SQL, (slot,)).fetchone()
    return (0, 0, 0) if row is None else (int(row[0] or 0), int(row[1] or 0), int(row[2] or 0))


class DecodingProgress:
    """Logs a line every :data:`PROGRESS_EVERY_S` seconds that the feed waits for the server (the feed's
    ``waiting``): the time waited and, from the slot's statistics, what was decoded and spilled since
    the read began (through a connection of its own, opened on first use)."""

    def __init__(self, decoding: SlotDecoding, connect: Callable[[], psycopg.Connection],
                 log: Callable[[str], None]) -> None:
        self.decoding, self._connect, self.log = decoding, connect, log
        self.every_s = PROGRESS_EVERY_S
        self._conn: psycopg.Connection | None = None

    def __call__(self, waited_s: float) -> None:
        line = f"change capture: the server is still decoding slot '{self.decoding.slot}' ({waited_s:.1f} s"
        txns, decoded, spilled = self._since_start() or (0, 0, 0)
        done = ([f"{txns} transaction(s) of {_mb(decoded)} decoded"] if txns else []) + \
               ([f"{_mb(spilled)} spilled to disk"] if spilled else [])
        if done:
            line += " so far: " + ", ".join(done)
        if spilled and self.decoding.work_mem_kb is not None:
            line += (f"; a transaction larger than logical_decoding_work_mem ({format_kb(self.decoding.work_mem_kb)}) "
                     f"is spilled, see logical_decoding_work_mem_mb")
        self.log(line + ")")

    def close(self) -> None:
        """Close the statistics connection, if one was opened."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _since_start(self) -> Stats | None:
        """The statistics' growth since the read began; None when they cannot be had."""
        if self.decoding.stats is None:
            return None
        try:
            if self._conn is None:
                self._conn = self._connect()
            now = slot_stats(self._conn, self.decoding.slot)
        except (psycopg.Error, OlakeError):
            return None  # progress is told without figures; the read itself reports real failures
        if now is None:
            return None
        return tuple(max(0, a - b) for a, b in zip(now, self.decoding.stats))  # type: ignore[return-value]


def format_kb(kb: int) -> str:
    """A memory setting in kB as PostgreSQL prints it (``64MB``, ``1GB``, ``1536kB``)."""
    for unit, size in (("GB", 1 << 20), ("MB", 1 << 10)):
        if kb % size == 0:
            return f"{kb // size}{unit}"
    return f"{kb}kB"


def _mb(size: int) -> str:
    return f"{size / _MB:.1f} MB"
