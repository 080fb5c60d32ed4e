"""The target connection: session settings, commits under the replication origin, and error mapping.

Every transaction olake commits into the target runs under the configured replication origin, so a
PostgreSQL source reading the target with ``skip_origins`` leaves it out (two-way replication without
loops). PostgreSQL lets one session at a time hold an origin, and the origin is read at commit time:
so each commit takes an advisory lock for the origin, sets the origin up
(``pg_replication_origin_session_setup``; for changes also ``pg_replication_origin_xact_setup`` with
the last source commit's position and time, as PostgreSQL's own apply worker does), commits, and
resets it. Spark tasks writing chunks and the driver share the origin this way, one commit at a time.
"""

from __future__ import annotations

from datetime import datetime, timedelta, UTC
from typing import Any

from olake_cli.core.errors import ConfigError, DestinationError, OlakeError, TransientError
from olake_cli.core.faults import crash_point
from olake_cli.shared.postgres_connection import connect, is_transient, sqlstate

# olake.applying: deletes olake makes leave no local tombstone (conflicts.py records its own, exactly)
SESSION_SETTINGS = {"TimeZone": "UTC", "DateStyle": "ISO", "IntervalStyle": "postgres", "olake.applying": "on"}
_ORIGIN_LOCK_CLASS = 0x6F6C616B  # 'olak': the advisory lock space of origin commits
_INSUFFICIENT_PRIVILEGE = "42501"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def open_connection(settings: Any):
    """A non-autocommit connection to the target with olake's session settings (UTC, ISO dates)."""
    conn = connect(settings, autocommit=False)
    try:
        for name, value in SESSION_SETTINGS.items():
            conn.execute(f"SET {name} = '{value}'")
        conn.commit()
    except Exception as exc:
        conn.close()
        raise classify(exc, settings, "setting up the session") from None
    return conn


def ensure_origin(conn, origin: str | None) -> int | None:
    """The id of replication origin ``origin``, created if missing (None without an origin)."""
    if origin is None:
        return None
    found = conn.execute("SELECT pg_replication_origin_oid(%s)", (origin,)).fetchone()[0]
    if found is None:
        found = conn.execute("SELECT pg_replication_origin_create(%s)", (origin,)).fetchone()[0]
    conn.commit()
    return int(found)


def commit_under_origin(conn, origin: str | None, source_commit: tuple[int, int] | None = None,
                        step: str = "postgres") -> None:
    """Commit the open transaction under ``origin``; ``source_commit`` (LSN, commit time in Unix
    microseconds) marks it as the apply of that source commit (its commit timestamp becomes that time).
    ``step`` names the crash points around the commit (``<step>-before-commit``, ``<step>-committed``)."""
    if origin is None:
        crash_point(f"{step}-before-commit")
        conn.commit()
        crash_point(f"{step}-committed")
        return
    conn.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", (_ORIGIN_LOCK_CLASS, origin))
    set_up = False
    try:
        conn.execute("SELECT pg_replication_origin_session_setup(%s)", (origin,))
        set_up = True
        if source_commit is not None:
            lsn, commit_us = source_commit
            conn.execute("SELECT pg_replication_origin_xact_setup(%s::pg_lsn, %s)",
                         (_lsn_text(lsn), _EPOCH + timedelta(microseconds=commit_us)))
        crash_point(f"{step}-before-commit")
        conn.commit()
        crash_point(f"{step}-committed")
    finally:
        _release_origin(conn, origin, set_up)


def _release_origin(conn, origin: str, set_up: bool) -> None:
    """Reset the session's origin and release the lock (a broken connection released both already)."""
    if conn.closed or conn.broken:
        return
    try:
        conn.rollback()  # a failed commit leaves the transaction aborted
        if set_up:
            conn.execute("SELECT pg_replication_origin_session_reset()")
        conn.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", (_ORIGIN_LOCK_CLASS, origin))
        conn.commit()
    except Exception:  # the connection died meanwhile: the server released everything
        pass


def _lsn_text(value: int) -> str:
    """A u64 position as pg_lsn text (``X/Y``)."""
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


def classify(exc: BaseException, settings: Any, what: str) -> OlakeError:
    """A driver error as an olake error: transient (lost connection, serialization failure, shutdown)
    or a destination error, one line, without the password."""
    if isinstance(exc, OlakeError):
        return exc
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    text = settings.scrub(f"postgres destination {settings.describe()}: {what}: {first}")
    if sqlstate(exc) == _INSUFFICIENT_PRIVILEGE:
        return ConfigError(text)
    if is_transient(exc):
        return TransientError(text + " (run again to resume from what was committed)")
    return DestinationError(text)
