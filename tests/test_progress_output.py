"""What operators see: a live progress display on a terminal, one summary line per stream otherwise,
``--log-format json`` objects on stderr, and TRACE ESTIMATE / STREAM_STATUS messages on stdout."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import threading

import psycopg
import pytest

from olake_cli.core.validation import validate_message
from tests.support.cli import messages, olake_cmd, olake_env, run_olake, write_json
from tests.support.verify import assert_table_matches, read_parquet

TABLES = {"t1": 3000, "t2": 2500}  # rows; chunk_rows below gives each table several chunks
ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


@pytest.fixture()
def two_tables(pg_cluster, pg_db, tmp_path):
    """Two small tables, their source config (key chunks of 1000 rows) and their catalog."""
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
        for name, rows in TABLES.items():
            conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, note text, at timestamptz)")
            conn.execute(f"INSERT INTO {name} SELECT g, md5(g::text), '2024-01-01'::timestamptz + g * interval '1 s' "
                         f"FROM generate_series(1, {rows}) g")
        conn.execute("ANALYZE t2")  # t2's estimate comes from statistics, t1's from a count
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(pg_db, chunk_strategy="primary_key",
                                                                       chunk_rows=1000))
    disc = run_olake("discover", "--config", src)
    assert disc.returncode == 0, disc.stderr.decode()
    (tmp_path / "cat.json").write_bytes(disc.stdout)
    return src, str(tmp_path / "cat.json"), messages(disc.stdout)[0]["catalog"]


def _counts(pg_cluster, pg_db) -> dict[str, int]:
    with psycopg.connect(pg_cluster.dsn(pg_db)) as conn:
        return {name: conn.execute(f"SELECT count(*) FROM {name}").fetchone()[0] for name in TABLES}


def _run_on_terminal(args: list[str], env: dict[str, str]) -> tuple[int, bytes, bytes]:
    """Run olake with stderr on a pseudo-terminal; (exit status, stdout, what the terminal showed)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(olake_cmd(*args), stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL,
                            env=env)
    os.close(slave)
    shown: list[bytes] = []

    def drain() -> None:  # the terminal must be read while the display refreshes, or the run blocks
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every writer of the terminal is gone
                return
            if not data:
                return
            shown.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    stdout, _ = proc.communicate(timeout=600)
    reader.join(timeout=60)
    os.close(master)
    return proc.returncode, stdout, b"".join(shown)


def test_sync_on_a_terminal_shows_live_progress_per_stream(pg_cluster, pg_db, two_tables, tmp_path):
    """On an 80-column terminal a long stream name is shown whole; the summary follows the display."""
    src, _, _ = two_tables
    long_name = "orders_of_every_customer_in_every_region_since_2019"
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {long_name} AS SELECT g AS id FROM generate_series(1, 10) g")
        conn.execute(f"ALTER TABLE {long_name} ADD PRIMARY KEY (id)")
    disc = run_olake("discover", "--config", src)
    assert disc.returncode == 0, disc.stderr.decode()
    (tmp_path / "cat3.json").write_bytes(disc.stdout)
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "lake")})
    env = {**olake_env(), "TERM": "xterm-256color", "COLUMNS": "80", "LINES": "40"}
    env.pop("OLAKE_LOG_FORMAT", None)
    code, stdout, shown = _run_on_terminal(["sync", "--source", src, "--destination", dst, "--catalog",
                                            str(tmp_path / "cat3.json")], env)
    screen = ANSI.sub(b"", shown).decode(errors="replace").replace("\r\n", "\n")
    assert code == 0, screen[-3000:]
    assert b"\x1b[" in shown, "a live display redraws with terminal escapes"
    assert "Using incubator modules" not in screen and "Setting default log level" not in screen, screen[:3000]
    assert "\u2026" not in screen, "no name is cut"
    for name in [*TABLES, long_name]:
        done = re.findall(rf"^public\.{name}\s*\n[^\n]*?chunks (\d+)/(\d+)\s+done", screen, re.MULTILINE)
        assert done, screen[-3000:]
        assert done[-1][0] == done[-1][1] and int(done[-1][1]) >= (2 if name in TABLES else 1), done
    summary = [line for line in screen.splitlines() if line.startswith("olake: summary: ")]
    assert [line.split(":")[2].strip() for line in summary] == sorted(f"public.{n}" for n in [*TABLES, long_name])
    assert screen.rstrip().endswith(summary[-1]), "the summary comes last, under the display"
    statuses = [m["trace"] for m in messages(stdout) if m["type"] == "TRACE"]
    completed = {t["stream_status"]["stream_descriptor"]["name"] for t in statuses
                 if t["type"] == "STREAM_STATUS" and t["stream_status"]["status"] == "COMPLETE"}
    assert completed == {*TABLES, long_name}, "sync prints each stream's COMPLETE"


def test_read_traces_and_summary_lines_then_write_copies_every_value(pg_cluster, pg_db, two_tables, tmp_path):
    src, cat, catalog = two_tables
    read = run_olake("read", "--config", src, "--catalog", cat)
    stderr = read.stderr.decode()
    assert read.returncode == 0, stderr[-3000:]
    out = messages(read.stdout)
    for msg in out:
        validate_message(msg, "read stdout")
    counts = _counts(pg_cluster, pg_db)
    estimates = {t["estimate"]["name"]: t["estimate"] for m in out if m["type"] == "TRACE"
                 for t in [m["trace"]] if t["type"] == "ESTIMATE"}
    assert {name: e["row_estimate"] for name, e in estimates.items()} == counts
    assert all(e["namespace"] == "public" and e["type"] == "STREAM" for e in estimates.values())
    for name in TABLES:
        statuses = [m["trace"]["stream_status"]["status"] for m in out if m["type"] == "TRACE"
                    and m["trace"]["type"] == "STREAM_STATUS"
                    and m["trace"]["stream_status"]["stream_descriptor"] == {"name": name, "namespace": "public"}]
        assert statuses == ["STARTED", "RUNNING", "COMPLETE"], (name, statuses)
    summaries = [line for line in stderr.splitlines() if re.search(r"rows in \d+/\d+ chunk\(s\) in ", line)]
    assert len(summaries) == len(TABLES), stderr
    for name in TABLES:
        [line] = [s for s in summaries if s.startswith(f"olake: public.{name}: ")]
        assert _finished_rows(line) == counts[name], line
        chunks = _chunk_lines(stderr, name)
        assert sorted(number for number, _ in chunks) == list(range(1, len(chunks) + 1)) and len(chunks) >= 2
        assert sum(rows for _, rows in chunks) == counts[name]
        [run_summary] = [s for s in stderr.splitlines() if s.startswith(f"olake: summary: public.{name}: ")]
        assert re.fullmatch(rf"olake: summary: public\.{name}: {counts[name]} rows loaded \({len(chunks)}/"
                            rf"{len(chunks)} chunks\); \d+\.\ds", run_summary), run_summary
    assert "\x1b[" not in stderr, "no terminal: no live display"

    # resumed from the state after t1's first chunk: the chunks left keep their numbers of the load
    first = next(m["state"]["streams"][0] for m in out if m["type"] == "STATE" and m["state"]["level"] == "stream"
                 and m["state"]["streams"][0]["stream_name"] == "t1"
                 and [c["status"] for c in m["state"]["streams"][0]["stream_state"]["chunks"]].count("succeed") == 1)
    left = [i + 1 for i, c in enumerate(first["stream_state"]["chunks"]) if c["status"] != "succeed"]
    t1_only = write_json(tmp_path / "t1.json", {"streams": [s for s in catalog["streams"] if s["name"] == "t1"]})
    state = write_json(tmp_path / "state.json", {"level": "global", "version": "v1", "streams": [first]})
    resumed = run_olake("read", "--config", src, "--catalog", t1_only, "--state", state)
    assert resumed.returncode == 0, resumed.stderr.decode()[-3000:]
    again = resumed.stderr.decode()
    total = len(first["stream_state"]["chunks"])
    this_run = _chunk_lines(again, "t1", total, before=1)  # "rows so far" counts this run's chunks, and says so
    assert sorted(number for number, _ in this_run) == left
    rows_now = sum(rows for _, rows in this_run)
    assert rows_now == counts["t1"] - sum(rows for number, rows in _chunk_lines(stderr, "t1") if number not in left)
    [line] = [s for s in again.splitlines() if re.search(rf"public\.t1: \d+ rows in {total}/{total} chunk\(s\) ", s)]
    assert _finished_rows(line) == rows_now and " in this run (1 chunk(s) loaded by an earlier run) " in line, line
    [run_summary] = [s for s in again.splitlines() if s.startswith("olake: summary: public.t1: ")]
    assert run_summary.startswith(f"olake: summary: public.t1: {rows_now} rows loaded in this run ({total}/{total} "
                                  f"chunks, 1 of them loaded by an earlier run); "), run_summary

    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "lake")})
    write = run_olake("write", "--config", dst, stdin=read.stdout)  # read | write
    assert write.returncode == 0, write.stderr.decode()[-3000:]
    assert {m["type"] for m in messages(write.stdout)} == {"STATE"}, "write passes no TRACE on"
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
        for entry in catalog["streams"]:
            folder = tmp_path / "lake" / entry["namespace"] / entry["name"]
            assert_table_matches(conn, entry["namespace"], entry["name"], entry["json_schema"],
                                 read_parquet(str(folder)))


def _chunk_lines(stderr: str, name: str, total: int | None = None, before: int = 0) -> list[tuple[int, int]]:
    """(chunk number, rows) of each chunk line of ``public.<name>``; each rate is the chunk's own, and the
    rows so far add up the chunks of this run (saying so when ``before`` chunks were loaded earlier)."""
    found, so_far = [], 0
    since = f" in this run \\({before} chunk\\(s\\) loaded by an earlier run\\)" if before else ""
    for number, of, rows, seconds, rate, shown in re.findall(
            rf"^olake: public\.{name}: chunk (\d+)/(\d+): (\d+) rows in ([\d.]+)s \(([\d,]+) rows/s\); "
            rf"(\d+) rows so far{since}$", stderr, re.MULTILINE):
        assert total is None or int(of) == total
        _assert_rate(int(rows), float(seconds), rate)
        so_far += int(rows)
        assert int(shown) == so_far, (shown, so_far)
        found.append((int(number), int(rows)))
    return found


def _finished_rows(line: str) -> int:
    """The rows of a stream's ``finished`` line, whose rate is those rows over the scanning seconds it states."""
    found = re.search(r": (\d+) rows in \d+/\d+ chunk\(s\)(?: in this run \(\d+ chunk\(s\) loaded by an earlier "
                      r"run\))? in ([\d.]+)s, ([\d.]+)s of it scanning \(([\d,]+) rows/s\)$", line)
    assert found, line
    rows, whole, scanning, rate = found.groups()
    assert float(scanning) <= float(whole), line
    _assert_rate(int(rows), float(scanning), rate)
    return int(rows)


def _assert_rate(rows: int, seconds: float, rate: str) -> None:
    """``rate`` (as printed) is ``rows`` over ``seconds`` (printed to a tenth: within its rounding)."""
    low, high = rows / (seconds + 0.05), rows / max(seconds - 0.05, 1e-6)
    assert low - 1 <= int(rate.replace(",", "")) <= high + 1, (rows, seconds, rate)


def test_json_log_format_every_stderr_line_is_an_object(pg_cluster, pg_db, two_tables, tmp_path):
    src, cat, catalog = two_tables
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "lake")})
    ok = run_olake("--log-format", "json", "sync", "--source", src, "--destination", dst, "--catalog", cat)
    assert ok.returncode == 0, ok.stderr.decode()[-3000:]
    # every stderr line is an object: Spark's own start-up lines go to its log, not to stderr
    entries = [json.loads(line) for line in ok.stderr.decode().splitlines()]
    assert entries and all(set(e) >= {"time", "level", "message"} and e["level"] == "info" for e in entries)
    finished = {e["stream"]: e for e in entries if e.get("event") == "finished"}
    counts = _counts(pg_cluster, pg_db)
    assert {name: e["rows"] for name, e in finished.items()} == {f"public.{n}": c for n, c in counts.items()}
    assert all(e["chunks_done"] == e["chunks_total"] >= 2 for e in finished.values())

    # a run that fails after its stream started, without Spark: an incremental pass whose resumed
    # cursor PostgreSQL cannot read as the column's type
    t1 = next(s for s in catalog["streams"] if s["name"] == "t1")
    bad_catalog = write_json(tmp_path / "t1.json", {"streams": [{**t1, "sync_mode": "incremental",
                                                                 "cursor_field": ["id"]}]})
    state = write_json(tmp_path / "state.json", {"level": "global", "version": "v1", "streams": [
        {"sync_type": "incremental", "stream_name": "t1", "stream_namespace": "public",
         "stream_state": {"cursor_field": "not-a-number"}}]})
    failed = subprocess.run(olake_cmd("read", "--config", src, "--catalog", bad_catalog, "--state", state),
                            capture_output=True, timeout=300, env={**olake_env(), "OLAKE_LOG_FORMAT": "json"})
    assert failed.returncode != 0
    entries = [json.loads(line) for line in failed.stderr.decode().splitlines()]
    errors = [e for e in entries if e["level"] == "error"]
    assert len(errors) == 1 and "not-a-number" in errors[0]["message"], entries
    out = messages(failed.stdout)
    [trace] = [m["trace"] for m in out if m["type"] == "TRACE" and m["trace"]["type"] == "ERROR"]
    assert trace["error"]["message"] == errors[0]["message"]
    statuses = [m["trace"]["stream_status"]["status"] for m in out
                if m["type"] == "TRACE" and m["trace"]["type"] == "STREAM_STATUS"]
    assert statuses == ["STARTED", "INCOMPLETE"]


def test_mongodb_planner_estimates_the_documents(mongo_server, mongo_db):
    from olake_cli.core.catalog import CatalogStream
    from olake_cli.sources.mongodb.source import MongoSource
    from tests.support.mongo import connect

    with connect(mongo_server.uri) as client:
        client[mongo_db].items.insert_many([{"n": n, "s": str(n)} for n in range(1200)])
        expected = client[mongo_db].items.count_documents({})
    source = MongoSource({"type": "mongodb", "uri": mongo_server.uri, "database": mongo_db, "chunk_documents": 500})
    stream = CatalogStream.from_dict(next(s for s in source.discover()["streams"] if s["name"] == "items"))
    with source.open_session([stream], log=lambda _: None) as session:
        plan = session.plan_full_load(stream)
    assert len(plan.bounds) >= 2 and plan.row_estimate == expected
