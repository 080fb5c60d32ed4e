"""The Parquet destination merges a stream's small files (destinations/parquet/small_files.py).

Many small commits into a real destination (``write`` in this process, a local folder and a bucket on
moto) leave few files, and readers see the same rows as from a destination that never merged (DuckDB
and pyarrow; a merge of a destination that never merged keeps every value, ``_olake_synced_at``
included). A ``write`` SIGKILLed between staging the merged file and its manifest, or right after the
manifest, leaves the rows readable once, and the rerun from the state file loses and doubles nothing.
``sync --follow`` from PostgreSQL under a writer keeps the stream's file count under the bound the whole
time and ends equal to the source.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from olake_cli.core.messages import MessageWriter
from olake_cli.pipeline.connectors import run_write
from tests.support.cdc import discover_catalog
from tests.support.cli import with_stream_ends, write_json
from tests.support.follow import Incrementer, create_counted_table, lake_equals_source, start_olake, stop, wait_until
from tests.support.object_store import create_bucket, keys, manifest_of, parquet_config, parquet_rows
from tests.support.protocol_lines import COLUMNS, catalog, record, state, write
from tests.support.verify import read_parquet

LIMIT = 4  # max_small_files of the merging destinations
COMMITS = 30  # change commits, one change file each
MERGED, CHUNK = re.compile(r"-m\d{6}-\d{4}\.parquet$"), re.compile(r"-c\d{6}-\d{4}\.parquet$")
WIDE = {**COLUMNS, "id": {"type": ["integer", "null"], "x-olake-type": "int64"}}  # ``id`` widened halfway


def _cdc_state(position: int) -> dict:
    return state("L1", None, sync_type="cdc", cursor=f"0/{position}", sync_mode="cdc")


def _lines(commits: int) -> list[dict]:
    """A cdc stream's load of 20 rows, then ``commits`` commits of an update and an insert (and every fifth
    a delete); halfway a CATALOG widens ``id`` (int32 to int64: later files hold int64)."""
    lines = [catalog(mode="cdc"), state("L1", ["pending"], sync_mode="cdc")] + [record(i, "L1") for i in range(20)]
    lines.append(_cdc_state(10))
    for c in range(1, commits + 1):
        if c == commits // 2:
            lines.append(catalog(mode="cdc", columns=WIDE))
        lines += [record(c % 20, f"u{c}", _olake_op="u", _olake_op_id=[100 + c, 1]),
                  record(1000 + c, "c", _olake_op="c", _olake_op_id=[100 + c, 2])]
        if c % 5 == 0:
            lines.append(record(1000 + c - 3, "c", _olake_op="d", _olake_op_id=[100 + c, 3]))
        lines.append(_cdc_state(100 + c))
    return lines


def _write_here(dst: str, lines: list[dict]) -> str:
    """``olake write`` of ``lines`` in this process; its log."""
    logs: list[str] = []
    stdin = with_stream_ends(b"".join(json.dumps(m).encode() + b"\n" for m in lines))
    run_write(dst, None, None, io.BytesIO(stdin), MessageWriter(io.BytesIO()), logs.append)
    return "\n".join(logs)


@dataclass
class Lake:
    """A Parquet destination in a local folder or (with ``s3``) a bucket, read as its docs say."""

    path: Path
    s3: object | None = None  # the moto server
    bucket: str = ""

    def config(self, limit: int, **extra: object) -> str:
        cfg = ({"type": "parquet", "path": str(self.path / "out")} if self.s3 is None
               else parquet_config(self.s3, self.bucket))
        return write_json(self.path / "dst.json", {**cfg, "max_small_files": limit, **extra})

    def manifest(self) -> dict:
        if self.s3 is not None:
            return manifest_of(self.s3, f"{self.bucket}/lake", "public", "t")
        return json.loads((self.path / "out" / "public" / ".t.manifest.json").read_text())

    def table(self) -> pa.Table:
        """Every row a reader sees (pyarrow; the manifest's file list in a bucket)."""
        if self.s3 is not None:
            return parquet_rows(self.s3, f"{self.bucket}/lake", "public", "t")
        return read_parquet(str(self.path / "out" / "public" / "t"))

    def rows(self, synced: bool = True) -> list[tuple]:
        """Every row a reader sees, every column (but ``_olake_synced_at`` unless ``synced``), sorted."""
        table = self.table()
        names = sorted(n for n in table.column_names if synced or n != "_olake_synced_at")
        return sorted((tuple(row[n] for n in names) for row in table.select(names).to_pylist()), key=repr)

    def duckdb_rows(self) -> list[tuple]:
        """The local folder as DuckDB reads it (``union_by_name``), without ``_olake_synced_at``."""
        folder = self.path / "out" / "public" / "t"
        return duckdb.sql(f"SELECT id, v, _olake_op, _olake_op_id, _olake_commit_ts FROM read_parquet("
                          f"'{folder}/part-*.parquet', union_by_name = true) ORDER BY ALL").fetchall()

    def stored(self) -> list[str]:
        """The data files stored for the stream (in its load folders, or the bucket's objects), relative
        to the manifest's folder."""
        if self.s3 is not None:
            found = keys(self.s3, self.bucket, "lake/public/.t%.")
            return sorted(k[len("lake/public/"):] for k in found if not k.endswith("/"))
        base = self.path / "out" / "public"
        return sorted(f"{d}/{n}" for d in os.listdir(base) if d.startswith(".t%.") for n in os.listdir(base / d))

    def unaccounted(self) -> list[str]:
        """Stored data files the manifest neither lists nor retired."""
        manifest = self.manifest()
        retired = {f".t%.{d}/{n}" for d, names in manifest.get("retired_files", {}).items() for n in names}
        return [s for s in self.stored() if s not in manifest["live_files"] and s not in retired
                and not any(s.startswith(f".t%.{d}/") for d in manifest["retired"])]


def _lake(where: str, request, path: Path) -> Lake:
    path.mkdir()
    if where == "local":
        return Lake(path)
    server = request.getfixturevalue("moto_server")
    return Lake(path, server, create_bucket(server, f"merge-{os.getpid()}-{path.name}-{time.monotonic_ns()}"))


@pytest.mark.parametrize("where", ["local", "s3"])
def test_many_small_commits_keep_few_files_and_readers_see_the_same_rows(where, request, tmp_path):
    merging, plain = _lake(where, request, tmp_path / "merging"), _lake(where, request, tmp_path / "plain")
    lines = _lines(COMMITS)
    log = _write_here(merging.config(LIMIT), lines)
    _write_here(plain.config(1000), lines)
    files = merging.manifest()["live_files"]
    # the load's chunk file and at most LIMIT small files
    assert len(files) <= 1 + LIMIT and len(plain.manifest()["live_files"]) == 1 + COMMITS
    assert any(MERGED.search(name) for name in files) and log.count("public.t: merged ") >= 5, log
    assert merging.rows(synced=False) == plain.rows(synced=False)
    if where == "local":
        assert merging.duckdb_rows() == plain.duckdb_rows()
        assert len(merging.duckdb_rows()) == 20 + 2 * COMMITS + COMMITS // 5

    # a merge moves rows as they are: the plain lake merged by a commit that adds no rows reads the same
    # (its 66 change rows in files of at most 40 rows)
    before = plain.rows()
    assert _write_here(plain.config(LIMIT, rows_per_file=40), [catalog(mode="cdc", columns=WIDE), _cdc_state(200)]
                       ).count(f"merged {COMMITS} small file(s) into 2") == 1
    assert plain.rows() == before
    live = plain.manifest()["live_files"]
    assert len(live) == 3, live
    # what the merge retired is deleted at the stream's next commit
    _write_here(plain.config(LIMIT), [catalog(mode="cdc", columns=WIDE), _cdc_state(201)])
    assert plain.stored() == sorted(live)
    assert plain.rows() == before


@pytest.mark.parametrize("where,step", [("local", "merge-staged"), ("local", "merge-committed"),
                                        ("s3", "merge-committed")])
def test_a_kill_during_a_merge_loses_and_doubles_nothing(where, step, request, tmp_path):
    lake, expected = _lake(where, request, tmp_path / "lake"), _lake("local", request, tmp_path / "expected")
    lines, state_file = _lines(12), tmp_path / "state.json"
    # change commit 3 leaves 3 small files, more than max_small_files=2: the kill comes in the merge of
    # commits 1 and 2 that follows it (before the state file has commit 3's state)
    killed = write(lake.config(2), lines, state_file, crash_at=step)
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    assert json.loads(state_file.read_text())["streams"][0]["stream_state"]["cursor_field"] == "0/102"
    third = lines.index(_cdc_state(103)) + 1
    _write_here(expected.config(1000), lines[:third])
    assert lake.rows(synced=False) == expected.rows(synced=False), "readers see the rows once, never both"

    # the rerun replays from the state file, as a reader would: commit 3 again, then the rest
    rest = [catalog(mode="cdc")] + lines[lines.index(_cdc_state(102)) + 1:]
    again = write(lake.config(2), rest, state_file)
    assert again.returncode == 0, again.stderr.decode()[-2000:]
    _write_here(expected.config(1000), [catalog(mode="cdc")] + lines[third:])
    assert lake.rows(synced=False) == expected.rows(synced=False), "rows lost or doubled by the rerun"
    assert any(MERGED.search(name) for name in lake.manifest()["live_files"])
    assert lake.unaccounted() == [], "nothing stays that the manifest neither lists nor retired"


def test_sync_follow_into_parquet_keeps_the_file_count_bounded(pg_cluster, pg_db, tmp_path):
    source = pg_cluster.dsn(pg_db)
    create_counted_table(source)
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot="follow_merge", publication="follow_merge_pub", create_slot_and_publication=True))
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "lake"),
                                             "max_small_files": LIMIT})
    discover_catalog(src, tmp_path / "cat.json", {"t": "cdc"})
    log, folder = tmp_path / "sync.log", tmp_path / "lake" / "public" / "t"
    run = start_olake(["sync", "--source", src, "--destination", dst, "--catalog", str(tmp_path / "cat.json"),
                       "--follow", "--commit-interval", "1"], log, stdout=subprocess.DEVNULL)
    writer, counts = Incrementer(source, seed=17, pause=0.02), []
    try:
        wait_until(lambda: "following the change log" in log.read_text(), "the change phase starts", run=run)
        writer.start()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            counts.append(len(list(folder.glob("part-*.parquet"))))
            time.sleep(0.5)
        writer.stop()
        wait_until(lambda: lake_equals_source(folder, source), "the Parquet files equal the source", run=run)
        took = stop(run)
    finally:
        if writer.is_alive():
            writer.stop()
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    text = log.read_text()
    assert run.returncode == 0 and took < 10, text[-3000:]
    chunks = [n for n in json.loads((folder.parent / ".t.manifest.json").read_text())["live_files"] if CHUNK.search(n)]
    # the chunk files and at most LIMIT small files (one more between a commit and its merge)
    assert chunks and max(counts) <= len(chunks) + LIMIT + 1, (counts, chunks)
    assert writer.transactions > 200 and text.count("public.t: merged ") >= 2, text[-3000:]
    assert lake_equals_source(folder, source)
