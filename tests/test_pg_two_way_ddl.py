"""TRUNCATE and DROP TABLE in two-way replication, on either node, through ``sync`` and ``read | write``.

A TRUNCATE replicates as a delete of every row older than it: a write the other node made before it
does not come back, one made after it stays on both nodes. DROP TABLE is not replicated: both
directions stop with an error naming the table until it is dropped on both nodes (and deselected) or
restored from the other node's rows; never an empty table created and filled with later changes only.
"""

from __future__ import annotations

import psycopg
import pytest

from tests.support.cli import run_olake
from tests.support.pg_compare import assert_same_rows
from tests.support.pg_mesh import Mesh, Node, meshes


@pytest.fixture()
def make_mesh(tmp_path):
    """Mesh(tmp_path, nodes); every slot of its nodes' databases is dropped afterwards."""
    yield from meshes(tmp_path)


def _joined(make_mesh, pg_cluster, pg_db, pg_target, target_db) -> tuple[Node, Node, Mesh]:
    a, b = Node("a", pg_cluster, pg_db), Node("b", pg_target, target_db)
    mesh = make_mesh([a, b])
    mesh.sync("a", "b")
    mesh.pipe("b", "a")
    return a, b, mesh


def test_a_truncate_on_either_node_keeps_only_the_writes_made_after_it(pg_cluster, pg_db, pg_target, target_db,
                                                                       make_mesh):
    a, b, mesh = _joined(make_mesh, pg_cluster, pg_db, pg_target, target_db)
    b.execute("UPDATE t SET v = 'b-before' WHERE id = 1")  # older than A's TRUNCATE: gone on both nodes
    a.execute("TRUNCATE t")
    b.execute("UPDATE t SET v = 'b-after', n = 2 WHERE id = 2", "INSERT INTO t VALUES (50, 'b-new', 5)")
    a.execute("INSERT INTO t VALUES (60, 'a-new', 6)")
    mesh.sync("a", "b")  # A's TRUNCATE applied by sync, B's later by read | write
    mesh.pipe("b", "a")
    expected = {"2": ("b-after", "2"), "50": ("b-new", "5"), "60": ("a-new", "6")}
    assert (a.rows(), b.rows()) == (expected, expected)
    a.execute("UPDATE t SET v = 'a-before' WHERE id = 60")
    b.execute("TRUNCATE t")  # the other way round
    a.execute("INSERT INTO t VALUES (70, 'a-after', 7)")
    mesh.pipe("b", "a")
    mesh.sync("a", "b")
    assert (a.rows(), b.rows()) == ({"70": ("a-after", "7")}, {"70": ("a-after", "7")})
    assert_same_rows(a.dsn, ("public", "t"), b.dsn, ("public", "t"), ["id", "v", "n"])
    outcomes = {(c["key"], c["operation"], c["winner"]) for c in b.conflicts()}
    assert ("(60)", "u", "target") in outcomes, outcomes


def _run(mesh: Mesh, src: str, dst: str, pipe: bool):
    source, catalog, destination, state = mesh.paths(src, dst)
    if not pipe:
        return run_olake("sync", "--source", source, "--destination", destination, "--catalog", str(catalog),
                         "--state", str(state))
    read = run_olake("read", "--config", source, "--catalog", str(catalog), "--state", str(state))
    if read.returncode != 0:
        return read
    return run_olake("write", "--config", destination, "--state", str(state), stdin=read.stdout)


DROPPED = "public.t (stream public.t) was dropped after olake wrote into it"


def test_a_dropped_table_stops_both_directions_until_it_is_restored(pg_cluster, pg_db, pg_target, target_db,
                                                                    make_mesh):
    a, b, mesh = _joined(make_mesh, pg_cluster, pg_db, pg_target, target_db)
    a.execute("DROP TABLE t")
    b.execute("UPDATE t SET v = 'b-while-gone' WHERE id = 1")
    into_a, from_a = _run(mesh, "b", "a", pipe=False), _run(mesh, "a", "b", pipe=True)
    assert into_a.returncode != 0 and DROPPED in into_a.stderr.decode(), into_a.stderr.decode()[-2000:]
    assert from_a.returncode != 0 and b"'public.t' does not exist" in from_a.stderr, from_a.stderr.decode()[-2000:]
    with psycopg.connect(a.dsn, autocommit=True) as conn:
        assert conn.execute("SELECT to_regclass('public.t')").fetchone()[0] is None, "nothing made on A"
    with psycopg.connect(b.dsn) as source, psycopg.connect(a.dsn) as target:  # restored from B's copy
        target.execute("CREATE TABLE t (id int PRIMARY KEY, v text, n int)")
        with source.cursor().copy("COPY t TO STDOUT") as out, target.cursor().copy("COPY t FROM STDIN") as into:
            for data in out:
                into.write(data)
    b.execute("UPDATE t SET v = 'b-after-restore' WHERE id = 2")
    a.execute("UPDATE t SET v = 'a-after-restore' WHERE id = 3")
    mesh.both_ways("b", "a", rounds=1)
    expected = {str(i): ("seed", "0") for i in range(4, 21)}
    expected.update({"1": ("b-while-gone", "0"), "2": ("b-after-restore", "0"), "3": ("a-after-restore", "0")})
    assert (a.rows(), b.rows()) == (expected, expected)
    b.execute("DROP TABLE t")  # the other node, the other paths
    into_b, from_b = _run(mesh, "a", "b", pipe=True), _run(mesh, "b", "a", pipe=False)
    assert into_b.returncode != 0 and DROPPED in into_b.stderr.decode(), into_b.stderr.decode()[-2000:]
    assert from_b.returncode != 0 and b"'public.t' does not exist" in from_b.stderr, from_b.stderr.decode()[-2000:]
