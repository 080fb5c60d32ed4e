"""SIGKILL ``olake read`` inside a huge source transaction during change capture, then resume.

Run 1 copies the table and starts change capture. Then ~32k changes are committed in small
transactions around one transaction of 22k changes. Run 2 checkpoints every 1000 changes between
transactions (every 5000 inside one, via OLAKE_CDC_CHECKPOINT_EVERY) and is SIGKILLed once write
has echoed the second checkpoint inside the big transaction. The state file is then rewound to the
first checkpoint inside it, which is exactly what a crash between the destination commit and the
state write leaves behind: rows up to the later position are durable, the state says the earlier
one. Run 3 resumes: nothing may be lost, and only operations after the state's position may appear
twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections import Counter

import psycopg

from olake_cli.core.opid import OpId
from olake_cli.sources.postgres.lsn import parse_lsn
from tests.support.cdc import discover_catalog, make_accounts, sync_once
from tests.support.cli import olake_cmd, olake_env, write_json
from tests.support.verify import assert_table_matches, latest_versions, read_parquet

SLOT = "slot_cdc_resume"
ROWS = 3_000
CHECKPOINT_EVERY = 1_000  # inside one transaction: every 5 * 1000 changes


def _apply(conn: psycopg.Connection, statement: str, *params) -> int:
    return conn.execute(statement, params).rowcount


def apply_changes(dsn: str) -> int:
    """Commit 8 transactions of 1000 changes, one of 22000, then 5 of 400; returns the change count."""
    changes = 0
    with psycopg.connect(dsn, autocommit=False) as conn:
        next_id = 100_000
        for i in range(8):
            changes += _apply(conn, "INSERT INTO acct SELECT g, g / 7.0, 'small ' || g FROM generate_series(%s, %s) g",
                              next_id, next_id + 399)
            changes += _apply(conn, "UPDATE acct SET balance = balance + 1, note = note || '+' "
                                    "WHERE id BETWEEN %s AND %s", 1 + i * 300, 400 + i * 300)
            changes += _apply(conn, "DELETE FROM acct WHERE id BETWEEN %s AND %s", next_id, next_id + 199)
            conn.commit()
            next_id += 400
        # the big one: inserts, updates of rows inserted in the same transaction, deletes
        changes += _apply(conn, "INSERT INTO acct SELECT g, g / 3.0, 'big ' || g FROM generate_series(200001, 210000) g")
        changes += _apply(conn, "UPDATE acct SET note = note || ' updated', balance = balance * 2 "
                                "WHERE id BETWEEN 200001 AND 210000")
        changes += _apply(conn, "DELETE FROM acct WHERE id BETWEEN 205001 AND 206000 OR id BETWEEN 1001 AND 2000")
        conn.commit()
        for i in range(5):
            changes += _apply(conn, "UPDATE acct SET balance = -balance WHERE id BETWEEN %s AND %s",
                              2001 + i * 200, 2200 + i * 200)
            changes += _apply(conn, "INSERT INTO acct SELECT g, 0, 'tail ' || g FROM generate_series(%s, %s) g",
                              300_000 + i * 200, 300_199 + i * 200)
            conn.commit()
    return changes


def _position(stream_state: dict) -> OpId:
    return OpId(parse_lsn(stream_state["cursor_field"]), int(stream_state.get("op_seq", 0)))


def _acct_entry(state: dict) -> dict:
    return next(s for s in state["streams"] if s["stream_name"] == "acct")


def _kill_inside_big_transaction(src: str, catalog: str, dst: str, state) -> list[dict]:
    """Run read | write; SIGKILL read once write echoed the 2nd checkpoint inside a transaction.

    Returns the echoed stream states that lie inside a transaction (op_seq > 0), in order.
    """
    env = {**olake_env(), "OLAKE_CDC_CHECKPOINT_EVERY": str(CHECKPOINT_EVERY)}
    reader = subprocess.Popen(olake_cmd("read", "--config", src, "--catalog", catalog, "--state", str(state)),
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    writer = subprocess.Popen(olake_cmd("write", "--config", dst, "--state", str(state)), stdin=reader.stdout,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    reader.stdout.close()
    inside: list[dict] = []
    try:
        for line in writer.stdout:
            stream_state = json.loads(line)["state"]["streams"][0]["stream_state"]
            if stream_state.get("op_seq", 0) > 0:
                inside.append(stream_state)
                if len(inside) == 2:
                    break
        assert reader.poll() is None, "read finished before it could be killed"
        os.kill(reader.pid, signal.SIGKILL)
    finally:
        reader.wait()
        writer.communicate(timeout=60)
    return inside


def test_sigkill_inside_a_transaction_then_resume(pg_cluster, pg_db, tmp_path):
    dsn = pg_cluster.dsn(pg_db)
    make_accounts(dsn, "acct", ROWS)
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot=SLOT, publication=f"{SLOT}_pub", create_slot_and_publication=True, max_parallel=1))
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "out")})
    catalog = discover_catalog(src, tmp_path / "cat.json", {"acct": "cdc"}, only={"acct"})
    state = tmp_path / "st.json"
    sync_once(src, tmp_path / "cat.json", dst, state)  # run 1: full load, change capture starts
    total_changes = apply_changes(dsn)
    assert total_changes == 8 * 1000 + 22_000 + 5 * 400

    inside = _kill_inside_big_transaction(src, str(tmp_path / "cat.json"), dst, state)
    assert len(inside) == 2, f"expected two checkpoints inside the big transaction, saw {inside}"
    earlier, at_kill = _position(inside[0]), _position(inside[1])
    assert earlier.commit == at_kill.commit and (earlier.seq, at_kill.seq) == (5000, 10000)
    saved = json.loads(state.read_text())
    assert _position(_acct_entry(saved)["stream_state"]) == at_kill

    # A crash between the destination commit and the state write: rows up to at_kill are durable,
    # the state still says ``earlier``.
    _acct_entry(saved)["stream_state"].update(cursor_field=inside[0]["cursor_field"], op_seq=earlier.seq)
    state.write_text(json.dumps(saved))
    data = read_parquet(str(tmp_path / "out" / "public" / "acct"))
    durable = {k for k, op in zip(data.column("_olake_op_id").to_pylist(), data.column("_olake_op").to_pylist())
               if op != "r"}
    assert max(durable) >= at_kill.to_key(), "rows up to the killed run's last checkpoint must be durable"

    result = sync_once(src, tmp_path / "cat.json", dst, state)  # run 3: resume
    assert b"change capture:" in result.read_stderr
    with psycopg.connect(dsn, autocommit=True) as conn:
        confirmed = conn.execute("SELECT (confirmed_flush_lsn - '0/0'::pg_lsn)::text FROM pg_replication_slots "
                                 "WHERE slot_name = %s", (SLOT,)).fetchone()[0]
    assert int(confirmed) == earlier.commit, "the slot is confirmed up to the committed position only"

    data = read_parquet(str(tmp_path / "out" / "public" / "acct"))
    op_ids = Counter(k for k, op in zip(data.column("_olake_op_id").to_pylist(), data.column("_olake_op").to_pylist())
                     if op != "r")  # full-load rows carry their snapshot's position
    assert len(op_ids) == total_changes, "every change must reach the destination"
    low, mid = earlier.to_key(), at_kill.to_key()
    twice_at_or_below = sorted(k for k, n in op_ids.items() if k <= low and n != 1)
    assert not twice_at_or_below, f"operations at or below the committed position were replayed: {twice_at_or_below[:5]}"
    replayed = {k for k, n in op_ids.items() if n > 1}
    window = {k for k in op_ids if low < k <= mid}
    assert len(window) == 5000 and replayed >= window, "operations after the committed position are replayed"
    assert max(op_ids.values()) == 2
    assert data.num_rows - data.column("_olake_op").to_pylist().count("r") == sum(op_ids.values())

    schema = next(s for s in catalog["streams"] if s["name"] == "acct")["json_schema"]
    current = latest_versions(data, ["id"]).select(list(schema["properties"]))
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert_table_matches(conn, "public", "acct", schema, current)
        conn.execute("SELECT pg_drop_replication_slot(%s)", (SLOT,))
    final = _acct_entry(json.loads(state.read_text()))
    assert final["sync_type"] == "cdc" and _position(final["stream_state"]) > at_kill
