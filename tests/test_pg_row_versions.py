"""Deciding a batch of changes against ``_olake.row_versions`` reads the versions of the batch's keys only,
whatever the planner's statistics say: a table that had just grown (its statistics not yet refreshed)
made every commit read every version of the table once per change, so a follower at 1,000 rows/s fell
further behind with every commit (seconds per commit after a minute)."""

from __future__ import annotations

import psycopg
from psycopg import sql

from olake_cli.destinations.postgres.bookkeeping import ensure_bookkeeping
from olake_cli.destinations.postgres.conflicts import ConflictRule, TwoWayApply
from olake_cli.destinations.postgres.tables import TargetColumn, TargetTable

VERSIONS = 20_000  # keys olake applied before; their statistics say the table holds none
BATCH = 200


def _versions_read(conn: psycopg.Connection) -> int:
    """Tuples of _olake.row_versions read so far in this transaction (sequential and by index)."""
    return conn.execute("SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) "
                        "FROM pg_stat_xact_user_tables WHERE schemaname = '_olake' "
                        "AND relname = 'row_versions'").fetchone()[0]


def test_deciding_a_batch_reads_only_its_keys_versions(pg_target, target_db):
    with psycopg.connect(pg_target.dsn(target_db)) as conn:
        ensure_bookkeeping(conn)
        conn.execute("CREATE TABLE public.acct (id int PRIMARY KEY, v text)")
        conn.execute("ALTER TABLE _olake.row_versions SET (autovacuum_enabled = false)")
        conn.commit()
        conn.execute("ANALYZE _olake.row_versions")  # statistics of the table before it grew
        conn.execute("INSERT INTO public.acct SELECT g, 'v' || g FROM generate_series(1, %s) g", (VERSIONS,))
        conn.execute("INSERT INTO _olake.row_versions (table_schema, table_name, key, commit_ts, origin, deleted) "
                     "SELECT 'public', 'acct', ROW(g)::text, now() - interval '1 hour', 'olake', false "
                     "FROM generate_series(1, %s) g", (VERSIONS,))
        conn.commit()
        conn.execute("CREATE TEMP TABLE olake_apply_t (id int, v text, _olake_op text, _olake_op_id text, "
                     "_olake_commit_ts timestamptz, _olake_xmin xid, _olake_pass smallint DEFAULT 1)")
        conn.execute("INSERT INTO olake_apply_t (id, v, _olake_op, _olake_op_id, _olake_commit_ts) "
                     "SELECT g * 7, 'new', 'u', '0/1:' || g, now() FROM generate_series(1, %s) g", (BATCH,))
        table = TargetTable("public", "acct", "public.acct",
                            (TargetColumn("id", "integer", "int32"), TargetColumn("v", "text", "string")), ("id",))
        apply = TwoWayApply(conn, ConflictRule(0, "olake", "local"), table, sql.Identifier("olake_apply_t"), None)
        apply.lock()
        before = _versions_read(conn)
        decided = apply.decide(1, 10)
        read = _versions_read(conn) - before
        conn.rollback()
    assert decided.conflicts == 0  # every row's version is olake's own
    assert read <= 2 * BATCH, f"deciding {BATCH} changes read {read} of {VERSIONS} versions"
