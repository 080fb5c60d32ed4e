"""Two-way replication between two real PostgreSQL 15 clusters, without loops.

Node A is a database of the shared cluster, node B one of the target cluster (both with
``track_commit_timestamp = on``). A to B runs with ``skip_origins: ["node_b"]`` on A's source and
``origin: "node_a"`` on B's destination; B to A the other way round, and B's stream starts at the
current position without a full load (``skip_initial_load``). Writers change both nodes, on separate
keys and on the same keys; both nodes end equal, conflicts go to the later commit and are counted,
and once both are quiet a further run in each direction moves no record.
"""

from __future__ import annotations

import json

import psycopg

from olake_cli.sources.postgres.change_feed import FeedRouting, current_wal_lsn, read_changes
from tests.support.writer_thread import WriterThread
from tests.support.cdc import discover_catalog, sync_once
from tests.support.cli import run_olake, write_json
from tests.support.pg_compare import assert_same_rows, table_texts


def test_skip_origins_leaves_out_replicated_transactions_and_moves_past_them(pg_cluster, pg_db):
    """pgoutput (PostgreSQL 15) sends an Origin message for a transaction committed under a replication
    origin: the feed drops those the routing skips, and its resume position passes them."""
    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text); CREATE PUBLICATION p FOR TABLE t")
        conn.execute("SELECT pg_create_logical_replication_slot('s_origin', 'pgoutput')")
        conn.execute("SELECT pg_replication_origin_create('elsewhere')")
        conn.execute("INSERT INTO t VALUES (1, 'local')")
        with psycopg.connect(dsn) as replicated:  # a transaction applied under origin 'elsewhere'
            replicated.execute("SELECT pg_replication_origin_session_setup('elsewhere')")
            replicated.execute("INSERT INTO t VALUES (2, 'replicated'); TRUNCATE t")
            replicated.commit()
        conn.execute("INSERT INTO t VALUES (3, 'local again')")
        upto = current_wal_lsn(conn)
        everything = list(read_changes(conn, "s_origin", "p", upto))
        assert [e.op for e in everything] == ["c", "c", "t", "c"]
        for skip in (frozenset({"elsewhere", "other"}), "*"):
            feed = read_changes(conn, "s_origin", "p", upto, routing=FeedRouting(skip_origins=skip))
            kept = list(feed)
            assert [(e.op, (e.new or {}).get("id")) for e in kept] == [("c", "1"), ("c", "3")]
            assert feed.skipped_transactions == 1 and feed.resume_lsn >= upto
        kept = list(read_changes(conn, "s_origin", "p", upto, routing=FeedRouting(skip_origins=frozenset({"x"}))))
        assert len(kept) == 4, "other origins are captured"
        conn.execute("SELECT pg_drop_replication_slot('s_origin'); SELECT pg_replication_origin_drop('elsewhere')")


def test_check_wants_track_commit_timestamp_for_two_way(spare_cluster, tmp_path):
    """``spare_cluster`` has track_commit_timestamp off, PostgreSQL's default."""
    src = write_json(tmp_path / "src.json", spare_cluster.source_config("postgres", skip_origins=["node_b"]))
    result = run_olake("check", "--config", src)
    assert result.returncode != 0
    assert b"track_commit_timestamp is off" in result.stderr and b"ALTER SYSTEM SET track_commit_timestamp = on" \
        in result.stderr
    plain = write_json(tmp_path / "plain.json", spare_cluster.source_config("postgres"))
    assert run_olake("check", "--config", plain).returncode == 0
    dst = write_json(tmp_path / "dst.json", spare_cluster.destination_config("postgres", origin="olake"))
    checked = run_olake("check", "--config", dst)
    assert checked.returncode == 0 and b"two-way replication needs ALTER SYSTEM" in checked.stderr


class Writer(WriterThread):
    """Updates, inserts, deletes and key moves on one node until stopped (ids of its own, and shared ones:
    a shared key one node moves away while the other updates it is the key move's conflict)."""

    def __init__(self, dsn: str, own: range, shared: range, new_ids: range, seed: int) -> None:
        super().__init__(seed)
        self.dsn, self.own, self.shared, self.new_ids = dsn, own, shared, iter(new_ids)

    def write(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop_event.is_set():
                pick = self.rng.random()
                if pick < 0.45:
                    conn.execute("UPDATE t SET v = v + 1 WHERE id = %s", (self.rng.choice(self.own),))
                elif pick < 0.7:
                    conn.execute("UPDATE t SET v = v + 10, note = %s WHERE id = %s",
                                 (f"from {self.dsn[-12:]}", self.rng.choice(self.shared)))
                elif pick < 0.85:
                    conn.execute("INSERT INTO t VALUES (%s, 0, 'new')", (next(self.new_ids),))
                elif pick < 0.93:
                    conn.execute("DELETE FROM t WHERE id = %s", (self.rng.choice(self.own),))
                else:  # a key move: of a key of its own, or (rarely: they run out) of a shared one
                    moved = self.rng.choice(self.own if pick < 0.9995 else self.shared)
                    conn.execute("UPDATE t SET id = %s, v = v + 100 WHERE id = %s", (next(self.new_ids), moved))


def _conflicts(stderr: bytes) -> int:
    line = next(line for line in stderr.decode().splitlines() if "conflict(s)" in line and "postgres:" in line)
    return int(line.split(";")[1].split("conflict")[0])


def _assert_conflicts_logged_with_keys(stderr: bytes, wanted: dict[str, str]) -> None:
    """Each conflict is one line naming its key (``ROW(key)::text``) and the outcome; the run's summary
    counts exactly the conflicts logged (fewer than 100 per commit: none left unlogged)."""
    lines = [line for line in stderr.decode().splitlines() if ": conflict on key " in line]
    assert not any("more conflict(s)" in line for line in stderr.decode().splitlines())
    assert len(lines) == _conflicts(stderr), stderr.decode()[-3000:]
    by_key: dict[str, list[str]] = {}
    for line in lines:
        key = line.split(": conflict on key ", 1)[1].split(": the ", 1)[0]
        by_key.setdefault(key, []).append(line)
    for key, outcome in wanted.items():
        assert len(by_key.get(key, [])) == 1, (key, lines)
        [line] = by_key[key]
        assert line.startswith("olake: public.t: conflict on key") or "public.t: conflict on key" in line, line
        assert "the 'u' committed at " in line and outcome in line, line


def test_two_way_replication_converges_without_loops(pg_cluster, pg_db, pg_target, target_db, tmp_path):
    a, b = pg_cluster.dsn(pg_db), pg_target.dsn(target_db)
    with psycopg.connect(a, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL, note text)")
        conn.execute("INSERT INTO t SELECT g, 0, 'seed' FROM generate_series(1, 600) g")
    src_a = write_json(tmp_path / "src_a.json", pg_cluster.source_config(
        pg_db, replication_slot="a_to_b", publication="pub_a", create_slot_and_publication=True,
        skip_origins=["node_b"]))
    dst_b = write_json(tmp_path / "dst_b.json", pg_target.destination_config(target_db, origin="node_a",
                                                                             local_origin="node_b"))
    src_b = write_json(tmp_path / "src_b.json", pg_target.source_config(
        target_db, replication_slot="b_to_a", publication="pub_b", create_slot_and_publication=True,
        skip_origins=["node_a"]))
    dst_a = write_json(tmp_path / "dst_a.json", pg_cluster.destination_config(pg_db, origin="node_b",
                                                                              local_origin="node_a"))
    cat_ab, cat_ba = tmp_path / "ab.json", tmp_path / "ba.json"
    discover_catalog(src_a, cat_ab, {"t": "cdc"})
    state_ab, state_ba = tmp_path / "ab_state.json", tmp_path / "ba_state.json"

    def a_to_b():
        return sync_once(src_a, cat_ab, dst_b, state_ab)

    def b_to_a():
        result = run_olake("sync", "--source", src_b, "--destination", dst_a, "--catalog", str(cat_ba),
                           "--state", str(state_ba))
        assert result.returncode == 0, result.stderr.decode()[-3000:]
        return result

    first = a_to_b()  # B receives A's copy (full load)
    assert b"t: full load" in first.read_stderr
    discover_catalog(src_b, cat_ba, {"t": "cdc"})
    catalog = json.loads(cat_ba.read_text())
    catalog["streams"][0]["skip_initial_load"] = True
    cat_ba.write_text(json.dumps(catalog))
    joined = b_to_a()  # B already holds the copy: its changes flow from now on, without a load
    assert b"skip_initial_load" in joined.stderr and b"t: full load in" not in joined.stderr
    assert b"wrote 0 record(s)" in joined.stderr, "A's copy applied on B does not come back"

    with psycopg.connect(a, autocommit=True) as conn_a, psycopg.connect(b, autocommit=True) as conn_b:
        conn_a.execute("UPDATE t SET note = 'A, earlier' WHERE id = 1")
        conn_b.execute("UPDATE t SET note = 'B, later' WHERE id = 1")  # the later commit wins on both nodes
        conn_b.execute("UPDATE t SET note = 'B, earlier' WHERE id = 2")
        conn_a.execute("UPDATE t SET note = 'A, later' WHERE id = 2")
        conn_a.execute("UPDATE t SET note = 'A, earlier' WHERE id = 3")
        conn_b.execute("UPDATE t SET id = 40003 WHERE id = 3")  # later: key 3 leaves both nodes, not to return
        conn_b.execute("UPDATE t SET note = 'B, earlier' WHERE id = 4")
        conn_a.execute("UPDATE t SET id = 40004 WHERE id = 4")
    writers = [Writer(a, range(10, 200), range(550, 600), range(10_000, 20_000), 1),
               Writer(b, range(300, 500), range(550, 600), range(20_000, 30_000), 2)]
    for writer in writers:
        writer.start()
    first_ab = a_to_b().write_stderr
    _assert_conflicts_logged_with_keys(first_ab, {"(1)": "the target's row (node_b, ", "(2)": "is applied"})
    conflicts = _conflicts(first_ab) + _conflicts(b_to_a().stderr)
    for writer in writers:
        writer.stop()
    for _ in range(2):
        conflicts += _conflicts(a_to_b().write_stderr) + _conflicts(b_to_a().stderr)
    assert_same_rows(a, ("public", "t"), b, ("public", "t"), ["id", "v", "note"])
    notes = dict((int(k), n) for k, _, n in table_texts(a, "public", "t", ["id", "v", "note"])
                 if k in ("1", "2", "3", "4", "40003", "40004"))
    assert notes == {1: "B, later", 2: "A, later", 40003: "seed", 40004: "seed"}
    assert conflicts >= 2, "the two deliberate conflicts (at least) are counted"
    quiet_ab, quiet_ba = a_to_b(), b_to_a()
    assert b"wrote 0 record(s)" in quiet_ab.write_stderr and b"wrote 0 record(s)" in quiet_ba.stderr, \
        "a quiet pair of nodes moves no record: nothing loops"
    for dsn, slot in ((a, "a_to_b"), (b, "b_to_a")):
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
