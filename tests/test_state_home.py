"""The state lives in the destination (seeds/000): ``sync`` resumes from what the destination committed.

Without ``--state``, or with a state file that is behind, a rerun continues from the destination's own
record (Iceberg's ``olake.state``, the Parquet manifest, ``_olake.streams``) and says so; it never
reloads silently. A full reload happens when the destination holds nothing of a stream, or when asked
with ``--full-refresh``, and then the destination holds exactly the source's rows. A ``--state`` path
in a folder that does not exist is refused before anything is written. Every run is the real command;
every comparison is value by value against the source table.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import psycopg
import pyarrow.compute as pc
import pytest

from tests.support.cdc import discover_catalog, make_accounts
from tests.support.cli import read_into_write, run_olake, write_json
from tests.support.current_view import iceberg_rows
from tests.support.pg_compare import assert_same_rows
from tests.support.verify import assert_table_matches, latest_versions, read_parquet
from tests.test_bad_input import assert_one_error

ROWS = 300
RESUMING = "resuming 1 of 1 stream(s) from the state the destination committed (public.acct: cdc at "


def _setup(pg_cluster, db: str, tmp_path: Path, kind: str, slot: str, modes: dict[str, str]) -> tuple[str, str, str]:
    """A source config (with a slot when a stream is ``cdc``), a destination config and a catalog."""
    extra = dict(replication_slot=slot, publication=f"{slot}_pub", create_slot_and_publication=True) \
        if "cdc" in modes.values() else {}
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(db, max_parallel=1, **extra))
    dst = write_json(tmp_path / "dst.json", {"type": kind, "path": str(tmp_path / "lake")})
    cursor = {name: "updated" for name, mode in modes.items() if mode == "incremental"}
    discover_catalog(src, tmp_path / "cat.json", modes, cursor=cursor, only=set(modes))
    return src, dst, str(tmp_path / "cat.json")


def _sync(src: str, dst: str, cat: str, *extra: str) -> str:
    """One ``olake sync``, which must succeed; returns its stderr."""
    result = run_olake("sync", "--source", src, "--destination", dst, "--catalog", cat, *extra)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    return result.stderr.decode()


def _change(dsn: str, step: int) -> None:
    """Updates, deletes and inserts on ``acct`` (different rows at each ``step``)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE acct SET balance = balance + %s, note = note || '+' WHERE id %% 7 = %s", (step, step))
        conn.execute("DELETE FROM acct WHERE id BETWEEN %s AND %s", (step * 20, step * 20 + 4))
        conn.execute("INSERT INTO acct SELECT g, g / 3.0, 'new' FROM generate_series(%s::int, %s::int) g",
                     (1000 * step, 1000 * step + 9))


def _schema(cat: str, name: str) -> dict:
    return next(s for s in json.loads(Path(cat).read_text())["streams"] if s["name"] == name)["json_schema"]


def _assert_current(kind: str, tmp_path: Path, dsn: str, cat: str, name: str) -> None:
    """The stream's current table (Iceberg's live rows; Parquet's newest version per key) equals the
    source table, every column, every value, with exactly as many rows."""
    schema = _schema(cat, name)
    columns = list(schema["properties"])
    if kind == "iceberg":
        current = iceberg_rows(tmp_path / "lake", "public", name)
    else:
        current = latest_versions(read_parquet(str(tmp_path / "lake" / "public" / name)), ["id"])
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert_table_matches(conn, "public", name, schema, current.select(columns))


def _parquet_loaded_rows(tmp_path: Path, name: str) -> int:
    """Rows the Parquet destination holds from full loads (``_olake_op`` 'r'): a reload would add more."""
    data = read_parquet(str(tmp_path / "lake" / "public" / name))
    return pc.sum(pc.equal(data.column("_olake_op"), "r")).as_py()


def test_sync_without_state_resumes_from_the_destination(pg_cluster, pg_db, tmp_path):
    """A second ``sync`` into Iceberg without ``--state`` continues the change capture the first one
    committed: one line says so, no full load runs, the changes land once and the table equals the
    source. (Parquet without ``--state``: the full-refresh test's second run.)"""
    dsn = pg_cluster.dsn(pg_db)
    make_accounts(dsn, "acct", ROWS)
    src, dst, cat = _setup(pg_cluster, pg_db, tmp_path, "iceberg", "home_iceberg", {"acct": "cdc"})
    first = _sync(src, dst, cat)
    _change(dsn, 1)

    second = _sync(src, dst, cat)
    assert "full load" not in second, second
    _assert_current("iceberg", tmp_path, dsn, cat, "acct")  # exactly the source's rows: none twice
    assert RESUMING in second, second
    assert "the destination holds nothing of 1 stream(s), loaded in full: public.acct" in first, first
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot('home_iceberg')")


def _assert_no_change_twice(tmp_path: Path) -> None:
    """The Parquet stream holds its load once and each change (key, operation id) once."""
    data = read_parquet(str(tmp_path / "lake" / "public" / "acct"))
    assert _parquet_loaded_rows(tmp_path, "acct") == ROWS
    ids = [f"{i}/{op}" for i, op in zip(data.column("id").to_pylist(), data.column("_olake_op_id").to_pylist())]
    assert len(ids) == len(set(ids)), "a change was applied twice"


def test_a_state_file_behind_the_destination_gives_way_to_it(pg_cluster, pg_db, tmp_path):
    """The state file put back to an older copy of itself: the stream moves to the destination's position
    (a line says from what to what), the file is rewritten to match, nothing is applied twice and nothing
    reloaded; the same through ``read --state FILE --state-from DEST | write --state FILE``."""
    dsn = pg_cluster.dsn(pg_db)
    make_accounts(dsn, "acct", ROWS)
    src, dst, cat = _setup(pg_cluster, pg_db, tmp_path, "parquet", "home_behind", {"acct": "cdc"})
    state, old = tmp_path / "st.json", tmp_path / "old.json"
    _sync(src, dst, cat, "--state", str(state))
    shutil.copy(state, old)
    _change(dsn, 1)
    again = _sync(src, dst, cat, "--state", str(state))
    assert "resuming" not in again and "the destination committed" not in again, again  # the file agrees
    _change(dsn, 2)

    old_position = json.loads(old.read_text())["streams"][0]["stream_state"]["cursor_field"]
    new_position = json.loads(state.read_text())["streams"][0]["stream_state"]["cursor_field"]
    assert old_position != new_position
    shutil.copy(old, state)  # the file is behind what the destination committed
    behind = _sync(src, dst, cat, "--state", str(state))
    assert "full load" not in behind, behind
    _assert_current("parquet", tmp_path, dsn, cat, "acct")
    _assert_no_change_twice(tmp_path)
    moved = [line for line in behind.splitlines() if "the destination committed" in line]
    assert moved == [f"olake: public.acct: the state file '{state}' holds cdc at {old_position}, the destination "
                     f"committed cdc at {new_position}: resuming from the destination's record"], behind
    newest = json.loads(state.read_text())["streams"][0]["stream_state"]["cursor_field"]
    assert newest != old_position

    shutil.copy(old, state)
    _change(dsn, 3)  # the pipe: read cannot see the destination unless told where it is
    pipe = read_into_write(["--config", src, "--catalog", cat, "--state", str(state), "--state-from", dst],
                           ["--config", dst, "--state", str(state)])
    assert pipe.read_code == 0 and pipe.write_code == 0, (pipe.read_stderr + pipe.write_stderr).decode()[-3000:]
    _assert_current("parquet", tmp_path, dsn, cat, "acct")
    _assert_no_change_twice(tmp_path)
    assert f"public.acct: the state file '{state}' holds cdc at {old_position}, the destination committed cdc at " \
        f"{newest}: resuming from the destination's record" in pipe.read_stderr.decode(), pipe.read_stderr.decode()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot('home_behind')")


def test_full_refresh_replaces_the_streams_contents(pg_cluster, pg_db, tmp_path):
    """An incremental stream cannot see deletes: a rerun resumes (the deleted rows stay), then
    ``--full-refresh`` loads it anew and the destination holds exactly the source's rows; an unknown
    stream name is refused before anything runs."""
    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("""CREATE TABLE items (id int PRIMARY KEY, v text, updated int NOT NULL);
                        INSERT INTO items SELECT g, 'v' || g, g FROM generate_series(1, 100) g""")
    src, dst, cat = _setup(pg_cluster, pg_db, tmp_path, "parquet", "", {"items": "incremental"})
    _sync(src, dst, cat)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM items WHERE id <= 10")
        conn.execute("UPDATE items SET v = 'changed', updated = 500 WHERE id BETWEEN 50 AND 54")
    resumed = _sync(src, dst, cat)
    current = latest_versions(read_parquet(str(tmp_path / "lake" / "public" / "items")), ["id"])
    assert current.num_rows == 100 and current.filter(pc.equal(current.column("v"), "changed")).num_rows == 5
    assert "resuming 1 of 1 stream(s) from the state the destination committed (public.items: incremental at "\
        in resumed, resumed

    unknown = run_olake("sync", "--source", src, "--destination", dst, "--catalog", cat, "--full-refresh", "nope")
    assert_one_error(unknown, "config_error", "--full-refresh 'nope' names no selected stream",
                     "(selected: public.items)")
    refreshed = _sync(src, dst, cat, "--full-refresh", "items")
    assert "public.items: full refresh asked" in refreshed and "full load in" in refreshed, refreshed
    _assert_current("parquet", tmp_path, dsn, cat, "items")
    assert read_parquet(str(tmp_path / "lake" / "public" / "items")).num_rows == 90  # only the new load is live


def test_sync_into_postgres_without_state_resumes(pg_cluster, pg_db, pg_target, target_db, tmp_path):
    """The PostgreSQL destination's ``_olake.streams`` is the record a rerun without ``--state`` resumes from."""
    dsn, target = pg_cluster.dsn(pg_db), pg_target.dsn(target_db)
    make_accounts(dsn, "acct", ROWS)
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot="home_pg", publication="home_pg_pub", create_slot_and_publication=True,
        max_parallel=1))
    dst = write_json(tmp_path / "dst.json", pg_target.destination_config(target_db))
    discover_catalog(src, tmp_path / "cat.json", {"acct": "cdc"}, only={"acct"})
    cat = str(tmp_path / "cat.json")
    _sync(src, dst, cat)
    _change(dsn, 1)
    second = _sync(src, dst, cat)
    assert "full load" not in second, second
    assert assert_same_rows(dsn, ("public", "acct"), target, ("public", "acct"), ["id", "balance", "note"]) \
        == ROWS - 5 + 10
    assert RESUMING in second, second
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot('home_pg')")


@pytest.mark.parametrize("command", ["read", "write", "sync"])
def test_a_state_path_in_a_missing_folder_is_refused(pg_cluster, tmp_path, command):
    """``--state nodir/x.json``: one config_error line, non-zero exit, no folder created, nothing written."""
    src = write_json(tmp_path / "src.json", pg_cluster.source_config("postgres"))
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "lake")})
    cat = write_json(tmp_path / "cat.json", {"streams": [{
        "name": "t", "namespace": "public", "supported_sync_modes": ["full_refresh"],
        "json_schema": {"type": "object", "properties": {"id": {"type": "integer", "x-olake-type": "int32"}}}}]})
    state = str(tmp_path / "nodir" / "x.json")
    args = {"read": ["read", "--config", src, "--catalog", cat],
            "write": ["write", "--config", dst],
            "sync": ["sync", "--source", src, "--destination", dst, "--catalog", cat]}[command]
    result = run_olake(*args, "--state", state, stdin=b"")
    assert_one_error(result, "config_error", f"--state {state}: the folder '{tmp_path / 'nodir'}' does not exist")
    assert not (tmp_path / "nodir").exists() and not (tmp_path / "lake").exists()
