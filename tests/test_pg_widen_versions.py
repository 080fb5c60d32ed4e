"""A column the source widens, on a PostgreSQL target that decides conflicts (track_commit_timestamp on):
the ALTER that widens it rewrites every row, yet each row keeps its version (``conflicts.keep_versions``).

Before, every row looked like a local write made at the ALTER's time: a change committed at the source
before that moment lost against every row ("the target's row is newer and stays"), exit 0. A row a
local session wrote before the ALTER must still win against an older change."""

from __future__ import annotations

import psycopg

from tests.support.conformance import Destination, body, catalog, change, full_load, state
from tests.test_destination_conformance import LOAD


def test_a_widening_keeps_every_rows_version(pg_target, target_db, tmp_path):
    destination = Destination("postgres", tmp_path, pg_target, target_db)
    destination.write([catalog(), *full_load("L1", LOAD[:1])])
    with psycopg.connect(destination.dsn, autocommit=True) as conn:  # a local write, newer than the changes
        conn.execute("UPDATE public.docs SET v = 'local' WHERE id = 2")
    result = destination.write([catalog(), catalog("int64"), change("u", 32, 1, id=1, v="wide", n=2**40, body=body(1)),
                                change("u", 32, 2, id=2, v="older", n=2, body=body(2)), state("L1", None, "0/20")])
    assert b"1 conflict(s), 1 kept the target's newer row" in result.stderr, result.stderr.decode()
    assert destination.rows() == {**LOAD[0], 1: ("wide", 2**40, body(1)), 2: ("local", 2, body(2))}
    with psycopg.connect(destination.dsn) as conn:
        assert conn.execute("SELECT key, winner FROM _olake.conflicts").fetchall() == [("(2)", "target")]
