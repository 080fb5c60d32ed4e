"""Two-way and many-way replication converge: conflicts decided atomically, deletes remembered, one
record per source, every conflict a row of ``_olake.conflicts``.

Nodes are databases of the real clusters (``pg_cluster`` and ``pg_target``, both with
``track_commit_timestamp = on``), each holding the same seed rows, each direction a ``cdc`` stream
that starts without a load (``skip_initial_load``), every source with ``skip_origins: "*"`` and every
destination writing under the origin ``from_<source>``. Directions run the real commands (``sync``,
and ``read | write`` for some) one after the other; afterwards every node holds the same rows.
"""

from __future__ import annotations

import subprocess
import time

import psycopg
import pytest

from tests.support.cli import olake_cmd, olake_env
from tests.support.pg_compare import assert_same_rows
from tests.support.pg_mesh import Node, meshes
from tests.support.pgcluster import create_database


@pytest.fixture()
def make_mesh(tmp_path):
    """Mesh(tmp_path, nodes); every slot of its nodes' databases is dropped afterwards."""
    yield from meshes(tmp_path)


def _summary(stderr: str) -> str:
    return next(line for line in stderr.splitlines() if "conflict(s)" in line and "postgres:" in line)


def test_an_insert_committed_while_the_other_direction_applies_is_decided_by_commit_time(
        pg_cluster, pg_db, pg_target, target_db, make_mesh):
    """B inserts key 100 in a transaction that commits after A's insert of key 100, while A → B's apply waits
    for it: A's older row must not overwrite B's, and B's must reach A."""
    a, b = Node("a", pg_cluster, pg_db), Node("b", pg_target, target_db)
    mesh = make_mesh([a, b])
    mesh.sync("a", "b")
    mesh.pipe("b", "a")
    a.execute("INSERT INTO t VALUES (100, 'from A', 1)")
    with psycopg.connect(b.dsn) as open_on_b:
        open_on_b.execute("INSERT INTO t VALUES (100, 'from B', 2)")  # not committed yet
        source, catalog, destination, state = mesh.paths("a", "b")
        run = subprocess.Popen(olake_cmd("sync", "--source", source, "--destination", destination, "--catalog",
                                         str(catalog), "--state", str(state)),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=olake_env())
        try:
            _wait_until_olake_waits_for_a_lock(b, run)
        finally:
            open_on_b.commit()  # B's insert commits while A's change is being applied
        out, err = run.communicate(timeout=300)
    assert run.returncode == 0, err.decode()[-3000:]
    assert "1 conflict(s), 1 kept the target's newer row" in _summary(err.decode())
    assert "conflict on key (100): the 'c' committed at" in err.decode()
    back = mesh.pipe("b", "a")
    assert "1 conflict(s), 0 kept" in _summary(back)
    assert a.rows()["100"] == b.rows()["100"] == ("from B", "2")
    assert_same_rows(a.dsn, ("public", "t"), b.dsn, ("public", "t"), ["id", "v", "n"])
    [on_b] = b.conflicts()
    assert on_b["key"] == "(100)" and on_b["operation"] == "c" and on_b["winner"] == "target" and on_b["older"]
    assert on_b["incoming_row"] == {"id": 100, "v": "from A", "n": 1} and on_b["incoming_origin"] == "from_a"
    assert on_b["target_row"] == {"id": 100, "v": "from B", "n": 2} and on_b["target_origin"] == "from_b"
    assert on_b["applying_origin"] == "from_a" and on_b["positioned"]
    [on_a] = a.conflicts()
    assert on_a["key"] == "(100)" and on_a["winner"] == "incoming" and on_a["target_row"]["v"] == "from A"


def _wait_until_olake_waits_for_a_lock(node: Node, run: subprocess.Popen, timeout: float = 120) -> None:
    """Return once an olake session of ``node`` waits for a lock (the apply meets the open insert)."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(node.dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            assert run.poll() is None, run.communicate()[1].decode()[-3000:]
            waiting = conn.execute("SELECT EXISTS (SELECT FROM pg_stat_activity WHERE datname = current_database() "
                                   "AND application_name = 'olake' AND wait_event_type = 'Lock' "
                                   "AND query LIKE 'INSERT INTO%%')").fetchone()[0]
            if waiting:
                return
            time.sleep(0.05)
    raise AssertionError("the apply never waited for the open transaction")


def test_a_delete_and_an_update_of_one_key_on_two_nodes_end_alike(pg_cluster, pg_db, pg_target, target_db,
                                                                  make_mesh):
    """Later commit wins for deletes too: an older update of a key deleted on the other node loses to the
    delete's tombstone (also a local delete's); a later update wins over an older delete."""
    a, b = Node("a", pg_cluster, pg_db), Node("b", pg_target, target_db)
    mesh = make_mesh([a, b])
    mesh.sync("a", "b")
    mesh.pipe("b", "a")
    b.execute("UPDATE t SET v = 'B, earlier' WHERE id = 2")
    a.execute("DELETE FROM t WHERE id = 2")  # later: the row goes on both nodes
    a.execute("DELETE FROM t WHERE id = 3")
    b.execute("UPDATE t SET v = 'B, later' WHERE id = 3")  # later: the row stays on both nodes
    for _ in range(2):
        mesh.sync("a", "b")
        mesh.pipe("b", "a")
    assert_same_rows(a.dsn, ("public", "t"), b.dsn, ("public", "t"), ["id", "v", "n"])
    assert "2" not in a.rows() and a.rows()["3"] == ("B, later", "0")
    outcomes = {(c["key"], c["operation"], c["winner"]) for c in b.conflicts()}
    assert outcomes == {("(2)", "d", "incoming"), ("(3)", "d", "target")}
    outcomes = {(c["key"], c["operation"], c["winner"], c["target_row"] is None) for c in a.conflicts()}
    assert outcomes == {("(2)", "u", "target", True), ("(3)", "u", "incoming", True)}, "A's own deletes' tombstones"


def test_a_three_node_mesh_converges(pg_cluster, pg_db, pg_target, target_db, make_mesh):
    """A, B and C replicate each pair both ways. B takes changes from A and from C: each source keeps its own
    position and replay watermark in B, and each row its own source commit time, so C's change that
    committed between two of A's (in one batch of A's) still wins where it is the latest."""
    c_db = f"{pg_db}_c"
    create_database(pg_cluster, c_db)
    a, b, c = Node("a", pg_cluster, pg_db), Node("b", pg_target, target_db), Node("c", pg_cluster, c_db)
    mesh = make_mesh([a, b, c])
    order = [("a", "b"), ("c", "b"), ("b", "a"), ("b", "c"), ("a", "c"), ("c", "a")]
    for src, dst in order:
        mesh.sync(src, dst)
    a.execute("UPDATE t SET v = 'A, first', n = 1 WHERE id = 1")
    c.execute("UPDATE t SET v = 'C, second', n = 2 WHERE id = 1")  # C's LSN is below A's next one (one WAL)
    a.execute("UPDATE t SET v = 'A, third', n = 3 WHERE id = 2")
    b.execute("INSERT INTO t VALUES (30, 'B, new', 4)")
    c.execute("DELETE FROM t WHERE id = 5")
    for src, dst in order:  # one round: every change has then reached every node once
        mesh.pipe(src, dst) if (src, dst) == ("c", "b") else mesh.sync(src, dst)
    for node in (a, b, c):
        rows = node.rows()
        assert (rows["1"], rows["2"], rows["30"], "5" in rows) == (("C, second", "2"), ("A, third", "3"),
                                                                    ("B, new", "4"), False), node.name
    assert_same_rows(a.dsn, ("public", "t"), b.dsn, ("public", "t"), ["id", "v", "n"])
    assert_same_rows(c.dsn, ("public", "t"), b.dsn, ("public", "t"), ["id", "v", "n"])
    with psycopg.connect(b.dsn, autocommit=True) as conn:
        origins = conn.execute("SELECT origin FROM _olake.streams ORDER BY 1").fetchall()
    assert origins == [("from_a",), ("from_c",)], "one record per source writing the table"


def test_a_key_moved_on_one_node_leaves_a_tombstone_for_its_old_key(pg_cluster, pg_db, pg_target, target_db,
                                                                    make_mesh):
    """An UPDATE that changes the key removes the old key as a DELETE would: an older update of the old
    key made on the other node loses to that tombstone (it must not bring the old key back), a later
    one brings it back on both nodes. Directions alternate ``sync`` and ``read | write``."""
    a, b = Node("a", pg_cluster, pg_db), Node("b", pg_target, target_db)
    mesh = make_mesh([a, b])
    mesh.sync("a", "b")
    mesh.pipe("b", "a")
    a.execute("UPDATE t SET v = 'a-upd' WHERE id = 1")
    b.execute("UPDATE t SET id = 100 WHERE id = 1")  # later: key 1 is gone on both nodes
    b.execute("UPDATE t SET v = 'b-upd', n = 2 WHERE id = 2")
    a.execute("UPDATE t SET id = 200, n = 3 WHERE id = 2")  # later: key 2 is gone on both nodes
    a.execute("UPDATE t SET id = 300 WHERE id = 3")
    b.execute("UPDATE t SET v = 'b-later', n = 4 WHERE id = 3")  # later: key 3 comes back on A
    mesh.both_ways("a", "b")
    expected = {str(i): ("seed", "0") for i in range(4, 21)}
    expected.update({"100": ("seed", "0"), "200": ("seed", "3"), "300": ("seed", "0"), "3": ("b-later", "4")})
    assert a.rows() == expected
    assert b.rows() == expected
    assert_same_rows(a.dsn, ("public", "t"), b.dsn, ("public", "t"), ["id", "v", "n"])
    outcomes = {(c["key"], c["operation"], c["winner"]) for c in b.conflicts()}
    assert ("(1)", "u", "target") in outcomes and ("(3)", "d", "target") in outcomes, outcomes
    outcomes = {(c["key"], c["operation"], c["winner"]) for c in a.conflicts()}
    assert ("(2)", "u", "target") in outcomes and ("(3)", "u", "incoming") in outcomes, outcomes
