"""Which replayed transactions a full load's snapshot already holds (SnapshotHorizon), against a real server."""

from __future__ import annotations

import psycopg

from olake_cli.sources.postgres.snapshot import SnapshotHorizon


def test_horizon_from_text_and_32_bit_ids_next_to_an_epoch_boundary():
    horizon = SnapshotHorizon("100:110:103,107")
    assert horizon.contains(99) and horizon.contains(105) and horizon.contains(109)
    assert not horizon.contains(103) and not horizon.contains(107)
    assert not horizon.contains(110) and not horizon.contains(5000)
    epoch = 7 << 32
    wrapped = SnapshotHorizon(f"{epoch - 5}:{epoch + 3}:{epoch + 1}")
    assert wrapped.contains(0xFFFFFFFE)  # epoch 6, below xmin
    assert wrapped.contains(2) and not wrapped.contains(1) and not wrapped.contains(3)


def test_horizon_matches_the_servers_own_visibility(pg_cluster, pg_db):
    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("CREATE TABLE t (id int)")
        before = admin.execute("INSERT INTO t VALUES (1) RETURNING pg_current_xact_id()::text").fetchone()[0]
    open_txn = psycopg.connect(dsn)
    running = open_txn.execute("INSERT INTO t VALUES (2) RETURNING pg_current_xact_id()::text").fetchone()[0]
    with psycopg.connect(dsn) as snap:
        snap.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        horizon = SnapshotHorizon(snap.execute("SELECT pg_current_snapshot()::text").fetchone()[0])
        open_txn.commit()
        with psycopg.connect(dsn, autocommit=True) as later:
            after = later.execute("INSERT INTO t VALUES (3) RETURNING pg_current_xact_id()::text").fetchone()[0]
        seen = {row[0] for row in snap.execute("SELECT id FROM t")}
    open_txn.close()
    assert seen == {1}
    for xid, visible in ((before, True), (running, False), (after, False)):
        assert horizon.contains(int(xid) & 0xFFFFFFFF) is visible
