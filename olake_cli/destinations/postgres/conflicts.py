"""Two-way apply: a change that meets a row someone else wrote is decided by commit time, atomically.

Used when conflicts are detected (writes carry an origin, the target keeps commit timestamps). Every
key's *version* is the commit time and origin of its last write:
- a row olake applied: the change's own source commit time and origin, kept per key in
  ``_olake.row_versions`` (a batch holds many source transactions but commits as one target
  transaction, whose commit timestamp is the batch's newest); the entry counts while its ``xmin``
  is the row's, i.e. while nobody wrote the row since;
- a row anyone else wrote (a local session, PostgreSQL's own subscription): its transaction's commit
  time and origin (``pg_xact_commit_timestamp_origin(xmin)``);
- a key without a row: the later of its tombstone in ``_olake.row_versions`` and the table's last
  TRUNCATE: olake's deletes and truncates with their source commit time, local deletes, key moves and
  truncates recorded by triggers with their transaction (``tombstones.py``), so that an older update
  of a key that left the table loses instead of bringing the row back. Entries older than
  ``tombstone_hours`` are pruned; beyond that horizon a key counts as never seen.

A change loses when the version is someone else's and later (equal times: the greater origin name;
a local write counts as ``local_origin``). The decision is atomic with the write: the batch's target
rows are locked (``FOR UPDATE``) and decided; the winners are deleted or updated while still locked;
keys that had no row are inserted with ``ON CONFLICT DO UPDATE ... WHERE false``, which writes
nothing over a row a local session inserted meanwhile but locks it, and such rows are decided in a
second pass. olake's own directions writing one table take turns (a transaction-level advisory lock).
Each conflict (a change that lost, or a change to a key someone else wrote since this direction last
wrote rows into the table) is a row of ``_olake.conflicts`` and a log line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from psycopg import sql

from olake_cli.core.row_metadata import COMMIT_TS, OP, OP_ID, TOAST
from olake_cli.destinations.postgres.tombstones import (ORIGIN_NAME as _ORIGIN_NAME, ROW_VERSION_ORIGIN,
                                                        ROW_VERSION_TS, ROWS_WITH_VERSIONS, TRUNCATED, install_triggers)

_APPLY_LOCK_CLASS = 0x6F6C6170  # 'olap': olake's applies into one table take turns
XMIN, PASS = "_olake_xmin", "_olake_pass"  # the temporary table's columns this module fills
TEMP_COLUMNS = ((XMIN, "xid"), (PASS, "smallint DEFAULT 1"))
_NOT_DATA = [OP, OP_ID, COMMIT_TS, TOAST, XMIN, PASS]


@dataclass(frozen=True)
class ConflictRule:
    """What this session needs to decide conflicts (a session without one does not detect them)."""

    origin_id: int
    origin: str
    local_origin: str


@dataclass
class Decided:
    """What deciding one pass found."""

    conflicts: int = 0
    kept_target: int = 0
    lines: list[str] = field(default_factory=list)


class TwoWayApply:
    """The statements of one two-way apply of a temporary table into its target table."""

    def __init__(self, conn, rule: ConflictRule, table, temp: sql.Identifier, since: datetime | None) -> None:
        self.conn, self.rule, self.table, self.temp, self.since = conn, rule, table, temp, since
        self.fmt = dict(target=table.qualified, temp=temp, m=match_keys(table), skeys=_keys("s", table))

    def lock(self) -> None:
        """Take the table's apply turn, lock the rows the batch meets and note which version was locked."""
        self.conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))",
                          (_APPLY_LOCK_CLASS, f"{self.table.ident[0]}.{self.table.ident[1]}"))
        self._run("WITH locked AS (SELECT s.ctid AS sid, t.xmin AS x FROM {target} t JOIN {temp} s ON {m} "
                  "FOR UPDATE OF t) UPDATE {temp} s SET _olake_xmin = locked.x FROM locked WHERE s.ctid = locked.sid")

    def decide(self, number: int, log_room: int) -> Decided:
        """Drop the changes of pass ``number`` that lose; record every conflict; at most ``log_room`` lines."""
        rule = self.rule
        found = self._run(_DECIDE_SQL, {"schema": self.table.ident[0], "table": self.table.ident[1],
                                        "ours": rule.origin, "local": rule.local_origin, "since": self.since,
                                        "pass": number, "not_data": _NOT_DATA, "truncated": TRUNCATED}).fetchall()
        decided = Decided()
        for key_text, op, incoming_ts, row_ts, row_origin, present, lost in found:
            decided.conflicts += 1
            decided.kept_target += bool(lost)
            if len(decided.lines) < log_room:
                what = f"the target's row ({row_origin}, {row_ts})" if present else \
                    f"the target's delete of the row ({row_origin}, {row_ts})"
                winner = f"{what} is newer and stays" if lost else f"it is newer than {what} and is applied"
                decided.lines.append(f"{self.table.label}: conflict on key {key_text}: the '{op}' committed at "
                                     f"{incoming_ts} {winner}")
        return decided

    def update_locked(self, number: int, assignments: sql.Composable | None) -> int:
        """Update the locked rows the winners of pass ``number`` change (``assignments``: ``SET`` list)."""
        if assignments is None:
            return 0
        return self._run("UPDATE {target} t SET {a} FROM {temp} s WHERE {m} AND s._olake_op <> 'd' "
                         "AND s._olake_xmin IS NOT NULL AND s._olake_pass = %(pass)s",
                         {"pass": number}, a=assignments).rowcount

    def insert_missing(self, columns: sql.Composable, selected: sql.Composable) -> int:
        """Insert the winners whose key had no row; a row inserted meanwhile by someone else is locked and
        left for the second pass. Returns the rows inserted."""
        first_key = sql.Identifier(self.table.key[0])
        inserted = self._run("INSERT INTO {target} AS t ({cols}) SELECT {sel} FROM {temp} s WHERE s._olake_op <> 'd' "
                             "AND s._olake_xmin IS NULL AND s._olake_pass = 1 ON CONFLICT ({keys}) "
                             "DO UPDATE SET {k} = t.{k} WHERE false", cols=columns, sel=selected, k=first_key,
                             keys=sql.SQL(", ").join(map(sql.Identifier, self.table.key))).rowcount
        wanted = self._run("SELECT count(*) FROM {temp} s WHERE s._olake_op <> 'd' AND s._olake_xmin IS NULL "
                           "AND s._olake_pass = 1").fetchone()[0]
        if inserted < wanted:  # rows a local session inserted meanwhile: locked now, decided next
            self._run("UPDATE {temp} s SET _olake_xmin = t.xmin, _olake_pass = 2 FROM {target} t WHERE {m} "
                      "AND s._olake_op <> 'd' AND s._olake_xmin IS NULL AND s._olake_pass = 1 "
                      "AND t.xmin <> pg_current_xact_id()::xid")
        return inserted

    def second_pass_needed(self) -> bool:
        """Whether rows inserted meanwhile by someone else wait for the second pass."""
        return self._run("SELECT EXISTS (SELECT FROM {temp} s WHERE s._olake_pass = 2)").fetchone()[0]

    def record_versions(self) -> None:
        """Every applied change's key now has its source commit time and origin (a delete: a tombstone)."""
        self._run("INSERT INTO _olake.row_versions AS v (table_schema, table_name, key, commit_ts, origin, deleted) "
                  "SELECT %(schema)s, %(table)s, ROW({skeys})::text, s._olake_commit_ts, %(ours)s, s._olake_op = 'd' "
                  "FROM {temp} s ON CONFLICT (table_schema, table_name, key) DO UPDATE SET "
                  "commit_ts = EXCLUDED.commit_ts, origin = EXCLUDED.origin, deleted = EXCLUDED.deleted, "
                  "recorded_at = now()",
                  {"schema": self.table.ident[0], "table": self.table.ident[1], "ours": self.rule.origin})

    def _run(self, statement: str, params: dict | None = None, **parts: sql.Composable):
        return self.conn.execute(sql.SQL(statement).format(**self.fmt, **parts), params)


def match_keys(table) -> sql.Composable:
    """``t.k = s.k AND ...`` over the table's key."""
    return sql.SQL(" AND ").join(sql.SQL("t.{k} = s.{k}").format(k=sql.Identifier(k)) for k in table.key)


def _keys(alias: str, table) -> sql.Composable:
    return sql.SQL(", ").join(sql.SQL("{}.{}").format(sql.Identifier(alias), sql.Identifier(k)) for k in table.key)


def keep_versions(conn, table, rule: ConflictRule) -> None:
    """Before a change of column types that rewrites the table (inside that transaction, which then
    commits under the origin): every row's version is written to ``_olake.row_versions`` by this
    transaction. The rewrite gives every row this transaction's ``xmin``, which would make each row
    look like a write of its own at the rewrite's time (changes committed at the source before it would
    lose); the entries written here are the rows' versions again once it commits."""
    conn.execute(sql.SQL(_KEEP_VERSIONS_SQL).format(target=table.qualified, tkeys=_keys("t", table)),
                 {"schema": table.ident[0], "table": table.ident[1], "local": rule.local_origin})


def prepare_table(conn, table, horizon_hours: float) -> None:
    """Make a keyed table ready for two-way applies (inside the caller's transaction): local deletes, key
    moves and truncates leave tombstones (``tombstones.install_triggers``), and versions older than the
    horizon are forgotten."""
    install_triggers(conn, table)
    conn.execute("DELETE FROM _olake.row_versions WHERE table_schema = %s AND table_name = %s "
                 "AND recorded_at < now() - make_interval(secs => %s)", (*table.ident, horizon_hours * 3600))


_KEEP_VERSIONS_SQL = f"""
INSERT INTO _olake.row_versions AS v (table_schema, table_name, key, commit_ts, origin, deleted)
SELECT * FROM (
    SELECT %(schema)s, %(table)s, ROW({{tkeys}})::text, {ROW_VERSION_TS} AS commit_ts, {ROW_VERSION_ORIGIN}, false
    FROM {ROWS_WITH_VERSIONS}
) known WHERE known.commit_ts IS NOT NULL
ON CONFLICT (table_schema, table_name, key) DO UPDATE SET
    commit_ts = EXCLUDED.commit_ts, origin = EXCLUDED.origin, deleted = false
"""
_VERSION_OF_ROW = "(v.row_xmin = s._olake_xmin OR (s._olake_xmin IS NULL AND v.deleted))"
_DECIDE_SQL = f"""
WITH truncated AS (  -- the table's last TRUNCATE (tombstones.py)
    SELECT coalesce(r.commit_ts, rc.timestamp) AS ts, coalesce(r.origin, {_ORIGIN_NAME.format(c="rc")}) AS origin
    FROM _olake.row_versions r LEFT JOIN LATERAL pg_xact_commit_timestamp_origin(r.xmin) rc ON true
    WHERE r.table_schema = %(schema)s AND r.table_name = %(table)s AND r.key = %(truncated)s
), own AS (
    SELECT s.ctid AS sid, ROW({{skeys}})::text AS key_text, s._olake_op AS op, s._olake_op_id AS op_id,
           s._olake_commit_ts AS in_ts, s._olake_xmin IS NOT NULL AS present,
           CASE WHEN {_VERSION_OF_ROW} THEN coalesce(v.commit_ts, vc.timestamp) ELSE tc.timestamp END AS row_ts,
           CASE WHEN {_VERSION_OF_ROW} THEN coalesce(v.origin, {_ORIGIN_NAME.format(c="vc")})
                ELSE {_ORIGIN_NAME.format(c="tc")} END AS row_origin
    FROM {{temp}} s
    LEFT JOIN LATERAL (  -- one index probe per change, whatever the statistics say (OFFSET 0: kept apart)
        SELECT r.xmin AS row_xmin, r.commit_ts, r.origin, r.deleted FROM _olake.row_versions r
        WHERE r.table_schema = %(schema)s AND r.table_name = %(table)s AND r.key = ROW({{skeys}})::text OFFSET 0
    ) v ON true
    LEFT JOIN LATERAL pg_xact_commit_timestamp_origin(s._olake_xmin) tc ON true
    LEFT JOIN LATERAL pg_xact_commit_timestamp_origin(v.row_xmin) vc ON true
    WHERE s._olake_pass = %(pass)s
), d AS (  -- a key without a row: the later of its tombstone and the table's truncation
    SELECT o.sid, o.key_text, o.op, o.op_id, o.in_ts, o.present, coalesce(t.ts, o.row_ts) AS row_ts,
           CASE WHEN t.ts IS NULL THEN o.row_origin ELSE t.origin END AS row_origin
    FROM own o LEFT JOIN truncated t ON NOT o.present AND t.ts IS NOT NULL
         AND (o.row_ts IS NULL OR t.ts > o.row_ts OR (t.ts = o.row_ts AND t.origin > o.row_origin))
), foreign_versions AS (
    SELECT * FROM d WHERE row_ts IS NOT NULL AND row_origin IS DISTINCT FROM %(ours)s
), lost AS (
    DELETE FROM {{temp}} s USING foreign_versions f
    WHERE s.ctid = f.sid AND (f.row_ts > f.in_ts OR (f.row_ts = f.in_ts AND f.row_origin > %(ours)s))
    RETURNING f.sid
), found AS (
    SELECT f.*, f.sid IN (SELECT sid FROM lost) AS lost FROM foreign_versions f
    WHERE f.sid IN (SELECT sid FROM lost) OR %(since)s::timestamptz IS NULL OR f.row_ts > %(since)s::timestamptz
), logged AS (
    INSERT INTO _olake.conflicts (table_schema, table_name, key, operation, applying_origin, source_position,
                                  incoming_row, incoming_commit_ts, incoming_origin, target_row, target_commit_ts,
                                  target_origin, winner)
    SELECT %(schema)s, %(table)s, c.key_text, c.op, %(ours)s, c.op_id,
           CASE WHEN c.op = 'd' THEN NULL ELSE to_jsonb(s.*) - %(not_data)s::text[] END, c.in_ts, %(ours)s,
           to_jsonb(t.*), c.row_ts, c.row_origin, CASE WHEN c.lost THEN 'target' ELSE 'incoming' END
    FROM found c JOIN {{temp}} s ON s.ctid = c.sid LEFT JOIN {{target}} t ON {{m}} AND t.xmin = s._olake_xmin
    RETURNING 1
)
SELECT key_text, op, in_ts, row_ts, row_origin, present, lost FROM found ORDER BY key_text
"""

