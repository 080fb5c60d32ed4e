"""``_olake.row_versions``, in process against the real target cluster. Deciding a batch of changes reads
the versions of the batch's keys only, whatever the planner's statistics say: a table that had just
grown (its statistics not yet refreshed) made every commit read every version of the table once per
change, so a follower at 1,000 rows/s fell further behind with every commit (seconds per commit after a
minute). Local key moves and truncates leave tombstones, also in a database an earlier version set up."""

from __future__ import annotations

import psycopg
from psycopg import sql

from olake_cli.destinations.postgres.bookkeeping import ensure_bookkeeping
from olake_cli.destinations.postgres.conflicts import ConflictRule, TwoWayApply, prepare_table
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


def _entries(conn: psycopg.Connection) -> list[tuple[str, bool]]:
    return conn.execute("SELECT key, deleted FROM _olake.row_versions WHERE table_name = 'moved' "
                        "ORDER BY key").fetchall()


def test_an_earlier_versions_installation_gets_the_key_move_and_truncate_tombstones(pg_target, target_db):
    """A database an earlier version set up (``_olake`` without a version comment, its functions without
    those of key moves and truncates, tables with the DELETE trigger only) is brought up to date on first
    use: a local UPDATE that changes a (composite) key leaves a tombstone for the old key, one that keeps
    the key leaves none, a TRUNCATE leaves the table's truncation."""
    dsn = pg_target.dsn(target_db)
    with psycopg.connect(dsn) as conn:
        ensure_bookkeeping(conn)
        conn.execute("CREATE TABLE public.moved (a int, b text, v text, PRIMARY KEY (a, b)); "
                     "INSERT INTO public.moved VALUES (1, 'x', 'one'), (2, 'y', 'two')")
        conn.execute("DROP FUNCTION _olake.remember_moves, _olake.remember_truncates; COMMENT ON SCHEMA _olake IS NULL; "
                     "CREATE TRIGGER olake_remember_deletes AFTER DELETE ON public.moved REFERENCING OLD TABLE AS "
                     "olake_gone FOR EACH STATEMENT EXECUTE FUNCTION _olake.remember_deletes('a, b')")
        conn.commit()  # as the earlier version left it
        ensure_bookkeeping(conn)
        table = TargetTable("public", "moved", "public.moved", (TargetColumn("a", "integer", "int32"),
                            TargetColumn("b", "text", "string"), TargetColumn("v", "text", "string")), ("a", "b"))
        prepare_table(conn, table, 1)
        conn.commit()
        with psycopg.connect(dsn, autocommit=True) as local:  # an application's session
            local.execute("UPDATE public.moved SET b = 'z', v = 'moved' WHERE a = 1")
            local.execute("UPDATE public.moved SET v = 'kept', b = b WHERE a = 2")
        assert _entries(conn) == [("(1,x)", True)]
        with psycopg.connect(dsn, autocommit=True) as local:
            local.execute("TRUNCATE public.moved")
        assert _entries(conn) == [("(1,x)", True), ("*", True)]
        prepare_table(conn, table, 1)  # made once: a second run changes no trigger
        assert conn.execute("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'public.moved'::regclass "
                            "AND tgname LIKE 'olake_remember_%'").fetchone()[0] == 3
        conn.rollback()
