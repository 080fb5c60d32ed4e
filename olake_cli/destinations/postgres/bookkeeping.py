"""The ``_olake`` schema in the target: what each table committed, and the full load in progress.

``_olake.streams``: per target table and origin (each source writing a table has its own origin), the
stream state committed with its rows, the highest operation id applied (changes at or below it are
replays) and when that origin last wrote rows into it.
``_olake.loads``: the full load a table is receiving and, for a load that replaces earlier contents,
the staging table it is written into.
``_olake.chunks``: full-load chunks that Spark tasks of ``olake sync`` committed themselves, each in
the same transaction as its rows. Every write here shares its transaction with the rows it covers.
``_olake.row_versions`` and ``_olake.conflicts``: two-way replication's memory of each key's last
change and deleted keys, and its record of every conflict (``conflicts.py``), and the functions of the
triggers by which local writes leave tombstones (``tombstones.py``). The schema's comment names the
version of all this; a database set up by an earlier version is brought up to date on first use.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from psycopg import sql
from psycopg.types.json import Jsonb

from olake_cli.destinations.postgres import tombstones

SCHEMA = "_olake"
_DDL = """
CREATE SCHEMA IF NOT EXISTS _olake;
CREATE TABLE IF NOT EXISTS _olake.streams (
    table_schema text NOT NULL, table_name text NOT NULL, origin text NOT NULL DEFAULT '',
    stream_namespace text, stream_name text NOT NULL,
    state jsonb NOT NULL, max_op_id text, updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (table_schema, table_name, origin));
CREATE TABLE IF NOT EXISTS _olake.loads (
    table_schema text NOT NULL, table_name text NOT NULL, load_id text NOT NULL, staged_table text,
    PRIMARY KEY (table_schema, table_name));
CREATE TABLE IF NOT EXISTS _olake.chunks (
    table_schema text NOT NULL, table_name text NOT NULL, load_id text NOT NULL, chunk integer NOT NULL,
    rows bigint NOT NULL, committed_at timestamptz NOT NULL DEFAULT now(), run_id text,
    PRIMARY KEY (table_schema, table_name, load_id, chunk));
CREATE TABLE IF NOT EXISTS _olake.row_versions (
    table_schema text NOT NULL, table_name text NOT NULL, key text NOT NULL,
    commit_ts timestamptz, origin text, deleted boolean NOT NULL, recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (table_schema, table_name, key));
CREATE TABLE IF NOT EXISTS _olake.conflicts (
    id bigserial PRIMARY KEY, detected_at timestamptz NOT NULL DEFAULT now(),
    table_schema text NOT NULL, table_name text NOT NULL, key text NOT NULL, operation text NOT NULL,
    applying_origin text NOT NULL, source_position text,
    incoming_row jsonb, incoming_commit_ts timestamptz, incoming_origin text,
    target_row jsonb, target_commit_ts timestamptz, target_origin text,
    winner text NOT NULL CHECK (winner IN ('incoming', 'target')));
""" + tombstones.FUNCTIONS
# databases olake wrote into before sources had their own rows in _olake.streams
_MIGRATE = """
ALTER TABLE _olake.streams ADD COLUMN origin text NOT NULL DEFAULT '';
ALTER TABLE _olake.streams DROP CONSTRAINT streams_pkey;
ALTER TABLE _olake.streams ADD PRIMARY KEY (table_schema, table_name, origin);
"""
_LOCK_CLASS = 0x6F6C6C64  # advisory locks serialising load registration per table
# the comment of schema _olake: a database whose _olake has another (an earlier version's) runs _DDL again
_VERSION = "olake bookkeeping 2: key moves and truncates leave tombstones"


def ensure_bookkeeping(conn) -> None:
    """Create the ``_olake`` schema, tables and functions if missing or older than this version (committed)."""
    if conn.execute("SELECT obj_description(to_regnamespace('_olake'), 'pg_namespace')").fetchone()[0] != _VERSION:
        conn.execute("SELECT pg_advisory_xact_lock(%s, 0)", (_LOCK_CLASS,))
        conn.execute(_DDL)
        if not _has_column(conn, "streams", "origin"):
            conn.execute(_MIGRATE)
        conn.execute("ALTER TABLE _olake.chunks ADD COLUMN IF NOT EXISTS run_id text")
        conn.execute(sql.SQL("COMMENT ON SCHEMA _olake IS {}").format(sql.Literal(_VERSION)))
    conn.commit()


def _has_column(conn, table: str, column: str) -> bool:
    return conn.execute("SELECT EXISTS (SELECT FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attname = %s "
                        "AND NOT attisdropped)", (f"_olake.{table}", column)).fetchone()[0]


@dataclass(frozen=True)
class Committed:
    """What ``_olake.streams`` holds for a table: the stream state committed with its rows (chunks sync
    tasks committed for its load count as done), the highest applied operation id, and when."""

    state: dict | None = None
    max_op_id: str | None = None
    at: datetime | None = None


def committed_state(conn, table: tuple[str, str], origin: str | None) -> Committed:
    """What the source writing under ``origin`` committed for ``table`` (all None when nothing was); a
    row from before sources had rows of their own counts for whichever source comes first."""
    if conn.execute("SELECT to_regclass('_olake.conflicts')").fetchone()[0] is None:
        return Committed()
    row = conn.execute("SELECT state, max_op_id, updated_at FROM _olake.streams WHERE table_schema = %s "
                       "AND table_name = %s AND origin IN (%s, '') ORDER BY origin = '' LIMIT 1",
                       (*table, origin or "")).fetchone()
    if row is None:
        return Committed()
    state, max_op_id, at = row
    return Committed(with_task_chunks(conn, table, state), max_op_id, at)


def is_managed(conn, table: tuple[str, str]) -> bool:
    """Whether olake committed anything into ``table`` (under any origin)."""
    if conn.execute("SELECT to_regclass('_olake.streams')").fetchone()[0] is None:
        return False
    return conn.execute("SELECT EXISTS (SELECT FROM _olake.streams WHERE table_schema = %s AND table_name = %s)",
                        table).fetchone()[0]


def with_task_chunks(conn, table: tuple[str, str], state: dict) -> dict:
    """``state`` with the chunks sync tasks committed for its load marked ``succeed``."""
    inner = state.get("stream_state") or {}
    if state.get("sync_type") != "full-load" or not inner.get("chunks") or not inner.get("load_id"):
        return state
    done = {r[0] for r in conn.execute(
        "SELECT chunk FROM _olake.chunks WHERE table_schema = %s AND table_name = %s AND load_id = %s",
        (*table, inner["load_id"])).fetchall()}
    if not done:
        return state
    chunks = [{**c, "status": "succeed"} if i in done else c for i, c in enumerate(inner["chunks"])]
    return {**state, "stream_state": {**inner, "chunks": chunks}}


def save_state(conn, table: tuple[str, str], origin: str | None, stream: tuple[str | None, str], state: dict,
               max_op_id: str | None, wrote_rows: bool = True) -> datetime:
    """Record the stream state (and highest operation id) the source writing under ``origin`` committed
    with ``table``'s rows; returns ``updated_at``: when that source last wrote rows into the table (this
    transaction's start if ``wrote_rows`` or it has no row here yet; a commit that only moves the
    position keeps the earlier time, which is where the conflict window of the next changes starts)."""
    origin = origin or ""
    at = conn.execute(
        "INSERT INTO _olake.streams (table_schema, table_name, origin, stream_namespace, stream_name, state, "
        "max_op_id) VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (table_schema, table_name, origin) DO UPDATE SET "
        "stream_namespace = EXCLUDED.stream_namespace, stream_name = EXCLUDED.stream_name, "
        "state = EXCLUDED.state, max_op_id = EXCLUDED.max_op_id, "
        "updated_at = CASE WHEN %s THEN now() ELSE _olake.streams.updated_at END RETURNING updated_at",
        (*table, origin, *stream, jsonb(state), max_op_id, wrote_rows)).fetchone()[0]
    if origin:  # a row from before sources had rows of their own is this source's from now on
        conn.execute("DELETE FROM _olake.streams WHERE table_schema = %s AND table_name = %s AND origin = ''", table)
    return at


def forget_table(conn, table: tuple[str, str]) -> None:
    """Drop what ``_olake`` recorded for ``table`` (inside the caller's transaction): a table created
    anew holds none of the rows that state covered, so the stream counts as never committed."""
    found = current_load(conn, table)
    if found is not None and found[1]:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}.{}").format(sql.Identifier(SCHEMA), sql.Identifier(found[1])))
    for name in ("streams", "loads", "chunks", "row_versions"):
        conn.execute(sql.SQL("DELETE FROM {} WHERE table_schema = %s AND table_name = %s").format(
            sql.Identifier(SCHEMA, name)), table)


def current_load(conn, table: tuple[str, str]) -> tuple[str, str | None] | None:
    """(load id, staging table or None) of the load ``table`` is receiving, or None."""
    row = conn.execute("SELECT load_id, staged_table FROM _olake.loads WHERE table_schema = %s AND table_name = %s",
                       table).fetchone()
    return None if row is None else (row[0], row[1])


def register_load(conn, table: tuple[str, str], load_id: str, columns: sql.Composable) -> str | None:
    """Make ``load_id`` the load ``table`` receives (inside the caller's transaction); returns its staging
    table, or None when its rows go straight into the table.

    A new load into an empty table writes into it directly (its chunks appear as they commit); a load
    that replaces rows is written into ``_olake.<staging>`` and swapped in by :func:`finish_load`.
    ``columns`` lists the table's columns for the staging table. Concurrent callers (Spark tasks)
    serialise on an advisory lock, so every one of them agrees on the decision.
    """
    _lock_loads(conn, table)
    found = current_load(conn, table)
    if found is not None and found[0] == load_id:
        return found[1]
    if found is not None and found[1]:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}.{}").format(sql.Identifier(SCHEMA), sql.Identifier(found[1])))
    conn.execute("DELETE FROM _olake.chunks WHERE table_schema = %s AND table_name = %s", table)
    target = sql.Identifier(*table)
    staged = None
    if conn.execute(sql.SQL("SELECT EXISTS (SELECT FROM {})").format(target)).fetchone()[0]:
        staged = staging_name(table, load_id)
        conn.execute(sql.SQL("CREATE TABLE {}.{} AS SELECT {} FROM {} WITH NO DATA").format(
            sql.Identifier(SCHEMA), sql.Identifier(staged), columns, target))
    conn.execute("INSERT INTO _olake.loads (table_schema, table_name, load_id, staged_table) VALUES (%s, %s, %s, %s) "
                 "ON CONFLICT (table_schema, table_name) DO UPDATE SET load_id = EXCLUDED.load_id, "
                 "staged_table = EXCLUDED.staged_table", (*table, load_id, staged))
    return staged


def load_finished(conn, table: tuple[str, str], load_id: str) -> bool:
    """Whether ``load_id`` is already complete in ``table`` (a task of a run that died after its load
    was finished by the next run must not start it again). Serialised with registration and finish."""
    _lock_loads(conn, table)
    for (state,) in conn.execute("SELECT state FROM _olake.streams WHERE table_schema = %s AND table_name = %s "
                                 "AND state -> 'stream_state' ->> 'load_id' = %s", (*table, load_id)).fetchall():
        chunks = (state.get("stream_state") or {}).get("chunks") or []
        if state.get("sync_type") != "full-load" or all(c.get("status") == "succeed" for c in chunks):
            return True
    return False


def still_current(conn, table: tuple[str, str], load_id: str) -> bool:
    """Whether ``load_id`` is still the load ``table`` receives, holding that until the caller commits
    (a chunk commits only into its own load, never after the load was finished)."""
    row = conn.execute("SELECT load_id FROM _olake.loads WHERE table_schema = %s AND table_name = %s FOR SHARE",
                       table).fetchone()
    return row is not None and row[0] == load_id


def _lock_loads(conn, table: tuple[str, str]) -> None:
    """The transaction-long advisory lock serialising a table's load registration and finish."""
    conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_LOCK_CLASS, f"{table[0]}.{table[1]}"))


def staging_name(table: tuple[str, str], load_id: str) -> str:
    """The staging table of a load (unique per table and load, within PostgreSQL's 63 bytes)."""
    digest = hashlib.sha1(f"{table[0]}\0{table[1]}".encode()).hexdigest()[:16]
    return f"load_{digest}_{load_id[:24]}"


def chunk_committed(conn, table: tuple[str, str], load_id: str, chunk: int) -> bool:
    """Whether a sync task already committed chunk ``chunk`` of ``load_id`` into ``table``."""
    return conn.execute("SELECT EXISTS (SELECT FROM _olake.chunks WHERE table_schema = %s AND table_name = %s "
                        "AND load_id = %s AND chunk = %s)", (*table, load_id, chunk)).fetchone()[0]


def mark_chunk(conn, table: tuple[str, str], load_id: str, chunk: int, rows: int, run_id: str) -> None:
    """Record chunk ``chunk`` of ``load_id`` as committed by run ``run_id`` (a second attempt fails on
    the key)."""
    conn.execute("INSERT INTO _olake.chunks (table_schema, table_name, load_id, chunk, rows, run_id) "
                 "VALUES (%s, %s, %s, %s, %s, %s)", (*table, load_id, chunk, rows, run_id))


def resumed_elsewhere(conn, table: tuple[str, str], load_id: str, run_id: str) -> bool:
    """Whether another run committed chunks of ``load_id`` (read in another snapshot: keys may repeat)."""
    return conn.execute("SELECT EXISTS (SELECT FROM _olake.chunks WHERE table_schema = %s AND table_name = %s "
                        "AND load_id = %s AND run_id IS DISTINCT FROM %s)", (*table, load_id, run_id)).fetchone()[0]


def finish_load(conn, table: tuple[str, str], load_id: str, columns: sql.Composable) -> bool:
    """End load ``load_id`` of ``table``: a staged one replaces the table's rows in this transaction
    (readers, whatever their isolation, see the old rows until it commits, then the new ones; nobody
    waits); returns whether it was staged. A leftover of another load is dropped."""
    _lock_loads(conn, table)
    found = current_load(conn, table)
    if found is None:
        return False
    staged = found[1] if found[0] == load_id else None
    if found[1] and not staged:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}.{}").format(sql.Identifier(SCHEMA), sql.Identifier(found[1])))
    if staged:
        target = sql.Identifier(*table)
        conn.execute(sql.SQL("DELETE FROM {}").format(target))  # MVCC-safe, unlike TRUNCATE
        conn.execute(sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {}.{}").format(
            target, columns, columns, sql.Identifier(SCHEMA), sql.Identifier(staged)))
        conn.execute(sql.SQL("DROP TABLE {}.{}").format(sql.Identifier(SCHEMA), sql.Identifier(staged)))
        forget_versions(conn, table)
    conn.execute("DELETE FROM _olake.loads WHERE table_schema = %s AND table_name = %s", table)
    conn.execute("DELETE FROM _olake.chunks WHERE table_schema = %s AND table_name = %s", table)
    return bool(staged)


def forget_versions(conn, table: tuple[str, str]) -> None:
    """Forget the versions and tombstones of a table whose rows were replaced (a load, a TRUNCATE)."""
    conn.execute("DELETE FROM _olake.row_versions WHERE table_schema = %s AND table_name = %s", table)


def load_rows_target(table: tuple[str, str], staged: str | None) -> sql.Composable:
    """Where a load's rows go: the staging table, or the table itself."""
    return sql.Identifier(SCHEMA, staged) if staged else sql.Identifier(*table)


def jsonb(value: Any) -> Jsonb:
    """A JSON value for a jsonb parameter (orjson: u64 exact)."""
    return Jsonb(value, dumps=lambda v: orjson.dumps(v).decode())
