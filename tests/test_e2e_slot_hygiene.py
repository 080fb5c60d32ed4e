"""A replication slot's hygiene end to end, through the real commands against a real cluster.

- A misspelt publication or slot name fails first and alone (one line, a config_error), announces no
  re-sync and leaves the state file as it was; the right config then goes on with the changes.
- A second pipeline on the slot (the Quickstarts followed one after the other: the same source config
  into another destination, with the same or another state file, by ``sync`` or ``read | write``) is
  refused with one line naming the slot and the fix, and the first pipeline goes on undisturbed.
- Every run and ``check`` say how much WAL the slot retains, with a warning past ``slot_wal_warn_bytes``.
- ``olake state drop-slot`` forgets just the claim (``--claim-only``), refuses a slot in use, and drops
  the slot, the publication and the claim, after which the second pipeline runs.
- A claim lives as long as its slot: dropped with SQL, the next pipeline creating it claims it, saying so.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import psycopg

from tests.support.cdc import discover_catalog, make_accounts, sync_once
from tests.support.cli import messages, read_into_write, run_olake, trace_errors, write_json
from tests.support.verify import assert_table_matches, latest_versions, read_parquet
from tests.test_bad_input import assert_one_error


def _run(dsn: str, *statements: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def _one(dsn: str, query: str, *params: object):
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(query, params).fetchone()


def _assert_equals_source(dsn: str, catalog: dict, out_dir) -> None:
    schema = next(s for s in catalog["streams"] if s["name"] == "acct")["json_schema"]
    current = latest_versions(read_parquet(str(out_dir / "public" / "acct")), ["id"]).select(list(schema["properties"]))
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert_table_matches(conn, "public", "acct", schema, current)


def _assert_piped_refused(src: str, cat: str, dst: str, state, needle: str) -> None:
    """``read | write`` fails with read's one error line (a config_error) holding ``needle``; no re-sync."""
    before = state.read_bytes() if state.exists() else None
    piped = read_into_write(["--config", src, "--catalog", cat, "--state", str(state)],
                            ["--config", dst, "--state", str(state)])
    lines = piped.read_stderr.decode().splitlines()
    assert piped.read_code != 0 and piped.write_code != 0 and len(lines) == 1 and needle in lines[0], lines
    assert b"position lost" not in piped.read_stderr + piped.write_stderr  # no re-sync announced
    assert (state.read_bytes() if state.exists() else None) == before


def _refused_sync(src: str, cat: str, dst: str, state, needle: str) -> str:
    """``sync`` fails with one line (a config_error) holding ``needle``; the state file is untouched."""
    before = state.read_bytes() if state.exists() else None
    line = assert_one_error(run_olake("sync", "--source", src, "--destination", dst, "--catalog", cat,
                                      "--state", str(state)), "config_error", needle)
    assert "position lost" not in line and (state.read_bytes() if state.exists() else None) == before
    return line


def test_typos_a_second_pipeline_retained_wal_and_drop_slot(pg_cluster, pg_db, tmp_path):
    dsn, slot, pub = pg_cluster.dsn(pg_db), f"slot_{pg_db}", f"pub_{pg_db}"
    make_accounts(dsn, "acct", 500)
    _run(dsn, f"CREATE PUBLICATION {pub} FOR TABLE acct", f"SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')")
    config = pg_cluster.source_config(pg_db, replication_slot=slot, publication=pub, max_parallel=1)
    src = write_json(tmp_path / "src.json", config)
    catalog = discover_catalog(src, tmp_path / "cat.json", {"acct": "cdc"}, only={"acct"})
    cat, state_a, state_b = str(tmp_path / "cat.json"), tmp_path / "a.json", tmp_path / "b.json"
    dst_a = write_json(tmp_path / "dst_a.json", {"type": "parquet", "path": str(tmp_path / "a")})
    dst_b = write_json(tmp_path / "dst_b.json", {"type": "parquet", "path": str(tmp_path / "b")})
    first = run_olake("sync", "--source", src, "--destination", dst_a, "--catalog", cat, "--state", str(state_a))
    assert first.returncode == 0, first.stderr.decode()[-3000:]
    _run(dsn, "UPDATE acct SET note = 'changed' WHERE id <= 5", "DELETE FROM acct WHERE id = 6")

    # misspelt names: the real error first and alone, nothing marked
    for field, typo, error in (("publication", pub + "x", f"publication '{pub}x' does not exist"),
                               ("replication_slot", slot + "x", f"replication slot '{slot}x' does not exist")):
        bad = write_json(tmp_path / "typo.json", {**config, field: typo})
        _refused_sync(bad, cat, dst_a, state_a, error)
        if field == "publication":  # read | write takes the same preflight
            _assert_piped_refused(bad, cat, dst_a, state_a, error)

    # a second pipeline: the same source into another destination, with A's state file or its own
    refused = f"replication slot '{slot}' is used by another pipeline: olake sync into the destination of {dst_a}"
    line = _refused_sync(src, cat, dst_b, state_a, refused)
    assert "olake state drop-slot --config" in line and "slot of its own" in line, line
    _refused_sync(src, cat, dst_b, state_b, refused)
    _assert_piped_refused(src, cat, dst_b, state_b, refused)
    assert not state_b.exists() and not (tmp_path / "b" / "public").exists()
    assert f"replication slot '{slot}' is now claimed by this pipeline (olake sync into the destination of " \
           f"{dst_a}" in first.stderr.decode(), first.stderr.decode()[-3000:]
    assert f"replication slot '{slot}' retains " in first.stderr.decode()

    # the first pipeline goes on by read | write (the same pipeline: its state file), warned past the threshold
    warn = write_json(tmp_path / "warn.json", {**config, "slot_wal_warn_bytes": 1})
    result = sync_once(warn, tmp_path / "cat.json", dst_a, state_a)
    stderr = result.read_stderr.decode()
    assert "full load" not in stderr and "position lost" not in stderr and "1 deleted" in stderr, stderr[-3000:]
    assert f"warning: replication slot '{slot}' retains " in stderr and "more than slot_wal_warn_bytes (1 bytes)" \
        in stderr, stderr[-3000:]
    _assert_equals_source(dsn, catalog, tmp_path / "a")
    check = run_olake("check", "--config", warn)
    [status] = [m["connectionStatus"] for m in messages(check.stdout)]
    assert status["status"] == "SUCCEEDED" and f"replication slot '{slot}' retains " in status["message"], status
    assert "warning: replication slot" in status["message"] and f"is used by: olake sync into the destination of " \
        f"{dst_a} with state file {state_a}" in status["message"], status

    forgot = run_olake("state", "drop-slot", "--config", src, "--claim-only")
    assert forgot.returncode == 0 and f"forgot the claim on replication slot '{slot}'" in forgot.stderr.decode()
    assert _one(dsn, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", slot)[0] == 1

    # drop-slot: refused while the slot is in use, then slot, publication and claim go; B may run
    with _slot_in_use(pg_cluster, pg_db, slot, pub):
        busy = run_olake("state", "drop-slot", "--config", src)
        assert busy.returncode != 0 and "is in use" in busy.stderr.decode(), busy.stderr.decode()
    assert trace_errors(busy.stdout)[0]["trace"]["error"]["failure_type"] == "config_error"
    dropped = run_olake("state", "drop-slot", "--config", src)
    said = dropped.stderr.decode()
    assert dropped.returncode == 0 and dropped.stdout == b"", said
    assert f"dropped replication slot '{slot}'" in said and f"dropped publication '{pub}'" in said, said
    assert _one(dsn, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", slot)[0] == 0
    assert _one(dsn, "SELECT count(*) FROM pg_publication WHERE pubname = %s", pub)[0] == 0
    assert _one(dsn, "SELECT count(*) FROM _olake.slot_claims")[0] == 0
    create = write_json(tmp_path / "create.json", {**config, "create_slot_and_publication": True})
    second = run_olake("sync", "--source", create, "--destination", dst_b, "--catalog", cat, "--state", str(state_b))
    assert second.returncode == 0, second.stderr.decode()[-3000:]
    _assert_equals_source(dsn, catalog, tmp_path / "b")
    assert json.loads(state_b.read_text())["streams"][0]["sync_type"] == "cdc"
    _run(dsn, f"SELECT pg_drop_replication_slot('{slot}')")


class _slot_in_use:
    """``pg_recvlogical`` streaming from the slot (so it is active) for the life of the ``with``."""

    def __init__(self, cluster, db: str, slot: str, pub: str) -> None:
        self.args = [os.path.join(cluster.bin_dir, "pg_recvlogical"), "-d", cluster.dsn(db), "-S", slot, "--start",
                     "-f", os.devnull, "--no-loop", "-o", "proto_version=1", "-o", f"publication_names={pub}"]
        self.dsn, self.slot = cluster.dsn(db), slot

    def __enter__(self) -> None:
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for _ in range(200):
            if _one(self.dsn, "SELECT active FROM pg_replication_slots WHERE slot_name = %s", self.slot)[0]:
                return
            assert self.proc.poll() is None, self.proc.stderr.read().decode()
            time.sleep(0.05)
        raise AssertionError("pg_recvlogical did not take the slot")

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        for _ in range(200):  # the server releases the slot once the walsender has gone
            if not _one(self.dsn, "SELECT active FROM pg_replication_slots WHERE slot_name = %s", self.slot)[0]:
                return
            time.sleep(0.05)


def test_a_pipeline_is_the_same_when_every_part_both_runs_know_is_equal():
    """How a run is matched with a slot's claim: ``sync`` knows the destination and the state file,
    ``read --state`` the state file, ``read --state-from`` the destination, bare ``read`` nothing."""
    from olake_cli.core.pipeline_identity import PipelineIdentity

    claim = PipelineIdentity("/lake/.olake.lock", "/s.json")
    assert PipelineIdentity(None, "/s.json").same_pipeline(claim)  # read --state s.json | write
    assert PipelineIdentity("/lake/.olake.lock", None).same_pipeline(claim)  # read --state-from, or sync without state
    assert not PipelineIdentity("/other/.olake.lock", "/s.json").same_pipeline(claim)  # the Quickstarts' shared state
    assert not PipelineIdentity(None, "/t.json").same_pipeline(claim)
    assert not PipelineIdentity().same_pipeline(claim) and not PipelineIdentity().known
    assert PipelineIdentity(None, "/s.json").filled_from(claim) == claim


def test_a_run_that_shares_no_part_with_the_claim_neither_matches_nor_contradicts_it():
    """``read --state s.json | write`` claims with the state file alone; ``read --state-from DEST`` later
    (a lost state file recovered) knows the destination alone: not refused, and the claim learns it."""
    from olake_cli.core.pipeline_identity import PipelineIdentity

    claim = PipelineIdentity(None, "/s.json")
    recovery = PipelineIdentity("/lake/.olake.lock", None)
    assert not recovery.contradicts(claim) and not recovery.same_pipeline(claim)
    assert recovery.filled_from(claim) == PipelineIdentity("/lake/.olake.lock", "/s.json")
    assert PipelineIdentity(None, "/t.json").contradicts(claim)
    assert PipelineIdentity("/other/.olake.lock", "/s.json").contradicts(recovery.filled_from(claim))


def test_a_claim_whose_slot_was_dropped_does_not_block_a_new_pipeline(pg_cluster, pg_db, tmp_path):
    """Pipeline A claims the slot; the slot and its publication are dropped with SQL; pipeline B (another
    destination and state file, creating its slot) runs, saying in one line that A's claim is gone, and
    A is then the other pipeline."""
    dsn, slot, pub = pg_cluster.dsn(pg_db), f"slot_{pg_db}", f"pub_{pg_db}"
    make_accounts(dsn, "acct", 50)
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot=slot, publication=pub, create_slot_and_publication=True))
    catalog = discover_catalog(src, tmp_path / "cat.json", {"acct": "cdc"}, only={"acct"})
    cat, state_a, state_b = str(tmp_path / "cat.json"), tmp_path / "a.json", tmp_path / "b.json"
    dst_a = write_json(tmp_path / "dst_a.json", {"type": "parquet", "path": str(tmp_path / "a")})
    dst_b = write_json(tmp_path / "dst_b.json", {"type": "parquet", "path": str(tmp_path / "b")})
    first = run_olake("sync", "--source", src, "--destination", dst_a, "--catalog", cat, "--state", str(state_a))
    assert first.returncode == 0, first.stderr.decode()[-3000:]
    _run(dsn, f"SELECT pg_drop_replication_slot('{slot}')", f"DROP PUBLICATION {pub}")

    second = run_olake("sync", "--source", src, "--destination", dst_b, "--catalog", cat, "--state", str(state_b))
    said = second.stderr.decode()
    assert second.returncode == 0, said[-3000:]
    [line] = [x for x in said.splitlines() if "no longer exists" in x]
    assert f"replication slot '{slot}' no longer exists" in line and f"olake sync into the destination of {dst_a}" \
        in line and "claim" in line, line
    assert f"replication slot '{slot}' is now claimed by this pipeline (olake sync into the destination of " \
           f"{dst_b}" in said, said
    _assert_equals_source(dsn, catalog, tmp_path / "b")
    assert _one(dsn, "SELECT destination FROM _olake.slot_claims WHERE slot_name = %s", slot)[0].startswith(
        str(tmp_path / "b"))
    _refused_sync(src, cat, dst_a, state_a, f"replication slot '{slot}' is used by another pipeline: olake sync "
                                            f"into the destination of {dst_b}")
    _run(dsn, f"SELECT pg_drop_replication_slot('{slot}')")
