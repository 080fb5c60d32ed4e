"""Keeping a keyed table cheap to change: compaction of change files and delete files, old snapshots.

Every change commit adds small files (one data and one position-delete file per touched partition).
Left alone they would make each later commit, and every reader, open more and more files. After a
commit that leaves more than ``MAX_SMALL_FILES`` small data files or ``MAX_DELETE_FILES`` delete
files, one extra commit (the state is not touched) rewrites the small data files into one file per
partition (their deleted rows dropped), and merges the remaining position deletes into one file per
partition; a data file whose rows are all deleted is removed. The cost of that commit grows with the
rows changed since the last compaction, never with the large files a full load wrote. Once a table
holds more than twice as many snapshots as it keeps, those beyond the newest are expired: it keeps its
``history.expire.min-snapshots-to-keep`` property's number (Iceberg's own retention property, set by
a user with any engine), else ``KEEP_SNAPSHOTS``. Expiry is metadata only: no file is deleted, so a
reader still reading an expired snapshot finishes.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow.compute as pc
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.manifest import ManifestContent
from pyiceberg.table import DataScan, FileScanTask, Table
from pyiceberg.table.update.snapshot import ExpireSnapshots

from olake_cli.core.errors import DestinationError
from olake_cli.destinations.iceberg.files import write_position_deletes, write_rows
from olake_cli.destinations.iceberg.lookup import DeleteCache
from olake_cli.destinations.iceberg.snapshot import RowDelta, live_files

MAX_DELETE_FILES = 32
MAX_MANIFESTS = 64
SMALL_FILE_ROWS = 250_000
KEEP_SNAPSHOTS = 100
KEEP_PROPERTY = "history.expire.min-snapshots-to-keep"


def maintain(table: Table, compression: str, log: Callable[[str], None]) -> Table:
    """Compact change files and delete files when there are too many; expire old snapshots.

    Only the manifest list is read to decide (one small file).
    """
    snapshot = table.current_snapshot()
    if snapshot is None:
        return table
    manifests = snapshot.manifests(io=table.io)
    delete_files = sum((m.added_files_count or 0) + (m.existing_files_count or 0)
                       for m in manifests if m.content == ManifestContent.DELETES)
    if delete_files > MAX_DELETE_FILES or len(manifests) > MAX_MANIFESTS:
        table = compact(table, compression, log)
    if len(table.metadata.snapshots) > 2 * snapshots_kept(table):
        table = expire_snapshots(table)
    return table


def snapshots_kept(table: Table) -> int:
    """How many of the newest snapshots expiry keeps: the table's KEEP_PROPERTY, else KEEP_SNAPSHOTS."""
    given = table.properties.get(KEEP_PROPERTY)
    if given is None:
        return KEEP_SNAPSHOTS
    if not given.strip().isdigit() or int(given) < 1:
        raise DestinationError(f"iceberg: table {'.'.join(table.name())}: property {KEEP_PROPERTY} is {given!r}; "
                               f"give a whole number of snapshots above 0")
    return int(given)


def compact(table: Table, compression: str, log: Callable[[str], None]) -> Table:
    """Rewrite small data files (deleted rows dropped) and merge position deletes, in one commit."""
    metadata, io = table.metadata, table.io
    tasks = list(DataScan(table_metadata=metadata, io=io).plan_files())
    cache = DeleteCache(io)
    small = [t for t in tasks if t.file.record_count < SMALL_FILE_ROWS]
    small_paths = {t.file.file_path for t in small}
    kept: dict[tuple, dict[str, list[int]]] = {}
    removed: set[str] = set()
    for task in tasks:
        deleted = cache.deleted(task)
        count = 0 if deleted is None else len(pc.unique(deleted))
        if task.file.file_path in small_paths or count >= task.file.record_count:
            removed.add(task.file.file_path)
        elif count:
            group = kept.setdefault((task.file.spec_id, task.file.partition), {})
            group[task.file.file_path] = deleted.to_pylist()
    rewritten = _rewrite(table, [t for t in small if t.file.file_path in removed], compression)
    _, delete_files = live_files(table)
    merged = [write_position_deletes(io, f"{table.location()}/data", spec_id, partition, positions, compression)
              for (spec_id, partition), positions in kept.items()]
    txn = table.transaction()
    delta = RowDelta(txn, rewrite_manifests=True).add_data(rewritten).add_deletes(merged)
    delta.remove_paths(removed | {f.file_path for f in delete_files})
    delta.commit()
    table = txn.commit_transaction()
    log(f"{'.'.join(table.name())}: compacted {len(small)} small data file(s) into {len(rewritten)} and "
        f"{len(delete_files)} delete file(s) into {len(merged)}")
    return table


def _rewrite(table: Table, tasks: list[FileScanTask], compression: str) -> list:
    """The live rows of ``tasks`` (deletes applied) written as new data files."""
    if not tasks:
        return []
    scan = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue())
    rows = scan.to_table(tasks)
    return write_rows(table.metadata, table.io, rows, compression)


def expire_snapshots(table: Table) -> Table:
    """Expire every snapshot but the newest :func:`snapshots_kept` and those a branch or a tag names (a
    user's tag keeps its snapshot readable by time travel)."""
    snapshots = sorted(table.metadata.snapshots, key=lambda s: s.timestamp_ms)
    named = {ref.snapshot_id for ref in table.metadata.refs.values()}
    old = [s.snapshot_id for s in snapshots[:-snapshots_kept(table)] if s.snapshot_id not in named]
    if old:
        txn = table.transaction()
        ExpireSnapshots(txn).by_ids(old).commit()
        table = txn.commit_transaction()
    return table
