"""Two-way replication: the keys that leave a table, by a local write or by a TRUNCATE of the other node.

A key leaves a table by a DELETE, by an UPDATE that changes it (a key move) and by a TRUNCATE; an
older change of that key from the other node must then lose instead of bringing the row back.
olake's own applies record their tombstones exactly (``conflicts.TwoWayApply.record_versions``).
Local writes (applications, PostgreSQL's own subscription) record theirs through the triggers
``install_triggers`` puts on each keyed table a two-way direction writes:

- ``olake_remember_deletes``: after each DELETE statement, a tombstone per deleted key (from its
  transition table);
- ``olake_remember_moves``: after each row an UPDATE moved to another key, a tombstone for the old key
  (a row trigger on the key columns with a ``WHEN`` condition, so updates that keep the key cost nothing);
- ``olake_remember_truncates``: after each TRUNCATE, the table's *truncation*: the ``_olake.row_versions``
  entry of key ``*`` (no key's text is: ``ROW(...)::text`` starts with a parenthesis), the tombstone of
  every key that has neither a row nor a later tombstone.

A trigger's entry has no commit time or origin of its own: those of its transaction (its ``xmin``)
count, as for a row a local session wrote. A TRUNCATE from the other node (``apply_truncate``) deletes
the rows older than it and keeps those written after it (they reach the other node as changes that are
later than its truncation, so both nodes keep them), then records the truncation.
"""

from __future__ import annotations

from datetime import datetime

from psycopg import sql

TRUNCATED = "*"  # the key of a table's truncation in _olake.row_versions
_LOCAL_ONLY = "IF coalesce(current_setting('olake.applying', true), '') <> 'on' THEN"  # olake records its own
_TOMBSTONE = ("ON CONFLICT (table_schema, table_name, key) DO UPDATE SET commit_ts = NULL, origin = NULL, "
              "deleted = true, recorded_at = now()")
FUNCTIONS = f"""
CREATE OR REPLACE FUNCTION _olake.remember_deletes() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN  -- a local delete leaves a tombstone per key (argument: the key columns)
    {_LOCAL_ONLY}
        EXECUTE format('INSERT INTO _olake.row_versions (table_schema, table_name, key, commit_ts, origin, deleted) '
                       'SELECT %L, %L, ROW(%s)::text, NULL, NULL, true FROM olake_gone '
                       '{_TOMBSTONE}', TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_ARGV[0]);
    END IF;
    RETURN NULL;
END $fn$;
CREATE OR REPLACE FUNCTION _olake.remember_moves() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN  -- a row moved to another key by a local update: its old key leaves a tombstone (arguments: the key
       -- columns, the table's schema and name: a partition's trigger names the partitioned table)
    {_LOCAL_ONLY}
        EXECUTE format('INSERT INTO _olake.row_versions (table_schema, table_name, key, commit_ts, origin, deleted) '
                       'SELECT %L, %L, ROW(%s)::text, NULL, NULL, true FROM (SELECT ($1).*) olake_gone '
                       '{_TOMBSTONE}', TG_ARGV[1], TG_ARGV[2], TG_ARGV[0]) USING OLD;
    END IF;
    RETURN NULL;
END $fn$;
CREATE OR REPLACE FUNCTION _olake.remember_truncates() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN  -- a local TRUNCATE: the tombstone of every key that has no row and no later tombstone
    {_LOCAL_ONLY}
        INSERT INTO _olake.row_versions (table_schema, table_name, key, commit_ts, origin, deleted)
        VALUES (TG_TABLE_SCHEMA, TG_TABLE_NAME, '{TRUNCATED}', NULL, NULL, true) {_TOMBSTONE};
    END IF;
    RETURN NULL;
END $fn$;
"""
_TRIGGERS = {
    "olake_remember_deletes": "AFTER DELETE ON {table} REFERENCING OLD TABLE AS olake_gone FOR EACH STATEMENT "
                              "EXECUTE FUNCTION _olake.remember_deletes({keys})",
    "olake_remember_moves": "AFTER UPDATE OF {columns} ON {table} FOR EACH ROW WHEN (ROW({old}) IS DISTINCT FROM "
                            "ROW({new})) EXECUTE FUNCTION _olake.remember_moves({keys}, {schema}, {name})",
    "olake_remember_truncates": "AFTER TRUNCATE ON {table} FOR EACH STATEMENT EXECUTE FUNCTION "
                                "_olake.remember_truncates()",
}


def install_triggers(conn, table) -> None:
    """Give a keyed table the triggers by which local writes leave tombstones (inside the caller's
    transaction). Each is made once, or again when its arguments differ (another key, a table made by an
    earlier version without it): a trigger's DDL waits for the table's open writers."""
    keys = ", ".join(sql.Identifier(k).as_string(conn) for k in table.key)
    wanted = {"olake_remember_deletes": [keys], "olake_remember_moves": [keys, *table.ident],
              "olake_remember_truncates": []}
    found = dict(conn.execute("SELECT tgname, encode(tgargs, 'escape') FROM pg_trigger WHERE tgrelid = %s::regclass "
                              "AND tgname = ANY(%s)", (table.qualified.as_string(conn), list(wanted))).fetchall())
    parts = dict(table=table.qualified, keys=sql.Literal(keys), columns=_listed(table.key, ""),
                 old=_listed(table.key, "OLD."), new=_listed(table.key, "NEW."),
                 schema=sql.Literal(table.ident[0]), name=sql.Literal(table.ident[1]))
    for name, arguments in wanted.items():
        if found.get(name) != "".join(f"{a}\\000" for a in arguments):
            conn.execute(sql.SQL("CREATE OR REPLACE TRIGGER {trigger} " + _TRIGGERS[name]).format(
                trigger=sql.Identifier(name), **parts))


def _listed(key: tuple[str, ...], prefix: str) -> sql.Composable:
    return sql.SQL(", ").join(sql.SQL(prefix) + sql.Identifier(k) for k in key)


def apply_truncate(conn, table, origin: str, local_origin: str, at: datetime) -> tuple[int, int]:
    """A TRUNCATE the source committed at ``at``, applied under ``origin`` (inside the caller's
    transaction): the rows someone else wrote after it stay (a later commit, or as late and of a greater
    origin), every other row is deleted (what this origin wrote precedes its TRUNCATE, whatever the
    commit time of a load's rows here); versions older than it are forgotten and the truncation is
    recorded (unless the table's own is later). Returns (rows deleted, rows kept)."""
    params = {"schema": table.ident[0], "table": table.ident[1], "at": at, "ours": origin, "local": local_origin,
              "truncated": TRUNCATED}
    deleted, kept = conn.execute(sql.SQL(_DELETE_OLDER_SQL).format(
        target=table.qualified, tkeys=sql.SQL(", ").join(sql.SQL("t.") + sql.Identifier(k) for k in table.key)),
        params).fetchone()
    conn.execute("DELETE FROM _olake.row_versions v WHERE table_schema = %(schema)s AND table_name = %(table)s "
                 "AND key <> %(truncated)s AND coalesce(v.commit_ts, pg_xact_commit_timestamp(v.xmin), "
                 "'-infinity') < %(at)s", params)
    conn.execute("INSERT INTO _olake.row_versions AS v (table_schema, table_name, key, commit_ts, origin, deleted) "
                 "VALUES (%(schema)s, %(table)s, %(truncated)s, %(at)s, %(ours)s, true) ON CONFLICT (table_schema, "
                 "table_name, key) DO UPDATE SET commit_ts = EXCLUDED.commit_ts, origin = EXCLUDED.origin, "
                 "recorded_at = now() WHERE coalesce(v.commit_ts, pg_xact_commit_timestamp(v.xmin), '-infinity') "
                 "< EXCLUDED.commit_ts", params)
    return deleted, kept


ORIGIN_NAME = "CASE {c}.roident WHEN 0 THEN %(local)s ELSE (SELECT o.roname FROM pg_replication_origin o " \
              "WHERE o.roident = {c}.roident) END"
# each row of {target} t and its version: the entry o olake wrote with it while nobody wrote the row since
# (its xmin is the row's), else the row's own transaction tc; params schema, table, local
ROW_VERSION_TS = "CASE WHEN o.xmin = t.xmin THEN coalesce(o.commit_ts, oc.timestamp) ELSE tc.timestamp END"
ROW_VERSION_ORIGIN = (f"CASE WHEN o.xmin = t.xmin THEN coalesce(o.origin, {ORIGIN_NAME.format(c='oc')}) "
                      f"ELSE {ORIGIN_NAME.format(c='tc')} END")
ROWS_WITH_VERSIONS = """{target} t
    LEFT JOIN _olake.row_versions o
           ON o.table_schema = %(schema)s AND o.table_name = %(table)s AND o.key = ROW({tkeys})::text
    LEFT JOIN LATERAL pg_xact_commit_timestamp_origin(t.xmin) tc ON true
    LEFT JOIN LATERAL pg_xact_commit_timestamp_origin(o.xmin) oc ON true"""
_DELETE_OLDER_SQL = f"""
WITH versions AS MATERIALIZED (
    SELECT t.tableoid AS toid, t.ctid AS tid, {ROW_VERSION_TS} AS ts, {ROW_VERSION_ORIGIN} AS origin
    FROM {ROWS_WITH_VERSIONS}
), gone AS (  -- (a row written meanwhile is another tuple: it stays)
    DELETE FROM {{target}} t USING versions v
    WHERE t.tableoid = v.toid AND t.ctid = v.tid
      AND NOT coalesce(v.origin <> %(ours)s AND (v.ts > %(at)s OR (v.ts = %(at)s AND v.origin > %(ours)s)), false)
    RETURNING 1
)
SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM versions) - (SELECT count(*) FROM gone)
"""
