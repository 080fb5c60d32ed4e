"""What change capture looks at again while it reads: what every run checks at its start.

A run checks at its start (``capture.preflight``) that the replication slot holds each stream's position
and that each captured table is published by the catalog rows its stream's state recorded
(``publication``). A following run reads for weeks, so its capture looks again:

* each time it opens the slot (its start, and again after a lost connection): the slot exists, is not
  invalidated, and is not past a stream's position (created again, or advanced by someone else);
* between transactions, every :func:`check_every` seconds: each table is still the one its stream was
  resolved to (same oid and name), and is still published by the rows seen when the read began. A table
  that left the publication has no row there; one that came back has a new row (oids are never reused),
  so a table out for a while is seen even if it came back before the look;
* at both: the publication still publishes every action (a run's start refuses one that does not);
* at each Relation message of a relation the feed's routing does not know: whether it is a partition
  of a captured table (created or attached since the read began), whose changes then reach that stream
  (:class:`NewPartitions`).

A stream whose position is lost (a publication gap, another table under its name, the slot, an action
no longer published) is re-synced
or fails the run (``on_position_lost``), as at a start; a table renamed or dropped raises
SourceChangedError, so that a following run starts again and its start checks decide (discovery ends
the stream; otherwise the catalog names a table that does not exist).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg

from olake_cli.core.errors import SourceChangedError
from olake_cli.core.follow import CommitPolicy
from olake_cli.sources.postgres.publication import PUBLISH_ACTIONS, Membership, publication_members
from olake_cli.sources.postgres.replica_identity import ResolvedTable, resolve_tables

FIRST_CHECK_S, LAST_CHECK_S = 1.0, 10.0  # the looks between transactions: the commit interval, within these

_NOW_SQL = """
SELECT c.oid, n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = ANY(%s::oid[])
"""
_GAP_REASONS = {
    "left": "{table} left publication '{publication}' after the stream's position, so the changes made since "
            "were never published",
    "rejoined": "{table} left publication '{publication}' and joined it again after the stream's position, so "
                "the changes made while it was out were never published",
}


class StreamsLost(Exception):
    """Streams whose change positions are lost, found while reading (``lost``: stream key -> reason)."""

    def __init__(self, lost: dict[tuple, str]) -> None:
        super().__init__("; ".join(lost.values()))
        self.lost = lost


def check_every(policy: CommitPolicy) -> float:
    """Seconds between two looks of a following read: its checkpoint interval, from 1 s up to 10 s."""
    return policy.held_between(FIRST_CHECK_S, LAST_CHECK_S)


def slot_problem(info: dict | None, slot: str) -> str | None:
    """Why the slot (``change_feed.slot_info``) holds no position any more, or None when it is usable."""
    if info is None:
        return f"replication slot '{slot}' does not exist (dropped?)"
    if info["wal_status"] == "lost":
        return (f"replication slot '{slot}' was invalidated (wal_status = lost: the server removed WAL it still "
                f"needed, see max_slot_wal_keep_size)")
    return None


def actions_problem(conn: psycopg.Connection, publication: str) -> str | None:
    """Why no stream's position holds when the publication skips an action now (None: it publishes all)."""
    row = conn.execute("SELECT pubinsert, pubupdate, pubdelete, pubtruncate FROM pg_publication WHERE pubname = %s",
                       (publication,)).fetchone()
    skipped = [action for action, on in zip(PUBLISH_ACTIONS, row or ()) if not on]
    if not skipped:
        return None
    return (f"publication '{publication}' no longer publishes {', '.join(skipped)} (ALTER PUBLICATION ... SET "
            f"(publish = ...)), so those changes were never published")


def moved_tables(conn: psycopg.Connection, tables: dict[tuple, ResolvedTable]
                 ) -> tuple[dict[tuple, str], dict[tuple, str]]:
    """Of ``tables`` (stream key -> the table as the run resolved it): the streams whose name now holds
    another table (why their position is lost), and those whose table was renamed or dropped (what
    happened)."""
    now = {oid: (schema, name) for oid, schema, name in
           conn.execute(_NOW_SQL, ([t.oid for t in tables.values()],)).fetchall()}
    moved = {key: t for key, t in tables.items() if now.get(t.oid) != (t.schema, t.name)}
    if not moved:
        return {}, {}
    found, _ = resolve_tables(conn, [(t.schema, t.name) for t in moved.values()])
    taken = {(t.schema, t.name) for t in found}
    lost, gone = {}, {}
    for key, table in moved.items():
        if (table.schema, table.name) in taken:
            lost[key] = (f"{table.label} is another table now (the one followed was dropped or renamed and "
                         f"another created under its name), so the changes since are another table's")
        elif table.oid in now:
            gone[key] = f"{table.label} was renamed to {'.'.join(now[table.oid])}"
        else:
            gone[key] = f"{table.label} was dropped"
    return lost, gone


def publication_gaps(conn: psycopg.Connection, publication: str, tables: dict[tuple, ResolvedTable],
                     recorded: dict[tuple, list[str] | None]) -> tuple[dict[tuple, Membership], dict[tuple, str]]:
    """The catalog rows publishing each of ``tables`` now, and the streams of ``recorded`` (stream key ->
    the rows seen before) whose table was out of the publication since (with why their position is lost)."""
    members = publication_members(conn, publication, [t.oid for t in tables.values()])
    now = {key: members[t.oid] for key, t in tables.items()}
    gaps = {}
    for key, rows in recorded.items():
        gap = now[key].gap(rows)
        if gap is not None:
            gaps[key] = _GAP_REASONS[gap].format(table=tables[key].label, publication=publication)
    return now, gaps


class LiveChecks:
    """The between-transactions hook of a following read (``change_feed.read_changes``): every
    ``every_s`` seconds, the tables' identity and publication rows against ``members`` (those seen when
    the read began), on a connection of its own. Raises SourceChangedError or StreamsLost."""

    def __init__(self, connect: Callable[[], psycopg.Connection], publication: str,
                 tables: dict[tuple, ResolvedTable], members: dict[tuple, Membership], every_s: float) -> None:
        self._connect, self.publication, self.tables, self.members = connect, publication, tables, members
        self.every_s = every_s
        self._next = time.monotonic() + every_s
        self._conn: psycopg.Connection | None = None

    def __call__(self) -> None:
        if time.monotonic() < self._next:
            return
        if self._conn is None:
            self._conn = self._connect()
        lost, gone = moved_tables(self._conn, self.tables)
        if gone:
            raise SourceChangedError("; ".join(gone.values()))
        if (problem := actions_problem(self._conn, self.publication)) is not None:
            raise StreamsLost(dict.fromkeys(self.tables, problem))
        staying = {key: table for key, table in self.tables.items() if key not in lost}
        _, gaps = publication_gaps(self._conn, self.publication, staying,
                                   {key: self.members[key].rows() for key in staying})
        if lost or gaps:
            raise StreamsLost({**lost, **gaps})
        self._next = time.monotonic() + self.every_s

    def close(self) -> None:
        """Close the connection, if one was opened."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class NewPartitions:
    """The feed routing's ``find_root`` of a following read: the stream of the captured table (by oid in
    ``roots``) a relation is a partition of, asked of the catalog once per relation, on a connection of its
    own (a relation since dropped is no partition: None)."""

    def __init__(self, connect: Callable[[], psycopg.Connection], roots: dict[int, tuple[str, str]]) -> None:
        self._connect, self.roots = connect, roots
        self._found: dict[int, tuple[str, str] | None] = {}
        self._conn: psycopg.Connection | None = None

    def __call__(self, oid: int) -> tuple[str, str] | None:
        if oid not in self._found:
            if self._conn is None:
                self._conn = self._connect()
            rows = self._conn.execute("SELECT relid::oid FROM pg_partition_ancestors(%s::oid::regclass)",
                                      (oid,)).fetchall()
            self._found[oid] = next((self.roots[row[0]] for row in rows if row[0] in self.roots), None)
        return self._found[oid]

    def close(self) -> None:
        """Close the connection, if one was opened."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
