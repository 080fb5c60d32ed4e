"""SIGINT (Ctrl-C at a terminal reaches the whole process group) and SIGTERM stop a run within seconds
with one line, status 128 + signal, a state that resumes, and a destination equal to the source after
the rerun."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import threading
import time

import psycopg
import pytest

from tests.support.cli import (olake_cmd, olake_env, read_into_write, run_olake, start_read_into_write,
                               write_json)
from tests.support.matrix import cases
from tests.support.verify import assert_table_matches, read_parquet

ROWS = 200_000  # 20 chunks of CHUNK rows, read one at a time: the signal comes after two
CHUNK = 10_000


def _succeeded_chunks(state_path) -> int:
    try:
        streams = json.loads(state_path.read_text())["streams"]
    except (OSError, ValueError):
        return 0
    return sum(c["status"] == "succeed" for s in streams for c in s["stream_state"].get("chunks") or [])


@pytest.mark.parametrize("signum", cases([signal.SIGINT, signal.SIGTERM], [signal.SIGTERM]))  # SIGINT: the
# read | write test below; every signal with OLAKE_TEST_ALL_PATHS=1
def test_signal_stops_sync_cleanly_and_the_rerun_completes(pg_cluster, pg_db, tmp_path, signum):
    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, note text)")
        conn.execute(f"INSERT INTO t SELECT g, 'row ' || g FROM generate_series(1, {ROWS}) g")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(pg_db, chunk_strategy="primary_key",
                                                                      chunk_rows=CHUNK))
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "lake")})
    disc = run_olake("discover", "--config", src)
    assert disc.returncode == 0, disc.stderr
    (tmp_path / "cat.json").write_bytes(disc.stdout)
    state = tmp_path / "st.json"
    args = ["sync", "--source", src, "--destination", dst, "--catalog", str(tmp_path / "cat.json"),
            "--state", str(state), "--max-parallel", "1"]
    run = subprocess.Popen(olake_cmd(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=olake_env(),
                           start_new_session=True)
    deadline = time.monotonic() + 240
    while _succeeded_chunks(state) < 2 and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert run.poll() is None, "the sync finished before it could be interrupted"
    sent = time.monotonic()
    if signum == signal.SIGINT:
        os.killpg(run.pid, signum)  # what Ctrl-C does: every process of the terminal's group gets it
    else:
        run.send_signal(signum)
    _, stderr = run.communicate(timeout=120)
    assert time.monotonic() - sent < 30, "the run took too long to stop"
    assert run.returncode == 128 + signum, stderr.decode()[-2000:]
    text = stderr.decode()
    assert "Traceback" not in text and "ERROR" not in text, text[-3000:]
    assert text.strip().splitlines()[-1].startswith(f"olake: interrupted by {signal.Signals(signum).name}")
    done = _succeeded_chunks(state)
    assert 2 <= done < ROWS // CHUNK, "the signal stopped the load part way; the state names what was committed"

    rerun = run_olake(*args)
    assert rerun.returncode == 0, rerun.stderr.decode()[-2000:]
    stream = next(s for s in json.loads(disc.stdout)["catalog"]["streams"] if s["name"] == "t")
    with psycopg.connect(dsn) as conn:
        assert_table_matches(conn, "public", "t", stream["json_schema"], read_parquet(str(tmp_path / "lake" / "public" / "t")))


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_a_following_runs_load_is_a_clean_stop(pg_cluster, pg_db, tmp_path, signum):
    """``sync --follow`` stopped by SIGTERM (a service manager) or SIGINT while it loads, before its change
    phase: one line, status 0 (130 for SIGINT), the committed chunks kept; the same command resumes the load
    from them, follows, and the lake then equals the source value by value."""
    from tests.support.follow import lake_equals_source, start_olake, stop, wait_until

    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v bigint NOT NULL, note text)")
        conn.execute(f"INSERT INTO t SELECT g, 0, 'row ' || g FROM generate_series(1, {ROWS}) g")
    slot = f"stopload_{signum}_{pg_db}"
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, chunk_strategy="primary_key", chunk_rows=CHUNK, replication_slot=slot, publication=f"{slot}_pub",
        create_slot_and_publication=True))
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "lake")})
    disc = run_olake("discover", "--config", src)
    catalog = json.loads(disc.stdout)
    for entry in catalog["catalog"]["streams"]:
        entry["sync_mode"] = "cdc"
    (tmp_path / "cat.json").write_text(json.dumps(catalog))
    state, log = tmp_path / "st.json", tmp_path / "run.log"
    args = ["sync", "--source", src, "--destination", dst, "--catalog", str(tmp_path / "cat.json"),
            "--state", str(state), "--max-parallel", "1", "--follow", "--commit-interval", "0.5"]
    run = start_olake(args, log, stdout=subprocess.DEVNULL)
    wait_until(lambda: _succeeded_chunks(state) >= 2, "two chunks are committed", timeout=240, run=run)
    took = stop(run, signum)
    text = log.read_text()
    assert run.returncode == (130 if signum == signal.SIGINT else 0) and took < 10, text[-3000:]
    assert f"stopped by {signal.Signals(signum).name}" in text.strip().splitlines()[-1], text[-3000:]
    assert "Traceback" not in text and "following the change log" not in text, text[-3000:]
    assert 2 <= _succeeded_chunks(state) < ROWS // CHUNK, "the signal stopped the load part way"

    run = start_olake(args, log, stdout=subprocess.DEVNULL)
    wait_until(lambda: "following the change log" in log.read_text(), "the resumed load ends", timeout=240, run=run)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE t SET v = v + 1, note = 'changed' WHERE id % 1000 = 0")
    wait_until(lambda: lake_equals_source(tmp_path / "lake" / "public" / "t", dsn), "the lake equals the source",
               run=run)
    stop(run)
    assert run.returncode == 0 and "resuming full load" in log.read_text(), log.read_text()[-3000:]


def _catches_sigterm(pid: int) -> bool:
    """Whether process ``pid`` has a handler for SIGTERM (its SigCgt mask in /proc)."""
    with open(f"/proc/{pid}/status") as status:
        caught = next(line for line in status if line.startswith("SigCgt:")).split()[1]
    return bool(int(caught, 16) & (1 << (signal.SIGTERM - 1)))


def test_a_signal_while_a_following_run_starts_up_is_a_clean_stop(tmp_path):
    """SIGTERM (a service manager stopping it at once) while ``sync --follow`` still imports its modules,
    before any option is parsed: one line and status 0, as at any later moment of a following run."""
    run = subprocess.Popen(olake_cmd("sync", "--source", str(tmp_path / "src.json"), "--destination",
                                     str(tmp_path / "dst.json"), "--catalog", str(tmp_path / "cat.json"), "--follow"),
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=olake_env())
    deadline = time.monotonic() + 30
    while not _catches_sigterm(run.pid) and time.monotonic() < deadline:  # olake's handler is set (the CLI's
        time.sleep(0.005)                                                   # imports take a second more)
    run.send_signal(signal.SIGTERM)
    _, stderr = run.communicate(timeout=30)
    text = stderr.decode()
    assert run.returncode == 0, text
    assert text.strip().splitlines()[-1].startswith("olake: stopped by SIGTERM"), text


# ------------------------------------------------------------------ read | write

PIPE_ROWS = 100_000
PIPE_CHUNK = 5_000
BOTH_GONE_S = 2.0  # read and write themselves: the promise (measured 0.03 s on a loaded 2-core machine)
BOUND_S = 5.0  # every process they started (Spark's JVM and workers; measured 0.5 s), and a slot read


class _Drain:
    """Reads a process's pipe in a thread (a full pipe would stall the pipeline), line by line."""

    def __init__(self, pipe) -> None:
        self.lines: list[bytes] = []
        self.thread = threading.Thread(target=lambda: self.lines.extend(pipe), daemon=True)
        self.thread.start()

    def text(self) -> str:
        self.thread.join(timeout=30)
        return b"".join(self.lines).decode()


def _family(pid: int) -> set[int]:
    """``pid`` and every process below it (the reader's Spark JVM, its Python daemon and workers)."""
    found, todo = {pid}, [pid]
    while todo:
        for task in glob.glob(f"/proc/{todo.pop()}/task/*/children"):
            try:
                children = {int(c) for c in open(task).read().split()}
            except OSError:
                continue
            todo += children - found
            found |= children
    return found


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def _committed_chunks(drain: _Drain) -> int:
    """Chunks of the load marked succeeded in the STATEs write has echoed so far."""
    for line in reversed(drain.lines):
        message = json.loads(line)
        chunks = message["state"]["streams"][0]["stream_state"].get("chunks") if "state" in message else None
        if chunks:
            return sum(c["status"] == "succeed" for c in chunks)
    return 0


@pytest.fixture()
def pipe_load(pg_cluster, pg_db, tmp_path):
    """A table whose full load takes 20 chunks, its catalog, and the args of ``read`` and ``write``."""
    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, note text)")
        conn.execute(f"INSERT INTO t SELECT g, 'row ' || g FROM generate_series(1, {PIPE_ROWS}) g")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(pg_db, chunk_strategy="primary_key",
                                                                      chunk_rows=PIPE_CHUNK))
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "lake")})
    disc = run_olake("discover", "--config", src)
    assert disc.returncode == 0, disc.stderr
    (tmp_path / "cat.json").write_bytes(disc.stdout)
    state = str(tmp_path / "st.json")
    read_args = ["--config", src, "--catalog", str(tmp_path / "cat.json"), "--state", state, "--max-parallel", "1"]
    return dsn, disc.stdout, read_args, ["--config", dst, "--state", state]


def _interrupt_mid_load(read_args, write_args, signum, whole_group: bool):
    """Start ``read | write``, signal it once 2 chunks are committed; (codes, stderrs, seconds until
    read and write are gone, seconds until every process they started is gone too)."""
    reader, writer = start_read_into_write(read_args, write_args)
    read_err, write_out, write_err = _Drain(reader.stderr), _Drain(writer.stdout), _Drain(writer.stderr)
    deadline = time.monotonic() + 240
    while _committed_chunks(write_out) < 2 and writer.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    family = _family(reader.pid) | _family(writer.pid)
    assert reader.poll() is None and writer.poll() is None, "the load finished before it could be interrupted"
    sent = time.monotonic()
    if whole_group:
        os.killpg(reader.pid, signum)  # Ctrl-C: every process of the terminal's job gets it
    else:
        reader.send_signal(signum)
    gone = {}
    while len(gone) < len(family) and time.monotonic() - sent < 60:
        reader.poll(), writer.poll()  # reap them
        gone.update({pid: time.monotonic() - sent for pid in family - gone.keys() if not _running(pid)})
        time.sleep(0.01)
    both = max(gone.get(reader.pid, 60.0), gone.get(writer.pid, 60.0))
    codes = reader.wait(), writer.wait()
    return codes, (read_err.text(), write_err.text()), write_out, both, max(gone.values(), default=60.0)


def test_ctrl_c_ends_read_and_write_at_once_and_the_rerun_completes(pipe_load, capsys):
    dsn, catalog, read_args, write_args = pipe_load
    codes, stderrs, write_out, both_s, all_s = _interrupt_mid_load(read_args, write_args, signal.SIGINT, True)
    with capsys.disabled():
        print(f"\nCtrl-C on read | write: both gone {both_s:.2f}s after SIGINT, with Spark's JVM "
              f"and workers {all_s:.2f}s")
    assert codes == (130, 130), stderrs
    for text in stderrs:  # one line each, the last; no traceback, no library's error
        assert text.strip().splitlines()[-1].startswith("olake: interrupted by SIGINT; "), text[-2000:]
        assert text.count("interrupted by") == 1 and "error" not in text.lower(), text[-2000:]
        assert "Traceback" not in text and "Exception" not in text, text[-3000:]
    assert both_s < BOTH_GONE_S and all_s < BOUND_S, f"read and write took {both_s:.2f}s, every process {all_s:.2f}s"
    state = json.loads(open(write_args[-1]).read())
    done = sum(c["status"] == "succeed" for c in state["streams"][0]["stream_state"]["chunks"])
    assert done == _committed_chunks(write_out) and 2 <= done < PIPE_ROWS // PIPE_CHUNK, done

    rerun = read_into_write(read_args, write_args)
    assert (rerun.read_code, rerun.write_code) == (0, 0), rerun.write_stderr.decode()[-2000:]
    stream = next(s for s in json.loads(catalog)["catalog"]["streams"] if s["name"] == "t")
    lake = os.path.join(json.loads(open(write_args[1]).read())["path"], "public", "t")
    with psycopg.connect(dsn) as conn:
        assert_table_matches(conn, "public", "t", stream["json_schema"], read_parquet(lake))


def test_a_reader_stopped_alone_says_so_once_and_the_writer_points_to_it(pipe_load):
    _, _, read_args, write_args = pipe_load
    codes, (read_text, write_text), write_out, both_s, _ = _interrupt_mid_load(read_args, write_args,
                                                                                 signal.SIGTERM, False)
    assert codes == (143, 75), (read_text[-2000:], write_text[-2000:])  # write: the reader's transient failure
    assert both_s < BOTH_GONE_S, f"read and write took {both_s:.2f}s"
    read_lines = [line for line in read_text.splitlines() if "interrupted" in line or "error" in line]
    assert read_lines == [read_lines[0]] and read_lines[0].startswith("olake: interrupted by SIGTERM; "), read_text
    errors = [line for line in write_text.splitlines() if "error" in line or "interrupted" in line]
    assert errors == ["olake: error: the reading side failed (the reader's own error line says why); "
                      "what its STATE messages covered is committed"], write_text
    traces = [json.loads(line) for line in write_out.lines if b'"TRACE"' in line]
    assert [t["trace"]["error"]["internal_message"] for t in traces] == [
        "the reader's error: " + read_lines[0][len("olake: "):]]
    state = json.loads(open(write_args[-1]).read())
    assert sum(c["status"] == "succeed" for c in state["streams"][0]["stream_state"]["chunks"]) >= 2


# ------------------------------------------------------------------ write: a commit in progress

COMMIT_CATALOG = {"type": "CATALOG", "catalog": {"streams": [{
    "name": "t", "namespace": "public", "supported_sync_modes": ["full_refresh"], "source_defined_primary_key": [["id"]],
    "json_schema": {"type": "object", "properties": {"id": {"type": "integer", "x-olake-type": "int32"}}}}]}}


def _load_lines(chunks: int) -> list[dict]:
    """What ``read`` sends for a full load of ``chunks`` chunks of 10 rows: a STATE opening the load,
    then each chunk's records and a STATE marking it done."""
    statuses = ["pending"] * chunks

    def state() -> dict:
        return {"type": "STATE", "state": {"level": "stream", "version": "v1", "streams": [{
            "sync_type": "full-load", "stream_name": "t", "stream_namespace": "public", "stream_state": {
                "cursor_field": None, "load_id": "L1",
                "chunks": [{"status": s, "min": str(i), "max": str(i + 1)} for i, s in enumerate(statuses)]}}]}}

    lines: list[dict] = [COMMIT_CATALOG, state()]
    for index in range(chunks):
        lines += [{"type": "RECORD", "record": {"stream": "t", "namespace": "public", "emitted_at": 0,
                                                "data": {"id": index * 10 + i}}} for i in range(10)]
        statuses[index] = "succeed"
        lines.append(state())
    return lines


@pytest.mark.parametrize("destination, step", [("parquet", "state-saved"), ("iceberg", "iceberg-committed")])
def test_an_interrupt_during_a_commit_lets_it_finish_and_be_acknowledged(tmp_path, destination, step):
    from tests.support.current_view import iceberg_rows

    lake = tmp_path / "lake"
    dst = write_json(tmp_path / "dst.json", {"type": destination, "path": str(lake)})
    state_file = tmp_path / "st.json"
    env = {**olake_env(), "OLAKE_TEST_CRASH_AT": step, "OLAKE_TEST_CRASH_AFTER": "2", "OLAKE_TEST_CRASH_SIGNAL": "INT"}
    # SIGINT arrives inside the third commit (the second chunk's): after its step, before it is acknowledged
    stdin = b"".join(json.dumps(line).encode() + b"\n" for line in _load_lines(4))
    result = subprocess.run(olake_cmd("write", "--config", dst, "--state", str(state_file)), input=stdin,
                            capture_output=True, env=env, timeout=120)
    stderr = result.stderr.decode()
    assert result.returncode == 130, stderr
    assert [line for line in stderr.splitlines() if "interrupted" in line or "error" in line] == [
        stderr.strip().splitlines()[-1]] and "interrupted by SIGINT; " in stderr, stderr
    echoed = [json.loads(line)["state"]["streams"][0]["stream_state"]["chunks"] for line in result.stdout.splitlines()
              if b'"STATE"' in line]
    assert [c["status"] for c in echoed[-1]] == ["succeed", "succeed", "pending", "pending"], \
        "the commit under way when SIGINT came finished and was acknowledged; none began after it"
    assert json.loads(state_file.read_text())["streams"][0]["stream_state"]["chunks"] == echoed[-1]
    if destination == "parquet":
        visible = read_parquet(str(lake / "public" / "t")).column("id").to_pylist()
    else:
        visible = iceberg_rows(lake, "public", "t").column("id").to_pylist()
    assert sorted(visible) == list(range(20)), "exactly the rows of the acknowledged STATEs are live"


# ------------------------------------------------------------------ read: a slot read in progress

ACTIVE_HOLDER = "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s AND active"


def test_an_interrupt_during_a_slot_read_drops_the_walsender_at_once(pg_cluster, pg_db):
    """The server decodes a 1M-row transaction before it sends its first row (seconds): Ctrl-C meanwhile
    ends the replication session at once (its connection dropped, not drained), and the slot is free
    again when the interrupt surfaces."""
    from olake_cli.core.interrupts import Interrupted, catch_signals
    from olake_cli.sources.postgres.change_feed import current_wal_lsn, read_changes

    dsn, slot = pg_cluster.dsn(pg_db), f"slot_{pg_db}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE c (id int PRIMARY KEY, note text)")
        conn.execute("CREATE PUBLICATION p FOR TABLE c")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        conn.execute("INSERT INTO c SELECT g, 'x' FROM generate_series(1, 1000000) g")  # seconds to decode
        upto = current_wal_lsn(conn)
    sent: list[float] = []
    holders: list[tuple] = []

    def interrupt_once_the_walsender_runs() -> None:
        with psycopg.connect(dsn, autocommit=True) as watcher:
            while not holders:
                holders.extend(watcher.execute(ACTIVE_HOLDER, (slot,)).fetchall())
                time.sleep(0.02)
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    catch_signals()
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            threading.Thread(target=interrupt_once_the_walsender_runs, daemon=True).start()
            with pytest.raises(Interrupted):
                for _ in read_changes(conn, slot, "p", upto):
                    pass
            stopped_s = time.monotonic() - sent[0]
            free = conn.execute(ACTIVE_HOLDER, (slot,)).fetchall() == []
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    finally:
        signal.signal(signal.SIGINT, handlers[0])
        signal.signal(signal.SIGTERM, handlers[1])
    assert free and stopped_s < BOUND_S, f"the slot read took {stopped_s:.2f}s to stop"


# ------------------------------------------------------------------ read: an incremental pass in progress

def test_ctrl_c_during_an_incremental_pass_is_an_interrupt_not_a_failed_scan(pg_cluster, pg_db, tmp_path):
    """A pass runs on the driver, no Spark: its driver (ADBC) takes SIGINT over while it blocks and only
    cancels its query; the run must still end as interrupted, not as a failed scan."""
    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE i (id int PRIMARY KEY, note text)")
        conn.execute("INSERT INTO i SELECT g, repeat('x', 50) FROM generate_series(1, 1000000) g")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(pg_db))
    disc = run_olake("discover", "--config", src)
    assert disc.returncode == 0, disc.stderr
    catalog = json.loads(disc.stdout)
    for stream in catalog["catalog"]["streams"]:
        stream.update(sync_mode="incremental", cursor_field=["id"])
    cat = write_json(tmp_path / "cat.json", catalog)
    state = write_json(tmp_path / "st.json", {"level": "global", "version": "v1", "streams": [{
        "sync_type": "incremental", "stream_name": "i", "stream_namespace": "public",
        "stream_state": {"cursor_field": "10", "sync_mode": "incremental", "columns": ["id", "note"],
                         "cursor_column": "id"}}]})
    reader = subprocess.Popen(olake_cmd("read", "--config", src, "--catalog", cat, "--state", state),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=olake_env())
    with psycopg.connect(dsn, autocommit=True) as watcher:
        while reader.poll() is None and not watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND datname = current_database() "
                "AND query LIKE 'COPY %%public%%i%%' AND pid <> pg_backend_pid()").fetchone()[0]:
            time.sleep(0.02)
    assert reader.poll() is None, "the pass ended before it could be interrupted"
    reader.send_signal(signal.SIGINT)
    stdout, stderr = reader.communicate(timeout=60)
    text = stderr.decode()
    assert reader.returncode == 130, text
    assert [line for line in text.splitlines() if "interrupted" in line or "error" in line or "failed" in line] == [
        text.strip().splitlines()[-1]] and "olake: interrupted by SIGINT; " in text, text
