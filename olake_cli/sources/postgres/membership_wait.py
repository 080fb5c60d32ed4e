"""A load of a ``cdc`` table waits for the transactions that were writing when the table joined the
publication.

PostgreSQL decodes each change with the catalog as of that change: a change made before the table
joined the publication is never published, even when its transaction commits long after
(``ALTER PUBLICATION ... ADD TABLE`` while a transaction inserting into the table is open: only its
later changes reach the slot). A full load's snapshot cannot see such a transaction either while it is
open, so its earlier changes would be in neither the load nor the change log. The load therefore
waits, before exporting its snapshot, until every transaction that was running when the table joined
has ended: the snapshot then holds what they committed, and change capture skips their published part
as already loaded (``change_reader._load_horizon``).

When a table joined is read from the catalog rows that make it a member (``pg_publication_rel`` for
the table or an ancestor, ``pg_publication_namespace`` for its schema): the transaction that wrote the
oldest such row started the membership, and a transaction still running with an older id was running
then. A table published FOR ALL TABLES is a member from its creation: nothing is waited for.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg

from olake_cli.sources.postgres.snapshot import SnapshotHorizon, widen_xid

POLL_S = 0.2
FIRST_NOTE_S = 2.0  # a wait this long is said in a line, then every NOTE_EVERY_S seconds
NOTE_EVERY_S = 30.0

# Per leaf of the table (the table itself when it is not partitioned): the xmin of every catalog row
# that publishes it, directly, through an ancestor or through a schema.
_MEMBER_ROWS_SQL = """
SELECT l.relid::oid, m.x::text
FROM (SELECT relid FROM pg_partition_tree(%(table)s::regclass) WHERE isleaf
      UNION SELECT %(table)s::regclass WHERE NOT EXISTS (SELECT FROM pg_partition_tree(%(table)s::regclass))) l
CROSS JOIN LATERAL (
  SELECT pr.xmin AS x FROM pg_publication_rel pr
   WHERE pr.prpubid = %(pub)s AND pr.prrelid IN (SELECT l.relid UNION SELECT relid FROM pg_partition_ancestors(l.relid))
  {by_schema}
) m"""
_BY_SCHEMA = """UNION ALL
  SELECT pn.xmin FROM pg_publication_namespace pn JOIN pg_class c ON c.relnamespace = pn.pnnspid
   WHERE pn.pnpubid = %(pub)s AND c.oid IN (SELECT l.relid UNION SELECT relid FROM pg_partition_ancestors(l.relid))"""
_RUNNING_SQL = "SELECT pg_current_snapshot()::text"
_WHO_SQL = ("SELECT pid, backend_xid::text FROM pg_stat_activity WHERE backend_xid IS NOT NULL "
            "UNION ALL SELECT NULL, transaction::text FROM pg_prepared_xacts")


def wait_for_earlier_writers(conn: psycopg.Connection, publication: str, tables: dict[str, str],
                             log: Callable[[str], None]) -> None:
    """Wait until no transaction that was running when one of ``tables`` (label -> qualified name)
    joined ``publication`` is still running (``conn`` in autocommit)."""
    pub = conn.execute("SELECT oid FROM pg_publication WHERE pubname = %s", (publication,)).fetchone()
    if pub is None:
        return
    running = SnapshotHorizon(conn.execute(_RUNNING_SQL).fetchone()[0])
    joined = {label: _joined_at(conn, pub[0], qualified, running.xmax) for label, qualified in tables.items()}
    waiting = {x for x in running.in_progress if any(m is not None and x < m for m in joined.values())}
    if not waiting:
        return
    labels = ", ".join(label for label, m in joined.items() if m is not None and any(x < m for x in waiting))
    started, note_at = time.monotonic(), time.monotonic() + FIRST_NOTE_S
    while waiting:
        time.sleep(POLL_S)
        waiting &= SnapshotHorizon(conn.execute(_RUNNING_SQL).fetchone()[0]).in_progress
        if waiting and time.monotonic() >= note_at:
            note_at += NOTE_EVERY_S
            log(f"postgres: {labels}: waiting {time.monotonic() - started:.0f}s for {_who(conn, waiting)} that "
                f"began before the table joined publication {publication!r}: the changes it made before are not "
                f"in the change log, so the load's snapshot must see it end (end or commit it to go on)")


def _joined_at(conn: psycopg.Connection, pub_oid: int, qualified: str, near: int) -> int | None:
    """The 64-bit id of the transaction that made the table (its last leaf to join) a member of the
    publication ``pub_oid``, or None when no catalog row says (FOR ALL TABLES, not published, frozen rows)."""
    by_schema = _BY_SCHEMA if conn.info.server_version >= 150000 else ""
    rows = conn.execute(_MEMBER_ROWS_SQL.format(by_schema=by_schema), {"table": qualified, "pub": pub_oid}).fetchall()
    oldest: dict[int, int] = {}
    for leaf, xmin in rows:
        xid = widen_xid(int(xmin), near) if int(xmin) > 2 else -1  # 0-2: frozen or bootstrap rows
        oldest[leaf] = min(oldest.get(leaf, xid), xid)
    latest = max(oldest.values(), default=-1)
    return latest if latest >= 0 else None


def _who(conn: psycopg.Connection, xids: set[int]) -> str:
    """The waited-for transactions, with their server process ids where this role may see them."""
    low = {x & 0xFFFFFFFF for x in xids}
    pids = sorted(str(pid) for pid, xid in conn.execute(_WHO_SQL).fetchall() if pid is not None and int(xid) in low)
    what = f"{len(xids)} transaction(s)"
    return f"{what} (pid {', '.join(pids)})" if pids else what
