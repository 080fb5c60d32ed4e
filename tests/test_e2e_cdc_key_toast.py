"""A key update of a row whose large (TOASTed) values it did not touch: the row under the new key keeps them.

PostgreSQL sends such an update with the old key and, for each untouched TOASTed column, only "unchanged"
(REPLICA IDENTITY DEFAULT). The value is not under the new key anywhere in the destination, so the source
fetches it. The cases run the real commands (``read | write`` and ``sync``) into Parquet (the README's
current-table query) and Iceberg (the table's rows), and compares them with the source value by value,
with the key updates in one batch with the earlier versions and in batches of their own.
"""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from tests.support.cli import write_json
from tests.support.current_view import current_view, iceberg_rows
from tests.support.matrix import cases
from tests.support.verify import assert_table_matches
from tests.test_e2e_cdc_stitching import Setup

BIG = "(SELECT string_agg(md5(g::text || random()::text), '') FROM generate_series(1, {n}) g)"
MB, KB64 = BIG.format(n=32768), BIG.format(n=2048)
TABLES = f"""
CREATE TABLE docs (id int PRIMARY KEY, title text, body text, meta jsonb, blob bytea);
INSERT INTO docs SELECT g, 'title ' || g, {MB}, jsonb_build_object('n', g, 'pad', {KB64}),
                        decode({KB64}, 'hex') FROM generate_series(1, 12) g;
CREATE TABLE pairs (a int, b text, body text, PRIMARY KEY (a, b));
INSERT INTO pairs SELECT g, 'k' || g, {MB} FROM generate_series(1, 3) g;
"""
ONE_BATCH = [  # one run, one batch: the earlier versions of some rows are in it too
    "UPDATE docs SET id = 1002 WHERE id = 2",  # the values come from the full load
    f"UPDATE docs SET body = {MB} WHERE id = 3", "UPDATE docs SET id = 1003 WHERE id = 3",
    "UPDATE docs SET id = 1004 WHERE id = 4", "UPDATE docs SET title = 'after the move' WHERE id = 1004",
    "UPDATE docs SET id = 1005 WHERE id = 5", "UPDATE docs SET id = 2005 WHERE id = 1005",
    "UPDATE docs SET id = 1006 WHERE id = 6", "DELETE FROM docs WHERE id = 1006",
    "UPDATE docs SET id = 1007 WHERE id = 7", "UPDATE docs SET body = 'small now' WHERE id = 1007",
    "BEGIN; UPDATE docs SET id = 1008 WHERE id = 8; INSERT INTO docs (id, title) VALUES (8, 'reused'); COMMIT",
    "UPDATE pairs SET b = b || 'x' WHERE a <= 2",
]
OWN_BATCHES = [  # with a checkpoint after every transaction, each of these is a batch of its own
    f"UPDATE docs SET body = {MB}, meta = '{{\"new\": true}}' WHERE id = 9", "UPDATE docs SET id = 1009 WHERE id = 9",
    "UPDATE docs SET id = 3 WHERE id = 1003",
    "UPDATE docs SET id = 1010 WHERE id = 10", "UPDATE docs SET title = 'then this' WHERE id = 1010",
    "UPDATE pairs SET a = 30 WHERE a = 3",
]


class Lake(Setup):
    """A Setup writing to Parquet or to Iceberg, and comparing that destination's current table."""

    def __init__(self, pg_cluster, db: str, tmp_path, slot: str, destination: str) -> None:
        super().__init__(pg_cluster, db, tmp_path, slot)
        self.destination = destination
        if destination == "iceberg":
            self.dst = write_json(tmp_path / "dst.json", {"type": "iceberg", "path": str(self.out)})

    def assert_current(self, name: str, key: tuple[str, ...] = ("id",)) -> None:
        """Which values are NULL per key (a short message), then every value, equal the source's."""
        schema = next(s for s in self.catalog["streams"] if s["name"] == name)["json_schema"]
        columns = list(schema["properties"])
        if self.destination == "parquet":
            rows = current_view(str(self.out / "public" / name), columns, list(key))
        else:
            rows = iceberg_rows(self.out, "public", name).select(columns)
        values = [c for c in columns if c not in key]
        nulls = {tuple(r[k] for k in key): tuple(r[c] is None for c in values) for r in rows.to_pylist()}
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            query = sql.SQL("SELECT {}, {} FROM {}").format(
                sql.SQL(", ").join(map(sql.Identifier, key)),
                sql.SQL(", ").join(sql.SQL("{} IS NULL").format(sql.Identifier(c)) for c in values),
                sql.Identifier("public", name))
            source = {tuple(r[:len(key)]): tuple(r[len(key):]) for r in conn.execute(query).fetchall()}
            assert nulls == source, f"{name}: NULL per key {values}: destination {nulls}, source {source}"
            assert_table_matches(conn, "public", name, schema, rows)


# the source fetches the values: by default one case per destination and path (OLAKE_TEST_ALL_PATHS=1: all four)
@pytest.mark.parametrize("mode,destination", cases([("pipe", "parquet"), ("sync", "parquet"), ("pipe", "iceberg"),
                                                    ("sync", "iceberg")], [("pipe", "parquet"), ("sync", "iceberg")]))
def test_key_update_keeps_unchanged_toast_values(pg_cluster, pg_db, tmp_path, monkeypatch, mode, destination):
    lake = Lake(pg_cluster, pg_db, tmp_path, f"slot_keytoast_{mode}_{destination}", destination)
    lake.execute(TABLES)
    lake.discover({"docs": "cdc", "pairs": "cdc"})
    lake.run(mode)
    lake.execute(*ONE_BATCH)
    lake.run(mode)
    with psycopg.connect(lake.dsn) as conn:  # the cases are what the test means them to be
        assert conn.execute("SELECT length(body) FROM docs WHERE id = 1002").fetchone()[0] == 32768 * 32
        assert conn.execute("SELECT count(*) FROM docs WHERE id IN (6, 1006)").fetchone()[0] == 0
    lake.assert_current("docs")
    lake.assert_current("pairs", ("a", "b"))
    monkeypatch.setenv("OLAKE_CDC_CHECKPOINT_EVERY", "1")
    lake.execute(*OWN_BATCHES)
    lake.run(mode)
    lake.assert_current("docs")
    lake.assert_current("pairs", ("a", "b"))
    lake.drop_slot()
