"""How long a merge of a Parquet stream's small files takes (destinations/parquet/small_files.py): the
time a commit of ``sync --follow`` waits for it.

    .venv/bin/python bench/bench_parquet_merge.py

For each case, writes max_small_files + 1 change files of the given rows (an id, a counter, a text, the
``_olake_*`` columns; zstd, as the destination writes) into a throwaway local destination whose manifest
lists them, then times the merge the destination runs after a commit: every file but the newest read
and written into one. The last case is the bound: files just under SMALL_FILE_BYTES. Nothing here is a
test: it measures.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from olake_cli.destinations.parquet.local_store import LocalStore  # noqa: E402
from olake_cli.destinations.parquet.manifest import Manifest  # noqa: E402
from olake_cli.destinations.parquet.paths import StreamPaths, commit_file_name  # noqa: E402
from olake_cli.destinations.parquet.small_files import MAX_SMALL_FILES, SMALL_FILE_BYTES, SmallFileMerger  # noqa: E402

CASES = [300, 20_000, None]  # rows per change file (None: as many as fit under SMALL_FILE_BYTES)


def changes(rows: int, seed: int) -> pa.Table:
    """``rows`` update rows as the destination stores them."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 1 << 30, rows)
    return pa.table({"id": ids, "v": rng.integers(0, 1 << 40, rows),
                     "note": pa.array([f"row {i} {rng.integers(1 << 60)}" for i in ids]),
                     "_olake_op": pa.array(["u"] * rows), "_olake_op_id": pa.array([f"{seed:016x}{i:016x}"
                                                                                     for i in range(rows)]),
                     "_olake_synced_at": pa.array(np.full(rows, 1_700_000_000_000_000), pa.timestamp("us", tz="UTC"))})


def rows_under_limit(folder: str) -> int:
    """Rows of a change file just under SMALL_FILE_BYTES."""
    rows, probe = 10_000, os.path.join(folder, "probe.parquet")
    for _ in range(4):
        pq.write_table(changes(rows, 0), probe, compression="zstd")
        rows = int(rows * SMALL_FILE_BYTES * 0.97 / os.path.getsize(probe))
    os.remove(probe)
    return rows


def run(root: str, rows: int) -> None:
    """Write MAX_SMALL_FILES + 1 files of ``rows`` rows, merge them, print the time."""
    store, paths = LocalStore(root), StreamPaths.of(root, "public", "t")
    os.makedirs(paths.load_dir("L1"))
    names = [commit_file_name("L1", f"{k:016x}", 0) for k in range(MAX_SMALL_FILES + 1)]
    for k, name in enumerate(names):
        pq.write_table(changes(rows, k), os.path.join(paths.load_dir("L1"), name), compression="zstd")
    size = sum(os.path.getsize(os.path.join(paths.load_dir("L1"), n)) for n in names[:-1])
    state = {"sync_type": "cdc", "stream_name": "t", "stream_namespace": "public",
             "stream_state": {"load_id": "L1", "cursor_field": "0/0"}}
    manifest = Manifest(live="L1", loads={"L1": {"load_id": "L1", "files": names}}, state=state, commit=1)
    store.save_manifest(paths, manifest)
    merger = SmallFileMerger(store, MAX_SMALL_FILES, 1_000_000, "zstd", lambda line: None)
    started = time.perf_counter()
    assert merger.merge("t", paths, manifest, {names[-1]}) is not None
    print(f"{MAX_SMALL_FILES} files of {rows:,} rows ({size / 2**20:.1f} MiB): merged in "
          f"{time.perf_counter() - started:.2f} s")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="olake-bench-merge-") as work:
        for index, rows in enumerate(CASES):
            run(os.path.join(work, str(index)), rows or rows_under_limit(work))


if __name__ == "__main__":
    main()
