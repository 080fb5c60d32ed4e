"""How much WAL a replication slot keeps on the source's disk, and the warning past a threshold.

PostgreSQL keeps every WAL segment from the slot's ``restart_lsn`` on (unless ``max_slot_wal_keep_size``
invalidates the slot first): a slot whose pipeline stopped running fills the source's disk. ``check``
and every run of change capture say how much the slot retains (``pg_current_wal_lsn() - restart_lsn``)
and warn past the source config's ``slot_wal_warn_bytes`` (default 1 GiB).
"""

from __future__ import annotations

import psycopg

DEFAULT_WARN_BYTES = 1 << 30
_UNITS = ("bytes", "kB", "MB", "GB", "TB", "PB")


def retained_wal_bytes(conn: psycopg.Connection, slot: str) -> int | None:
    """Bytes of WAL from the slot's restart_lsn to the current write position (None: no slot, or none kept)."""
    row = conn.execute("SELECT pg_wal_lsn_diff(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()"
                       " ELSE pg_current_wal_lsn() END, restart_lsn)::bigint"
                       " FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()
    return None if row is None or row[0] is None else max(int(row[0]), 0)


def retained_wal_lines(slot: str, retained: int | None, warn_bytes: int) -> list[str]:
    """One line saying what the slot retains, then a warning when that is more than ``warn_bytes``."""
    if retained is None:
        return []
    lines = [f"replication slot '{slot}' retains {pretty_bytes(retained)} of WAL on the source"]
    if retained > warn_bytes:
        lines.append(f"warning: replication slot '{slot}' retains {pretty_bytes(retained)} of WAL, more than "
                     f"slot_wal_warn_bytes ({pretty_bytes(warn_bytes)}): the source keeps it on disk until this "
                     "pipeline's next run confirms it; run the pipeline (more often), or, if it is abandoned, "
                     "remove the slot with: olake state drop-slot --config SOURCE.json")
    return lines


def pretty_bytes(count: int) -> str:
    """``count`` in the largest binary unit that keeps it at least 1, as PostgreSQL's pg_size_pretty
    names them (``512 bytes``, ``1.5 MB``, ``2.0 GB``)."""
    value, unit = float(count), 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value, unit = value / 1024, unit + 1
    return f"{count} bytes" if unit == 0 else f"{value:.1f} {_UNITS[unit]}"
